#!/usr/bin/env bash
# test_server_hostile.sh: bitspark serve under hostile clients, loopback only, bounded in time
# (tests/server_hostile.py does the work):
#  - memory: 16 concurrent 8 MB chat bodies on a 256-token context: every answer is a 400 and
#    the peak RSS stays under 2 x the idle RSS + 64 MiB (bodies wait for the body budget and a
#    prompt provably longer than the context is refused before it is tokenized);
#  - slowloris: 300 connections (more than the old limit of 256) dripping a header line every
#    2 s for 20 s: /health answers every 0.25 s in under 1 s, chat requests complete, and every
#    dripping connection is dropped by the 10 s header deadline;
#  - stop strings: one of more than 64 KiB is a 400, one of 64 KiB is served.
source "$(dirname "$0")/server_lib.sh"
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
PY=/usr/bin/python3
start_server U -m "$M" -np 2 -t 1 --ctx 256
curl -s -H 'Content-Type: application/json' "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"warm up"}],"max_tokens":2}' >/dev/null
N=16; [ "$SANITIZED" = 1 ] && N=4   # the sanitizers' shadow memory makes RSS another story
if [ "$SANITIZED" = 1 ]; then
  out=$($PY "$SRC/tests/server_hostile.py" memory "$U" "$U_PID" $N 2>&1)
  echo "$out" | grep -q '"statuses": \["400"\]' && ok "memory ($N bodies, sanitizer build: statuses only): $out" || bad "memory: $out"
else
  out=$($PY "$SRC/tests/server_hostile.py" memory "$U" "$U_PID" $N 2>&1) && ok "memory: $out" || bad "memory: $out"
fi
out=$($PY "$SRC/tests/server_hostile.py" slowloris "$U" 300 20 2>&1) && ok "slowloris: $out" || bad "slowloris: $out"
# a stop string is at most 64 KiB (each is matched by an automaton, linear in the text; the
# limit bounds its tables): one byte more is a 400 that says so, the limit itself is served
stop_req() {   # stop_req BYTES: the status of a 2-token completion with a stop string that long
  $PY -c "import json, sys; print(json.dumps({'prompt': 'hi', 'max_tokens': 2, 'stop': [' ' * int(sys.argv[1])]}))" "$1" \
    | curl -s -o "$T/stop.json" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @- "$U/v1/completions"
}
st=$(stop_req 65537)
[ "$st" = 400 ] && grep -q "at most 65536 bytes" "$T/stop.json" && ok "a stop string of 65537 bytes: 400" \
  || bad "a stop string of 65537 bytes: $st $(head -c 200 "$T/stop.json")"
st=$(stop_req 65536)
[ "$st" = 200 ] && ok "a stop string of 65536 bytes: served" || bad "a stop string of 65536 bytes: $st $(head -c 200 "$T/stop.json")"
curl -sf "$U/health" >/dev/null && ok "healthy afterwards" || bad "not healthy afterwards"
curl -s "$U/slots" | grep -q '"is_processing":true' && bad "a slot stuck" || ok "slots idle"
finish
