#!/usr/bin/env bash
# test_server_anthropic.sh: the other client APIs of bitspark serve, each driven by its official
# npm client (pinned in tests/node/package-lock.json) against a synthetic tiny q1_0 model:
# Anthropic's Messages API with @anthropic-ai/sdk (tests/node/anthropic.test.mjs: messages,
# streaming events, thinking, stop sequences, a tool round trip, count_tokens, error shapes,
# those the HTTP layer gives before routing too, x-api-key) and OpenAI's Responses API with
# openai's client.responses (tests/node/responses.test.mjs). Both compare their answers with /v1/chat/completions.
source "$(dirname "$0")/server_lib.sh"
node_deps
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
start_server URL -m "$M" -np 2 -t 2 --ctx 1024
start_server KEY -m "$M" -np 1 -t 1 --ctx 512 --api-key secret-key --body-limit 65536
for suite in anthropic responses; do
    if BS_URL=$URL BS_KEY_URL=$KEY node --test --test-concurrency=1 "$SRC/tests/node/$suite.test.mjs" >"$T/$suite.out" 2>&1; then
        ok "$suite client suite ($(grep -c '^ok ' "$T/$suite.out") tests)"
    else
        cat "$T/$suite.out"; bad "$suite client suite"
    fi
done
curl -sf "$URL/health" >/dev/null && ok "healthy afterwards" || bad "health after the suites"
# Anthropic streams: message_start's usage splits the prompt as the final usage does (the same
# conversation twice: the second is served from the prompt cache, cache_read_input_tokens > 0)
for k in 1 2; do
  curl -sN -H 'Content-Type: application/json' "$URL/v1/messages" -o "$T/am$k.sse" \
    -d '{"model": "m", "max_tokens": 4, "stream": true, "messages": [{"role": "user", "content": "A cached question about rivers?"}]}'
done
if /usr/bin/python3 - "$T/am2.sse" <<'PYEOF'
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith('data: {')]
start = ev[0]['message']['usage']; end = [e for e in ev if e['type'] == 'message_delta'][0]['usage']
print(start, end)
sys.exit(0 if ev[0]['type'] == 'message_start' and start['cache_read_input_tokens'] > 0 and
         all(start[k] == end[k] for k in ('input_tokens', 'cache_read_input_tokens')) else 1)
PYEOF
then ok "anthropic stream: message_start's usage = the final split"
else bad "anthropic stream usage: $(grep -m2 usage "$T/am2.sse" | head -c 600)"; fi
# Responses usage: the output tokens spent in the think block are reasoning_tokens (the output
# starts inside it: all of them while it stays open), none when thinking is off
for effort in medium none; do
  curl -s -H 'Content-Type: application/json' "$URL/v1/responses" -o "$T/resp.json" \
    -d "{\"input\": \"Say something.\", \"max_output_tokens\": 6, \"temperature\": 0, \"ignore_eos\": true, \"reasoning\": {\"effort\": \"$effort\"}}"
  if /usr/bin/python3 - "$T/resp.json" "$effort" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); u = r['usage']; n = u['output_tokens_details']['reasoning_tokens']
think = [x for x in r['output'] if x['type'] == 'reasoning']
text = [x for x in r['output'] if x['type'] == 'message' and x['content'][0]['text']]
if sys.argv[2] == 'none': sys.exit(0 if n == 0 and not think else 1)
sys.exit(0 if think and (n == u['output_tokens'] if not text else 0 < n < u['output_tokens']) else 1)
PYEOF
  then ok "responses (effort $effort): reasoning_tokens $(grep -o '"reasoning_tokens":[0-9]*' "$T/resp.json")"
  else bad "responses (effort $effort) usage: $(head -c 400 "$T/resp.json")"; fi
