#!/usr/bin/env bash
# server_loop_guard.sh MODEL EXPECT.json: run by test_server_loop_guard (which builds the looping
# model and the expected texts). Starts `bitspark serve --loop-guard rewind` on it (checkpoints
# every 4 tokens, so rewinds restore a ring checkpoint and replay) and runs
# tests/node/loop_guard.test.mjs: raw HTTP (fetch, SSE parsed by hand) and the openai client,
# stream and not, stop / rewind / off / per-request thresholds, /metrics, /props, bad fields;
# then a server with the fixture's DSpark drafter: stop mode while drafting gives the same
# answer, a rewind request decodes without drafting.
source "$(dirname "$0")/server_lib.sh"
MODEL=${1:?model} EXPECT=${2:?expect.json}
node_deps
start_server URL -m "$MODEL" --loop-guard rewind --loop-ckpt-every 4 --loop-ckpt-count 2 -np 2 -t 2 --ctx 256
if BS_URL=$URL BS_EXPECT=$EXPECT node --test --test-concurrency=1 "$SRC/tests/node/loop_guard.test.mjs" \
    >"$T/node.out" 2>&1; then
    ok "loop guard suite ($(grep -c '^ok ' "$T/node.out") tests)"
else
    cat "$T/node.out"; bad "loop guard suite"
fi

# curl: the raw body of a rewind answer
P=$(node -e 'console.log(JSON.stringify(require(process.argv[1]).prompt))' "$EXPECT")
r=$(curl -s -H 'Content-Type: application/json' "$URL/v1/completions" -d "{\"prompt\":$P,\"max_tokens\":64,\"temperature\":0}")
echo "$r" | grep -q '"loop_guard":{"mode":"rewind","loops_detected":1,"rewinds":1,' &&
    ok "curl: loop_guard in the raw body" || bad "curl: $r"

DRAFTER=$(node -e 'console.log(require(process.argv[1]).drafter)' "$EXPECT")
start_server SPEC -m "$MODEL" -md "$DRAFTER" --loop-guard stop -np 1 -t 2 --ctx 256
cmp_draft() {  # the stop-guarded answer with and without drafting; drafts made or not
    node -e '
      const [url, expect] = process.argv.slice(1), E = require(expect);
      const ask = (extra) => fetch(url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({
        prompt: E.prompt, max_tokens: 64, temperature: 0, ...extra }) }).then((r) => r.json());
      (async () => {
        const a = await ask({}), b = await ask({ draft_max: 0 }), c = await ask({ loop_guard: "rewind" });
        const res = { drafted: a.timings.draft_n, same: a.choices[0].text === b.choices[0].text,
          stop_text: a.choices[0].text === E.stop_text, stopped: a.loop_guard.stopped,
          rewind_text: c.choices[0].text === E.rewind_text, rewind_drafted: c.timings.draft_n };
        console.log(JSON.stringify(res));
        process.exit(res.drafted > 0 && res.same && res.stop_text && res.stopped && res.rewind_text &&
          res.rewind_drafted === 0 ? 0 : 1);
      })();' "$SPEC" "$EXPECT"
}
out=$(cmp_draft) && ok "drafter: stop mode drafts, same answer; rewind decodes alone ($out)" || bad "drafter: $out"
finish
