#!/usr/bin/env bash
# test_server_limits.sh: the server's limits against hostile requests, loopback only, bounded in
# time (tests/server_limits.py does the work; "bound" = a plain request's answer time while the
# hostile one runs, 2 s):
#  - framing: two different Content-Lengths or two Hosts are 400, an unknown Transfer-Encoding
#    is 501 at once (RFC 9112);
#  - a request whose client leaves, streaming or not, is counted in requests_client_closed_total
#    (and frees its slot);
#  - body budget: idle sockets that declare 8 MiB + 1 MiB block nothing; /ready says busy while
#    bodies really hold the budget; a holder that stops sending while others wait is cut;
#  - --n-predict caps max_tokens -1 + ignore_eos under --context-shift, and /props reports it;
#  - embeddings run on the scheduler: /health answers within the bound meanwhile (chat within
#    the bound or 30 x its idle time on a loaded machine), a client that leaves cancels its
#    work, SIGTERM with --drain-timeout 3 exits within 8 s;
#  - an 8192 x 8192 PNG is refused from its header (no 192 MB decode), /health answers within the
#    bound while clients loop it;
#  - memory: n 16 x top_logprobs 20 replies and a 7 MB /tokenize with pieces leave RSS near idle;
#    a reply past the logprob limit is a 400.
source "$(dirname "$0")/server_lib.sh"
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
FX=${BS_FIXTURES:?}
PY=/usr/bin/python3
L="$SRC/tests/server_limits.py"
check() {   # check NAME MODE ARGS...
  local name=$1; shift
  out=$($PY "$L" "$@" 2>&1) && ok "$name: $out" || bad "$name: $out"
}
start_server U -m "$M" -np 2 -t 1 --ctx 4096
check "framing" framing "$U"
check "client left: 499" leave "$U"
check "body budget" budget "$U"
start_server BS -m "$M" -np 1 -t 1 --ctx 512 --body-limit 2000000 --body-budget 1000000
check "a body that stops while others wait for budget is cut" stall "$BS"

start_server N -m "$M" -np 2 -t 1 --ctx 64 --context-shift --n-predict 40
check "--n-predict 40" npredict "$N" 40

start_server E -m "$M" -np 2 -t 2 --ctx 2048 --embeddings
check "embeddings on the scheduler" embed "$E"

start_server D -m "$M" -np 2 -t 2 --ctx 2048 --embeddings --drain-timeout 3
$PY -c '
import json, sys, threading, urllib.request
body = json.dumps({"input": [[(i * 7 + j) % 200 + 10 for j in range(1000)] for i in range(8)]}).encode()
def one():
    try: urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/embeddings", data=body,
                                headers={"Content-Type": "application/json"}), timeout=120).read()
    except Exception: pass
ts = [threading.Thread(target=one) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]' "$D" &
CL=$!
sleep 1.5
t0=$(date +%s.%N)
kill -TERM "$D_PID"; wait "$D_PID"; rc=$?
secs=$(echo "$(date +%s.%N) - $t0" | bc)
wait $CL
if [ $rc -eq 0 ] && [ "$(echo "$secs < 8" | bc)" = 1 ]; then ok "SIGTERM during embeddings, --drain-timeout 3: exit 0 in ${secs}s"
else bad "SIGTERM during embeddings: exit $rc after ${secs}s (bound 8 s)"; fi

start_server V -m "$FX/tiny-f32.gguf" --mmproj "$FX/vision/tiny-mmproj-f32.gguf" -np 1 -t 1 --ctx 512
check "8192 x 8192 PNG" image "$V" "$V_PID"

if [ "$SANITIZED" = 1 ]; then
  echo "skip RSS (a sanitizer build's shadow memory makes RSS another story)"
else
  start_server R -m "$M" -np 4 -t 2 --ctx 2048 --context-shift
  curl -s -H 'Content-Type: application/json' "$R/v1/chat/completions" -d '{"messages":[{"role":"user","content":"warm up"}],"max_tokens":2}' >/dev/null
  check "RSS after big replies" rss "$R" "$R_PID"
fi
finish