done
# images (serve --mmproj, the vision fixture): an Anthropic base64 image block and a Responses
# input_image answer as the same picture sent to /v1/chat/completions as an image_url part
FX=${BS_FIXTURES:?}
start_server VIS -m "$FX/tiny-f32.gguf" --mmproj "$FX/vision/tiny-mmproj-f32.gguf" -np 1 -t 2 --ctx 512
out=$(node -e '
  const Anthropic = require(process.env.BS_NODE_DIR + "/node_modules/@anthropic-ai/sdk").default;
  const OpenAI = require(process.env.BS_NODE_DIR + "/node_modules/openai").default;
  const fs = require("fs");
  const [base, png] = process.argv.slice(1);
  const data = fs.readFileSync(png).toString("base64"), url = "data:image/png;base64," + data;
  const q = "Describe this picture.", opt = { temperature: 0, ignore_eos: true };
  (async () => {
    const oa = new OpenAI({ baseURL: base + "/v1", apiKey: "x", maxRetries: 0, timeout: 120_000 });
    const chat = await oa.chat.completions.create({ model: "m", max_tokens: 8, ...opt, messages: [{ role: "user",
      content: [{ type: "image_url", image_url: { url } }, { type: "text", text: q }] }] });
    const an = await new Anthropic({ baseURL: base, apiKey: "x", maxRetries: 0, timeout: 120_000 }).messages.create({
      model: "m", max_tokens: 8, ...opt, messages: [{ role: "user", content: [{ type: "image",
      source: { type: "base64", media_type: "image/png", data } }, { type: "text", text: q }] }] });
    const rs = await oa.responses.create({ model: "m", max_output_tokens: 8, ...opt, input: [{ role: "user",
      content: [{ type: "input_image", image_url: url }, { type: "input_text", text: q }] }] });
    const want = (chat.choices[0].message.reasoning_content ?? "") + "|" + (chat.choices[0].message.content ?? "");
    const got = (b) => (b.find((x) => x.type === "thinking")?.thinking ?? "") + "|" + (b.find((x) => x.type === "text")?.text ?? "");
    const gotR = (o) => (o.find((x) => x.type === "reasoning")?.content[0].text ?? "") + "|" +
      (o.find((x) => x.type === "message")?.content[0].text ?? "");
    const counted = await new Anthropic({ baseURL: base, apiKey: "x", maxRetries: 0 }).messages.countTokens({ model: "m",
      messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data } },
      { type: "text", text: q }] }] });
    const textOnly = await oa.chat.completions.create({ model: "m", max_tokens: 1, messages: [{ role: "user", content: q }] });
    const r = { want, anthropic: got(an.content), responses: gotR(rs.output), n: [chat.usage.prompt_tokens,
      an.usage.input_tokens + an.usage.cache_read_input_tokens, rs.usage.input_tokens, counted.input_tokens],
      text_only: textOnly.usage.prompt_tokens };
    console.log(JSON.stringify(r));
    process.exit(r.anthropic === want && r.responses === want && r.n.every((n) => n === r.n[0]) && r.n[0] > r.text_only ? 0 : 1);
  })().catch((e) => { console.log(String(e)); process.exit(1); });' "$VIS" "$FX/vision/image.png" 2>&1) \
  && ok "images: Anthropic image blocks and Responses input_image answer as image_url parts ($out)" || bad "images: $out"
# every one of those images (the chat and Responses parts, the Anthropic block, its token
# count) and one in an image_url part whose key is spelled with an escape was decoded on the job
# pool, none on an HTTP thread: 5 requests there, the text-only one not
png64=$(base64 -w0 "$FX/vision/image.png")
printf '{"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image\\u005furl", "image\\u005furl": {"url": "data:image/png;base64,%s"}}, {"type": "text", "text": "hi"}]}]}' "$png64" > "$T/escaped.json"
st=$(curl -s -o "$T/escaped.out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$T/escaped.json" "$VIS/v1/chat/completions")
[ "$st" = 200 ] && ok "an image_url part with an escaped key: 200" || bad "escaped image_url key: $st $(head -c 300 "$T/escaped.out")"
jobs=$(curl -s "$VIS/metrics" | awk '/^[a-z:_]*requests_image_jobs_total /{print $2}')
[ "$jobs" = 5 ] && ok "images decoded on the job pool only (5 requests)" || bad "image job requests: '$jobs', want 5"
# (a sanitizer build: an error or a leak would make the exit status nonzero)
for v in URL KEY VIS; do
    pid=${v}_PID
    kill "${!pid}"; wait "${!pid}"; rc=$?
    [ $rc -eq 0 ] && ok "$v server: SIGTERM, clean exit" || bad "$v server: exit status $rc"
done
finish
