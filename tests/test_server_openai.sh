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
kill "$URL_PID"; wait "$URL_PID"; rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: clean exit" || bad "SIGTERM exit status $rc"
finish
