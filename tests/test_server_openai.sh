#!/usr/bin/env bash
# test_server_openai.sh: bitspark serve (-np 4, synthetic tiny q1_0 model) driven by the official
# openai npm package (v6, pinned in tests/node/package-lock.json) through node's test runner:
# models, chat (stream / non-stream, usage, timings, stop, thinking, logprobs, tools), completions
# (logprobs, echo), errors, tokenize round trip, abort frees the slot, batched == solo greedy
# output, prompt cache reuse == fresh computation, metrics.
source "$(dirname "$0")/server_lib.sh"
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
start_server SPEC -m "$M" -md "$D" -np 2 -t 2 --ctx 1024
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
    --draft-window 16
out=$(cmp_spec "$TP" "$TS" 1 "Tell me a story about a cat." "What is the capital of France?") &&
    ok "trained drafter, 2 at once: same answers, drafts accepted ($out)" || bad "trained drafter: $out"
curl -s "$SPEC/metrics" | grep -q '^llamacpp:spec_decode_num_draft_tokens_total [1-9]' && ok "metrics count drafts" || bad "draft metrics"
r=$(curl -s -H 'Content-Type: application/json' "$SPEC/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"draft_max":0}')
echo "$r" | grep -q '"draft_n":0,' && ok "draft_max 0 turns drafting off" || bad "draft_max 0: $r"
kill "$URL_PID"; wait "$URL_PID"; rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: clean exit" || bad "SIGTERM exit status $rc"
finish
