#!/bin/bash
# test_server_vulkan.sh: bitspark serve --device vulkan (lavapipe in CI, validation layer on: any
# message fails) with 3 slots and the trained tiny pair of models/ (the drafter on the device
# too): concurrent greedy requests, drafting and plain, each answer equal to the CPU server's
# plain greedy answer; slots batched in passes on the device (/metrics); an identical request
# served from the prompt cache; a sampled answer from the top 40 found on the device equal to one
# sampled from whole rows; sampled drafting in two slots at once equal to one alone. Skipped (77) without a Vulkan device. Kept short: lavapipe is slow.
. "$(dirname "$0")/server_lib.sh"
PY=/usr/bin/python3
if ! "$B" devices 2>/dev/null | grep -q '^vulkan:[0-9]'; then echo "skipped: no Vulkan device"; exit 77; fi
TM="$SRC/models/bonsai-tiny-q1_0.gguf" DM="$SRC/models/bonsai-tiny-dspark.gguf"
start_server CPU -m "$TM" -np 3 -t 2 --ctx 512 --device cpu
# the CPU server above is already up; the validation layer where it is installed
if BITSPARK_VK_VALIDATE=1 "$B" devices 2>&1 | grep -q 'VK_LAYER_KHRONOS_validation is not installed'; then
    echo "note: VK_LAYER_KHRONOS_validation is not installed: the validation checks are skipped"
else
    export BITSPARK_VK_VALIDATE=1
fi
start_server VK -m "$TM" -md "$DM" -np 3 -t 2 --ctx 512 --device vulkan --draft-max 4
grep -q 'device: Vulkan' "$T/server.VK.log" && ok "the server runs on $(sed -n 's/.*device: \(Vulkan.*\)$/\1/p' "$T/server.VK.log" | head -1)" \
    || bad "not on Vulkan: $(head -c 600 "$T/server.VK.log")"

