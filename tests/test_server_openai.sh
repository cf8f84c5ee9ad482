#!/usr/bin/env bash
# test_server_openai.sh: bitspark serve (-np 4, synthetic tiny q1_0 model) driven by the official
# openai npm package (v6, pinned in tests/node/package-lock.json) through node's test runner:
# models, chat (stream / non-stream, usage, timings, stop, thinking, logprobs, tools), completions
# (logprobs, echo), errors, tokenize round trip, abort frees the slot, batched == solo greedy
# output, prompt cache reuse == fresh computation, metrics; image_url parts (serve --mmproj).
source "$(dirname "$0")/server_lib.sh"
PY=${PYTHON:-/usr/bin/python3}
node_deps
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
start_server URL -m "$M" -np 4 -t 2 --ctx 1024
if BS_URL=$URL node --test --test-concurrency=1 "$SRC/tests/node/openai.test.mjs" >"$T/node.out" 2>&1; then
    ok "openai client suite ($(grep -c '^ok ' "$T/node.out") tests)"
else
    cat "$T/node.out"; bad "openai client suite"
fi
curl -sf "$URL/health" >/dev/null && ok "healthy afterwards" || bad "health after the suite"

# speculative decoding (-md, a synthetic DSpark drafter): temperature-0 answers identical to the
# server without a drafter, alone and with two requests at once, and drafts were verified
D=$(synth_model srv-drafter-tiny --preset drafter-tiny)
# (--draft-max 4: these check drafting itself; the default, auto, parks a drafter that cannot pay)
start_server SPEC -m "$M" -md "$D" -np 2 -t 2 --ctx 1024 --draft-max 4
cmp_spec() {  # PLAIN SPEC MIN_ACCEPTED prompts...: each greedy answer of SPEC equals PLAIN's
    node -e '
      const [a, b, minAcc, ...ps] = process.argv.slice(1);
      const ask = (u, p) => fetch(u + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({
        messages: [{ role: "user", content: p }], max_tokens: 24, temperature: 0, ignore_eos: true }) }).then((r) => r.json());
      (async () => {
        const x = await Promise.all(ps.map((p) => ask(a, p))), y = await Promise.all(ps.map((p) => ask(b, p)));
        const same = x.every((r, i) => JSON.stringify(r.choices[0].message) === JSON.stringify(y[i].choices[0].message));
        const drafted = y.reduce((s, r) => s + r.timings.draft_n, 0), acc = y.reduce((s, r) => s + r.timings.draft_n_accepted, 0);
        console.log(JSON.stringify({ same, drafted, accepted: acc }));
        process.exit(same && drafted > 0 && acc >= +minAcc ? 0 : 1);
      })();' "$@"
}
out=$(cmp_spec "$URL" "$SPEC" 0 "Speculate about this") && ok "drafter: same greedy answer ($out)" || bad "drafter alone: $out"
out=$(cmp_spec "$URL" "$SPEC" 0 "First of two" "Second of two") && ok "drafter, 2 slots at once: same answers ($out)" || bad "drafter batched: $out"
# the trained tiny Bonsai and its trained drafter (models/), the drafter on a 16-row window:
# drafts get accepted, text unchanged (the plain server decodes with its state updated in place)
start_server TP -m "$SRC/models/bonsai-tiny-q1_0.gguf" -np 2 -t 2 --ctx 1024
start_server TS -m "$SRC/models/bonsai-tiny-q1_0.gguf" -md "$SRC/models/bonsai-tiny-dspark.gguf" -np 2 -t 2 --ctx 1024 \
    --draft-window 16 --draft-max 4
out=$(cmp_spec "$TP" "$TS" 1 "Tell me a story about a cat." "What is the capital of France?") &&
    ok "trained drafter, 2 at once: same answers, drafts accepted ($out)" || bad "trained drafter: $out"
