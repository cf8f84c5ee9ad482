#!/usr/bin/env bash
# test_server_errors.sh: every error path of bitspark serve over raw HTTP (curl): malformed JSON,
# wrong types, unknown roles, empty messages, unsupported values, a prompt longer than the
# context, body size limit (413, declared and chunked), API key (401), unknown endpoint (404),
# wrong method (405), a full queue (503); each answer has the OpenAI error shape and status,
# and the server stays healthy with every slot idle afterwards. A second server on a port in use
# exits with an error instead of sharing it (no SO_REUSEPORT: it would take half the traffic).
source "$(dirname "$0")/server_lib.sh"
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
start_server U -m "$M" -np 1 -t 1 --ctx 64 --queue 1 --body-limit 4096 --api-key sekret
AUTH=(-H "Authorization: Bearer sekret")

port=${U##*:}
if timeout 60 "$B" serve --host 127.0.0.1 --port "$port" -m "$M" -np 1 -t 1 --ctx 64 >"$T/second.log" 2>&1; then
    bad "a second server on port $port started: $(tail -c 300 "$T/second.log")"
elif grep -q "cannot listen on 127.0.0.1:$port" "$T/second.log" && grep -qi "address already in use" "$T/second.log"; then
    ok "a second server on the port in use: refused ($(grep -m1 -i 'in use' "$T/second.log"))"
else
    bad "a second server on port $port: $(tail -c 300 "$T/second.log")"
fi

# req NAME STATUS TYPE [curl args...]: POST/GET and check status + error.type (TYPE '-': none)
req() {
    local name=$1 want=$2 type=$3; shift 3
    local code
    code=$(curl -s -o "$T/body" -w '%{http_code}' --max-time 30 -H 'Content-Type: application/json' "$@")
    if [ "$code" != "$want" ]; then bad "$name: status $code, want $want: $(head -c 300 "$T/body")"; return; fi
    # the server writes compact JSON: {"error":{"code":N,"message":"...","type":"..."}}
    if [ "$type" != - ] && ! { grep -q "^{\"error\":{\"code\":$want,\"message\":\"[^\"]" "$T/body" &&
                               grep -q "\"type\":\"$type\"" "$T/body"; }; then
        bad "$name: body $(head -c 300 "$T/body")"; return
    fi
    ok "$name ($want${type:+ $type})"
}
chat() { req "$1" "$2" "$3" "${AUTH[@]}" "$U/v1/chat/completions" -d "$4"; }

chat "malformed JSON" 400 invalid_request_error '{"messages": [ {"role": "user", "content": "hi"} '
chat "not an object" 400 invalid_request_error '[1, 2, 3]'
chat "empty body" 400 invalid_request_error ''
chat "messages missing" 400 invalid_request_error '{"max_tokens": 2}'
chat "messages not an array" 400 invalid_request_error '{"messages": "hello"}'
chat "empty messages" 400 invalid_request_error '{"messages": []}'
chat "unknown role" 400 invalid_request_error '{"messages": [{"role": "wizard", "content": "hi"}]}'
chat "role not a string" 400 invalid_request_error '{"messages": [{"role": 7, "content": "hi"}]}'
chat "user without content" 400 invalid_request_error '{"messages": [{"role": "user"}]}'
chat "content of wrong type" 400 invalid_request_error '{"messages": [{"role": "user", "content": 42}]}'
chat "image part unsupported" 400 invalid_request_error '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
chat "temperature as string" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}'
# constrained output: a bad grammar or schema is the client's error; best_of is refused
chat "grammar syntax error" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= \"a"}'
chat "grammar undefined rule" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= other"}'
chat "json_schema unsupported keyword" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "json_schema": {"allOf": []}}'
chat "two constraints" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= \"a\"", "json_schema": {}}'
chat "tool_choice without tools" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}'
chat "tool_choice unknown function" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "f"}}]}'
chat "best_of refused" 400 not_supported_error '{"messages": [{"role": "user", "content": "hi"}], "best_of": 2}'
chat "tool_choice auto accepted" 200 - '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "tool_choice": "auto"}'
chat "max_tokens fractional" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.5}'
chat "top_p out of range" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "top_p": 3}'
chat "stream not a bool" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}'
chat "n = 17" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "n": 17}'
chat "n = 2 streaming" 400 not_supported_error '{"messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": true}'
chat "stop of numbers" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "stop": [1]}'
chat "stop with a U+0000" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "stop": ["s\u0000z"]}'
chat "stop string with a U+0000" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "stop": "s\u0000"}'
chat "logit_bias bad id" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"99999999": 1}}'
chat "top_logprobs too many" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 50}'
chat "tools not an array" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "tools": {}}'
chat "json_schema without a schema" 400 invalid_request_error '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}}'
chat "template refuses (no user query)" 400 invalid_request_error '{"messages": [{"role": "system", "content": "only a system"}]}'
long=$(printf 'word %.0s' $(seq 1 200))
chat "prompt longer than the context" 400 exceed_context_size_error "{\"messages\": [{\"role\": \"user\", \"content\": \"$long\"}]}"
req "completions: prompt of wrong type" 400 invalid_request_error "${AUTH[@]}" "$U/v1/completions" -d '{"prompt": {"a": 1}}'
req "completions: token out of range" 400 invalid_request_error "${AUTH[@]}" "$U/v1/completions" -d '{"prompt": [1, 2, 999999]}'
req "completions: suffix unsupported" 400 not_supported_error "${AUTH[@]}" "$U/v1/completions" -d '{"prompt": "a", "suffix": "b"}'
req "tokenize: content missing" 400 invalid_request_error "${AUTH[@]}" "$U/tokenize" -d '{}'
req "detokenize: bad id" 400 invalid_request_error "${AUTH[@]}" "$U/detokenize" -d '{"tokens": [-1]}'