# ask URL: three requests at once (two drafting, one plain, different lengths); prints the
# answers' messages and drafted token counts as JSON
ask() {
    "$PY" - "$1" <<'EOF'
import json, sys, threading, urllib.request
url = sys.argv[1]
reqs = [("Tell me a story about a cat.", 20, 4), ("What is the capital of France?", 8, 0), ("Write a poem about the sea.", 14, 4)]
out = [None] * len(reqs)
def one(i, p, n, d):
    body = json.dumps({"messages": [{"role": "user", "content": p}], "max_tokens": n, "temperature": 0,
                       "ignore_eos": True, "draft_max": d}).encode()
    r = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    y = json.load(urllib.request.urlopen(r, timeout=300))
    out[i] = [y["choices"][0]["message"], y.get("timings", {}).get("draft_n", 0)]
ts = [threading.Thread(target=one, args=(i,) + q) for i, q in enumerate(reqs)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps(out))
EOF
}
a=$(ask "$CPU") b=$(ask "$VK")
same=$(printf '%s\n%s\n' "$a" "$b" | "$PY" -c 'import json,sys; a, b = (json.loads(l) for l in sys.stdin)
print(all(x[0] == y[0] for x, y in zip(a, b)) and len(a) == 3, b[0][1] + b[2][1], b[1][1])')
[ "${same%% *}" = True ] && [ "$(echo "$same" | cut -d' ' -f2)" -gt 0 ] && [ "${same##* }" = 0 ] \
    && ok "3 slots on the device, drafting + plain at once: each answer = the CPU's greedy one (drafted: $same)" \
    || bad "device answers differ or nothing drafted ($same): CPU $a VK $b"
m=$(curl -s "$VK/metrics")
busy=$(echo "$m" | sed -n 's/^llamacpp:n_busy_slots_per_decode \(.*\)/\1/p')
"$PY" -c "import sys; sys.exit(0 if float('${busy:-0}') > 1 else 1)" && echo "$m" | grep -qE '^llamacpp:spec_decode_num_draft_tokens_total [1-9]' \
    && ok "slots share passes on the device ($busy slots per decode pass)" || bad "metrics: $(echo "$m" | grep -E 'busy_slots|draft_tokens')"
# the same prompt twice: the second comes from the prompt cache on the device, same answer
q='{"messages":[{"role":"user","content":"Same prompt again"}],"max_tokens":4,"temperature":0}'
a1=$(curl -s -H 'Content-Type: application/json' "$VK/v1/chat/completions" -d "$q"); a2=$(curl -s -H 'Content-Type: application/json' "$VK/v1/chat/completions" -d "$q")
c2=$(echo "$a2" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p'); p2=$(echo "$a2" | sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p')
msg() { echo "$1" | "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]))'; }
[ -n "$c2" ] && [ "$c2" = "$p2" ] && [ "$(msg "$a1")" = "$(msg "$a2")" ] \
    && ok "an identical prompt is served from the cache on the device ($c2 of $p2 tokens)" || bad "cache: $c2 of $p2 [$a1] [$a2]"
# --sleep-idle-seconds on the device: the weights' device buffers go and come back (with
# --embeddings too: its session must not keep them there), the answers stay
start_server VKS -m "$TM" -np 1 -t 2 --ctx 256 --device vulkan --sleep-idle-seconds 1 --embeddings
q='{"prompt":"Hello there","n_predict":8,"temperature":0}'
e='{"input":"Hello there"}'
s1=$(curl -s -H 'Content-Type: application/json' "$VKS/completion" -d "$q")
e1=$(curl -s -H 'Content-Type: application/json' "$VKS/v1/embeddings" -d "$e"); sleep 3
slp=$(curl -s "$VKS/props" | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("is_sleeping"))')
e2=$(curl -s -H 'Content-Type: application/json' "$VKS/v1/embeddings" -d "$e")
s2=$(curl -s -H 'Content-Type: application/json' "$VKS/completion" -d "$q")
txt() { echo "$1" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["content"])'; }
vec() { echo "$1" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["embedding"][:4])'; }
[ "$slp" = True ] && grep -q "weights' memory freed" "$T/server.VKS.log" && [ -n "$(txt "$s1")" ] && [ "$(txt "$s1")" = "$(txt "$s2")" ] \
    && [ -n "$(vec "$e1")" ] && [ "$(vec "$e1")" = "$(vec "$e2")" ] \
    && ok "asleep on the device with --embeddings, the weights' memory freed; awake, the same answer and embedding" \
    || bad "device sleep: sleeping=$slp [$s1] [$s2] [${e1:0:80}] [${e2:0:80}] $(grep -m2 'server:' "$T/server.VKS.log")"
# sampling (temperature 0.8, top-k 40: the chain reads the 40 best logits only): the device finds
# them and only they come back; the answer is the one sampled from whole rows (a server with
# BITSPARK_VK_NO_TOPK=1), the same seed
q='{"prompt":"Hello there","n_predict":12,"temperature":0.8,"top_k":40,"seed":7,"ignore_eos":true}'
t1=$(curl -s -H 'Content-Type: application/json' "$VKS/completion" -d "$q")
export BITSPARK_VK_NO_TOPK=1
start_server VKR -m "$TM" -np 1 -t 2 --ctx 256 --device vulkan
unset BITSPARK_VK_NO_TOPK
t2=$(curl -s -H 'Content-Type: application/json' "$VKR/completion" -d "$q")
[ -n "$(txt "$t1")" ] && [ "$(txt "$t1")" = "$(txt "$t2")" ] \
    && ok "sampled with the top 40 found on the device = sampled from whole rows: $(txt "$t1" | head -c 40)" \
    || bad "sampled answers differ: [$t1] [$t2]"
# sampled drafting (temperature 0.8, top-k 40, one seed): two requests at once, their slots'
# blocks and sampled chains in shared submissions, then the same alone: the same text
sampled_spec() {
    "$PY" - "$VK" <<'EOF'
import json, sys, threading, urllib.request
url, out = sys.argv[1], [None] * 3
def one(i):
    body = json.dumps({"prompt": "Once upon a time", "n_predict": 16, "temperature": 0.8, "top_k": 40, "seed": 11,
                       "ignore_eos": True, "draft_max": 4}).encode()
    r = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
    y = json.load(urllib.request.urlopen(r, timeout=300))
    out[i] = [y["content"], y.get("timings", {}).get("draft_n", 0)]
ts = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
for t in ts: t.start()
for t in ts: t.join()
one(2)
print(len({o[0] for o in out}) == 1 and all(o[1] > 0 for o in out), json.dumps(out))
EOF
}
ss=$(sampled_spec)
[ "${ss%% *}" = True ] && ok "sampled drafting, two slots at once and one alone: the same text" \
    || bad "sampled drafting together and alone: $ss"
grep -q 'vulkan validation:' "$T/server.VK.log" "$T/server.VKS.log" && bad "validation messages: $(grep -hm3 'vulkan validation:' "$T/server.VK.log" "$T/server.VKS.log")" \
    || ok "no validation messages"
finish