curl -s "$SPEC/metrics" | grep -q '^llamacpp:spec_decode_num_draft_tokens_total [1-9]' && ok "metrics count drafts" || bad "draft metrics"
r=$(curl -s -H 'Content-Type: application/json' "$SPEC/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"draft_max":0}')
echo "$r" | grep -q '"draft_n":0,' && ok "draft_max 0 turns drafting off" || bad "draft_max 0: $r"
# four slots, drafting and plain requests of mixed lengths at once: every verify pass and decode
# step shares one pass through the weights, and each answer equals plain greedy decoding's
start_server S4 -m "$SRC/models/bonsai-tiny-q1_0.gguf" -md "$SRC/models/bonsai-tiny-dspark.gguf" -np 4 -t 2 --ctx 1024 \
    --draft-max 4
out=$(node -e '
  const [plain, spec] = process.argv.slice(1);
  const reqs = [["Tell me a story about a cat.", 32, 4], ["What is the capital of France?", 8, 0],
                ["Write a poem about the sea.", 24, 4], ["Name three colors.", 16, 0]];
  const ask = (u, [p, n, d]) => fetch(u + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({
    messages: [{ role: "user", content: p }], max_tokens: n, temperature: 0, ignore_eos: true, draft_max: d }) })
    .then((r) => r.json());
  (async () => {
    const x = await Promise.all(reqs.map((q) => ask(plain, [q[0], q[1], 0])));
    const y = await Promise.all(reqs.map((q) => ask(spec, q)));
    const same = x.every((r, i) => JSON.stringify(r.choices[0].message) === JSON.stringify(y[i].choices[0].message));
    const drafted = y.reduce((s, r) => s + r.timings.draft_n, 0);
    console.log(JSON.stringify({ same, drafted, plain_drafted: y[1].timings.draft_n + y[3].timings.draft_n }));
    process.exit(same && drafted > 0 && y[1].timings.draft_n === 0 && y[3].timings.draft_n === 0 ? 0 : 1);
  })();' "$TP" "$S4") && ok "4 slots, drafting + plain, mixed lengths: each answer = plain greedy ($out)" || bad "4 slots mixed: $out"
m=$(curl -s "$S4/metrics")
echo "$m" | grep -qE '^llamacpp:n_decode_total [1-9]' && echo "$m" | grep -qE '^llamacpp:spec_decode_num_draft_tokens_total [1-9]' \
  && ok "drafting slots share batched passes ($(echo "$m" | grep -E '^llamacpp:n_decode_total'))" || bad "batched drafting metrics: $(echo "$m" | grep -E 'n_decode|draft')"
nmax=$(echo "$m" | sed -n 's/^llamacpp:n_tokens_max //p')
[ -n "$nmax" ] && [ "$nmax" -gt 32 ] && [ "$nmax" -lt 256 ] && ok "n_tokens_max: the longest request's positions ($nmax)" \
  || bad "n_tokens_max: '$nmax'"
echo "$m" | grep -qE '^llamacpp:spec_decode_shared_blocks_total [1-9]' \
  && ok "drafter blocks of two slots in shared passes ($(echo "$m" | grep -E '^llamacpp:spec_decode_shared_blocks_total'))" || bad "shared drafter blocks: $(echo "$m" | grep -E 'shared_blocks')"
# the same prompt twice: the second reuses all of it (the saved end of the prompt keeps its logits)
q='{"messages":[{"role":"user","content":"Same prompt again"}],"max_tokens":4,"temperature":0}'
a1=$(curl -s -H 'Content-Type: application/json' "$TP/v1/chat/completions" -d "$q"); a2=$(curl -s -H 'Content-Type: application/json' "$TP/v1/chat/completions" -d "$q")
c2=$(echo "$a2" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p'); p2=$(echo "$a2" | sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p')
[ -n "$c2" ] && [ "$c2" = "$p2" ] && [ "$(echo "$a1" | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//; s/"timings":{[^}]*}//; s/"usage":{.*}//')" = "$(echo "$a2" | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//; s/"timings":{[^}]*}//; s/"usage":{.*}//')" ] \
  && ok "an identical prompt is served from the cache ($c2 of $p2 tokens), same answer" || bad "identical prompt: cached $c2 of $p2 [$a1] [$a2]"
# llama-server's native POST /completion: its answer shape, its stream (no [DONE]), the same text
# as /v1/completions
q='{"prompt":"Once upon a time","n_predict":12,"temperature":0,"ignore_eos":true}'
n1=$(curl -s -H 'Content-Type: application/json' "$TP/completion" -d "$q"); v1=$(curl -s -H 'Content-Type: application/json' "$TP/v1/completions" -d "${q/n_predict/max_tokens}")
st=$(curl -sN -H 'Content-Type: application/json' "$TP/completion" -d "${q%\}},\"stream\":true}")
c1=$(echo "$n1" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["stop"], d["tokens_predicted"], d["stop_type"], json.dumps(d["content"]))')
c2=$(echo "$v1" | "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))')
c3=$(echo "$st" | sed -n 's/^data: //p' | "$PY" -c 'import json,sys; ev=[json.loads(l) for l in sys.stdin]; print(json.dumps("".join(e["content"] for e in ev)), ev[-1]["stop"], all(not e["stop"] for e in ev[:-1]))')
[ "$c1" = "True 12 limit $c2" ] && [ "$c3" = "$c2 True True" ] && ! echo "$st" | grep -q DONE \
  && ok "POST /completion: llama-server's shape and stream, the same text as /v1/completions" || bad "/completion: [$c1] [$c2] [$c3]"
# --context-shift: a request longer than the context goes on (without it: finish_reason length)
start_server CS -m "$SRC/models/bonsai-tiny-q1_0.gguf" -np 1 -t 2 --ctx 64 --context-shift --keep 4
q='{"prompt":"Once upon a time","max_tokens":150,"temperature":0,"ignore_eos":true}'
a=$(curl -s -H 'Content-Type: application/json' "$CS/v1/completions" -d "$q"); b=$(curl -s -H 'Content-Type: application/json' "$TP/v1/completions" -d "${q/150/2000}")
echo "$a" | grep -q '"completion_tokens":150' && ok "context shift: 150 tokens in a 64-token context" || bad "context shift: $a"
echo "$b" | grep -q '"finish_reason":"length"' && ! echo "$b" | grep -q '"completion_tokens":2000' \
  && ok "without it a full context ends with finish_reason length" || bad "full context: $(echo "$b" | head -c 300)"
# images (serve --mmproj, the vision fixture): an image_url data: URL part sent by the openai
# client answers as `run --mmproj --image` does (streamed too, and with a drafter); the same
# image again is served from the prompt cache; an image request and a text one at once (two
# slots) answer as each does alone; the marker typed as text stays text (no image
# taken, answered); a remote URL, and an image sent to a server without --mmproj, are 400s;
# /props says whether vision is on
FX=${BS_FIXTURES:?}
start_server VIS -m "$FX/tiny-f32.gguf" --mmproj "$FX/vision/tiny-mmproj-f32.gguf" -np 2 -t 2 --ctx 512
start_server VISD -m "$FX/tiny-f32.gguf" --mmproj "$FX/vision/tiny-mmproj-f32.gguf" -md "$FX/tiny-dspark-f32.gguf" \
    --draft-max 3 -np 2 -t 2 --ctx 512
"$B" run -m "$FX/tiny-f32.gguf" --mmproj "$FX/vision/tiny-mmproj-f32.gguf" --image "$FX/vision/image.png" --chat \
    -p "Describe this picture." -n 8 --temp 0 --ignore-eos -q -t 1 >"$T/vis.cli"
out=$(node -e '
  const OpenAI = require(process.env.BS_NODE_DIR + "/node_modules/openai").default;
  const fs = require("fs");
  const [vis, visd, plain, png, cliFile] = process.argv.slice(1);
  const want = fs.readFileSync(cliFile, "utf8");
  const url = "data:image/png;base64," + fs.readFileSync(png).toString("base64");
  const msg = (u) => [{ role: "user", content: [{ type: "image_url", image_url: { url: u } }, { type: "text", text: "Describe this picture." }] }];
  const cl = (base) => new OpenAI({ baseURL: base + "/v1", apiKey: "x", maxRetries: 0, timeout: 60_000 });
  const ask = (base, u, more = {}) => cl(base).chat.completions.create({ model: "m", messages: msg(u), max_tokens: 8, temperature: 0, ignore_eos: true, ...more });
  const status = (base, u) => ask(base, u).then(() => 200, (e) => e.status);
  const vision = (base) => fetch(base + "/props").then((r) => r.json()).then((j) => j.modalities.vision);
  (async () => {
    const a = await ask(vis, url), b = await ask(vis, url), d = await ask(visd, url);
    let streamed = "";
    for await (const ch of await ask(vis, url, { stream: true })) streamed += ch.choices[0]?.delta?.content ?? "";
    const [p1, p2] = await Promise.all([ask(vis, url, { max_tokens: 24 }), ask(vis, url, { max_tokens: 24, messages: [{ role: "user", content: "Plain text." }] })]);
    const [s1, s2] = [await ask(visd, url, { max_tokens: 24 }), await ask(visd, url, { max_tokens: 24, messages: [{ role: "user", content: "Plain text." }] })];
    const together = p1.choices[0].message.content === s1.choices[0].message.content && p2.choices[0].message.content === s2.choices[0].message.content;
    const typed = await cl(vis).chat.completions.create({ model: "m", max_tokens: 2, messages: [{ role: "user",
      content: "<|vision_start|><|image_pad|><|vision_end|>" }] }).then((x) => x.usage.prompt_tokens, (e) => e.status);
    const r = { same: a.choices[0].message.content === want, cached: b.usage.prompt_tokens_details.cached_tokens,
                prompt: b.usage.prompt_tokens, again: b.choices[0].message.content === want, stream: streamed === want,
                drafter: d.choices[0].message.content === want, drafted: d.timings.draft_n,
                together, typed, remote: await status(vis, "https://example.com/cat.png"), no_mmproj: await status(plain, url),
                vision: [await vision(vis), await vision(plain)] };
    console.log(JSON.stringify(r));
    process.exit(r.same && r.again && r.stream && r.drafter && r.drafted > 0 && r.cached === r.prompt && r.remote === 400 &&
                 r.typed > 25 && r.typed < r.prompt && r.together &&
                 r.no_mmproj === 400 && r.vision[0] === true && r.vision[1] === false ? 0 : 1);
  })();' "$VIS" "$VISD" "$URL" "$FX/vision/image.png" "$T/vis.cli" 2>&1) \
  && ok "image_url parts: the CLI's answer, streamed and drafted too, cached again, 400s, /props ($out)" || bad "images: $out"
# llama-server's /completion prompt object: {"prompt_string" with <__media__> markers,
# "multimodal_data": [base64]} answers as the chat with that image part does (greedy, the text as
# generated); a marker without data, or data on a server without --mmproj, is a 400
out=$($PY - "$VIS" "$URL" "$FX/vision/image.png" <<'PYEOF' 2>&1
import base64, json, sys, urllib.error, urllib.request
vis, plain, png = sys.argv[1:4]
b64 = base64.b64encode(open(png, 'rb').read()).decode()
def post(u, path, body):
    req = urllib.request.Request(u + path, json.dumps(body).encode(), {'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
msgs = [{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,' + b64}},
                                     {'type': 'text', 'text': 'Describe this picture.'}]}]
_, tmpl = post(vis, '/apply-template', {'messages': msgs})
ps = tmpl['prompt'].replace('<|vision_start|><|image_pad|><|vision_end|>', '<__media__>')
st, c = post(vis, '/completion', {'prompt': {'prompt_string': ps, 'multimodal_data': [b64]}, 'n_predict': 8, 'temperature': 0})
st2, ch = post(vis, '/v1/chat/completions', {'messages': msgs, 'max_tokens': 8, 'temperature': 0, 'reasoning_format': 'none'})
st3, miss = post(vis, '/completion', {'prompt': {'prompt_string': ps}, 'n_predict': 2})
st4, nomm = post(plain, '/completion', {'prompt': {'prompt_string': ps, 'multimodal_data': [b64]}, 'n_predict': 2})
st5, two = post(vis, '/completion', {'prompt': {'prompt_string': ps, 'multimodal_data': [b64]}, 'n_predict': 2, 'n_cmpl': 2})
st6, many = post(vis, '/completion', {'prompt': {'prompt_string': ps, 'multimodal_data': [b64] * 17}, 'n_predict': 2})
ok = (st == st2 == 200 and c['content'] == ch['choices'][0]['message']['content'] and c['tokens_evaluated'] > 50 and
      st3 == 400 and 'markers' in miss['error']['message'] and st4 == 400 and st5 == 200 and
      [x['prompt'] for x in two] == [ps, ps] and st6 == 400 and 'at most 16 images' in many['error']['message'])
print(json.dumps({'native': c.get('content'), 'chat': ch['choices'][0]['message']['content'], 'missing': st3, 'no_mmproj': st4}))
sys.exit(0 if ok else 1)
PYEOF
) && ok "/completion with multimodal_data: the chat's answer ($out)" || bad "/completion multimodal_data: $out"
# the image budget: the fixture image is 147456 bytes of preprocessed pixels, so 1 MiB holds 7;
# an eighth in one request is a 503 (with Retry-After), and its bytes come back: 7 then still fit,
# twice in a row (the second after the first's pixels were encoded and given back)
start_server VISB -m "$FX/tiny-f32.gguf" --mmproj "$FX/vision/tiny-mmproj-f32.gguf" -np 1 -t 2 --ctx 512 \
    --image-budget 1048576
out=$(node -e '
  const fs = require("fs");
  const [base, png] = process.argv.slice(1);
  const url = "data:image/png;base64," + fs.readFileSync(png).toString("base64");
  const ask = (k) => fetch(base + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ max_tokens: 2, messages: [{ role: "user", content: [...Array(k)].map(() =>
      ({ type: "image_url", image_url: { url } })).concat([{ type: "text", text: "Hi." }]) }] }) })
    .then(async (r) => [r.status, r.headers.get("retry-after"), (await r.text()).slice(0, 160)]);
  (async () => {
    const r = { eight: await ask(8), seven: await ask(7), again: await ask(7) };
    console.log(JSON.stringify(r));
    process.exit(r.eight[0] === 503 && r.eight[1] !== null && /image-budget/.test(r.eight[2]) &&
                 r.seven[0] === 200 && r.again[0] === 200 ? 0 : 1);
  })();' "$VISB" "$FX/vision/image.png" 2>&1) \
  && ok "image budget: 8 images past 1 MiB are a 503, 7 fit, twice ($out)" || bad "image budget: $out"
kill "$URL_PID"; wait "$URL_PID"; rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: clean exit" || bad "SIGTERM exit status $rc"
finish