# body size: declared too large (rejected before reading), and chunked past the limit
big=$(head -c 6000 /dev/zero | tr '\0' 'a')
printf '{"messages": [{"role": "user", "content": "%s"}]}' "$big" >"$T/big.json"
req "body over the limit (Content-Length)" 413 invalid_request_error "${AUTH[@]}" "$U/v1/chat/completions" --data-binary @"$T/big.json"
req "body over the limit (chunked)" 413 invalid_request_error "${AUTH[@]}" -H 'Transfer-Encoding: chunked' "$U/v1/chat/completions" --data-binary @"$T/big.json"

# API key
req "no API key" 401 authentication_error "$U/props"
req "wrong API key" 401 authentication_error -H "Authorization: Bearer nope" "$U/props"
req "right API key" 200 - "${AUTH[@]}" "$U/props"
req "the bare key, without Bearer (llama-server takes it)" 200 - -H "Authorization: sekret" "$U/props"
req "a bare wrong key" 401 authentication_error -H "Authorization: sekre" "$U/props"
req "health needs no key" 200 - "$U/health"
req "chat page needs no key" 200 - "$U/"
req "unknown endpoint" 404 not_found_error "${AUTH[@]}" "$U/v1/nothing"
req "GET on a POST endpoint" 405 invalid_request_error "${AUTH[@]}" "$U/v1/chat/completions"
for p in /rerank /v1/rerank /reranking /v1/reranking; do
  req "POST $p (llama-server's, not offered)" 501 not_supported_error "${AUTH[@]}" "$U$p" -d '{"query": "a", "documents": ["b"]}'
done
req "POST /props (llama-server's without --props)" 501 not_supported_error "${AUTH[@]}" "$U/props" -d '{}'

# full queue (a second server: one slot, one place in the queue): two endless streams hold the
# slot and the queue, a third request gets 503; killing the clients frees the slot
# endless streams must outlast the checks: a model trained for 65536 tokens (-c is capped by it)
ML=$(synth_model srv-tiny-q1_0-ctx64k --preset tiny --type q1_0 --n-ctx 65536)
start_server Q -m "$ML" -np 1 -t 1 --ctx 65536 --queue 1
endless='{"messages": [{"role": "user", "content": "go"}], "max_tokens": 100000, "ignore_eos": true, "stream": true}'
pids=()
for i in 1 2; do
    curl -sN --max-time 120 -H 'Content-Type: application/json' "$Q/v1/chat/completions" -d "$endless" >"$T/endless$i" 2>/dev/null &
    pids+=($!)
done
state=""
for _ in $(seq 1 200); do   # until the slot is busy and one request waits
    m=$(curl -s "$Q/metrics")
    if echo "$m" | grep -q '^llamacpp:requests_deferred 1$' && echo "$m" | grep -q '^llamacpp:requests_processing 1$'; then
        state=ready; break
    fi
    sleep 0.05
done
[ "$state" = ready ] && ok "one request generating, one waiting" || bad "queue never filled"
req "queue full" 503 unavailable_error "$Q/v1/chat/completions" -d "$endless"
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
idle=""
for _ in $(seq 1 100); do
    curl -s "$Q/slots" | grep -q '"is_processing":false' && curl -s "$Q/metrics" | grep -q '^llamacpp:requests_deferred 0$' &&
        { idle=yes; break; }
    sleep 0.05
done
[ "$idle" = yes ] && ok "killed clients: slot freed, queue empty" || bad "slot still busy after the clients died"
grep -q '^data: {' "$T/endless1" && ok "the first stream had streamed" || bad "first stream: $(head -c 200 "$T/endless1")"
curl -s "$Q/metrics" | grep -q '^llamacpp:requests_rejected_total 1$' && ok "503 counted" || bad "503 not counted"
req "queue server answers again" 200 - "$Q/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'

# still healthy, slot idle, errors counted
req "healthy after all that" 200 - "$U/health"
curl -s "${AUTH[@]}" "$U/slots" | grep -q '"is_processing":false' && ok "slot idle" || bad "slot not idle"
req "a normal request works" 200 - "${AUTH[@]}" "$U/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'
finish
