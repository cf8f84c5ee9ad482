#!/usr/bin/env bash
# test_server_soak.sh: a bounded soak of bitspark serve -np 4 on the tiny model (45 s, 15 s in a
# sanitizer build; BS_SOAK_SECONDS overrides): 8 concurrent clients mixing streaming,
# non-streaming, cancelled and abandoned generations, malformed requests and tokenize
# (tests/server_soak.py). Every valid request answered correctly, every bad one a 400, no slot
# stuck, RSS within 2 x its warm value + 64 MiB (plain builds: ASan's quarantine holds freed
# memory), and the server healthy at the end.
source "$(dirname "$0")/server_lib.sh"
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
secs=${BS_SOAK_SECONDS:-45}; [ "$SANITIZED" = 1 ] && secs=${BS_SOAK_SECONDS:-15}
start_server U -m "$M" -np 4 -t 2 --ctx 1024
out=$(/usr/bin/python3 "$SRC/tests/server_soak.py" "$U" "$U_PID" "$secs" 8 2>&1) && ok "soak: $out" || bad "soak: $out"
m=$(curl -s "$U/metrics")
echo "$m" | grep -q '^llamacpp:requests_processing 0$' && ok "metrics: nothing processing" || bad "metrics: $m"
finish
