#!/usr/bin/env bash
# test_server_load.sh: bounded loopback load on bitspark serve -np 4 (synthetic tiny model):
# 200 chat requests (16 in a sanitizer build), 8 at a time, half streaming, each checked (status, finish_reason, token
# count, SSE framing); then 12 streaming clients killed mid-stream (4 generating, 8 queued):
# every slot must be idle and the queue empty shortly after, and the server must still answer.
source "$(dirname "$0")/server_lib.sh"
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
start_server U -m "$M" -np 4 -t 2 --ctx 512
N=200; [ "$SANITIZED" = 1 ] && N=16
out=$(node "$SRC/tests/node/load.mjs" "$U" $N 8 6 2>&1)
echo "$out" | grep -q '"ok":true' && ok "$N requests, 8 concurrent: $out" || bad "load: $out"
out=$(node "$SRC/tests/node/load.mjs" "$U" kill 12 4 2>&1)
echo "$out" | grep -q '"ok":true' && ok "12 clients killed mid-stream: $out" || bad "kill: $out"
curl -sf "$U/health" >/dev/null && ok "healthy" || bad "not healthy"
r=$(curl -s -H 'Content-Type: application/json' "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"still there?"}],"max_tokens":4,"ignore_eos":true}')
echo "$r" | grep -q '"completion_tokens":4' && ok "answers after the load" || bad "after load: $r"
m=$(curl -s "$U/metrics")
echo "$m" | grep -q '^llamacpp:requests_processing 0$' && ok "metrics: nothing processing" || bad "metrics: $m"
finish
