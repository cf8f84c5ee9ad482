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
# up to 64 stop strings (clients send many; llama-server has no limit), 256 KiB of them together
stops_req() {   # stops_req COUNT BYTES: the status with COUNT stop strings of BYTES each
  $PY -c "import json, sys; n, b = map(int, sys.argv[1:]); print(json.dumps({'prompt': 'hi', 'max_tokens': 2,
'stop': [chr(65 + i % 26) * b + str(i) for i in range(n)]}))" "$1" "$2" \
    | curl -s -o "$T/stop.json" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @- "$U/v1/completions"
}
st=$(stops_req 64 100); [ "$st" = 200 ] && ok "64 stop strings: served" || bad "64 stop strings: $st $(head -c 200 "$T/stop.json")"
st=$(stops_req 65 1)
[ "$st" = 400 ] && grep -q "at most 64 strings" "$T/stop.json" && ok "65 stop strings: 400" || bad "65 stop strings: $st"
st=$(stops_req 5 60000)
[ "$st" = 400 ] && grep -q "262144 bytes together" "$T/stop.json" && ok "5 stop strings of 60000 bytes: 400 (their sum)" \
  || bad "5 x 60000 bytes of stop strings: $st $(head -c 200 "$T/stop.json")"
curl -sf "$U/health" >/dev/null && ok "healthy afterwards" || bad "not healthy afterwards"
curl -s "$U/slots" | grep -q '"is_processing":true' && bad "a slot stuck" || ok "slots idle"
finish
