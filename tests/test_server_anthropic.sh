#!/usr/bin/env bash
# test_server_anthropic.sh: the other client APIs of bitspark serve, each driven by its official
# npm client (pinned in tests/node/package-lock.json) against a synthetic tiny q1_0 model:
# Anthropic's Messages API with @anthropic-ai/sdk (tests/node/anthropic.test.mjs: messages,
# streaming events, thinking, stop sequences, a tool round trip, count_tokens, error shapes,
# x-api-key) and OpenAI's Responses API with openai's client.responses
# (tests/node/responses.test.mjs). Both compare their answers with /v1/chat/completions.
source "$(dirname "$0")/server_lib.sh"
node_deps
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
start_server URL -m "$M" -np 2 -t 2 --ctx 1024
start_server KEY -m "$M" -np 1 -t 1 --ctx 512 --api-key secret-key
for suite in anthropic responses; do
    if BS_URL=$URL BS_KEY_URL=$KEY node --test --test-concurrency=1 "$SRC/tests/node/$suite.test.mjs" >"$T/$suite.out" 2>&1; then
        ok "$suite client suite ($(grep -c '^ok ' "$T/$suite.out") tests)"
    else
        cat "$T/$suite.out"; bad "$suite client suite"
    fi
done
curl -sf "$URL/health" >/dev/null && ok "healthy afterwards" || bad "health after the suites"
kill "$URL_PID"; wait "$URL_PID"; rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: clean exit" || bad "SIGTERM exit status $rc"
finish
