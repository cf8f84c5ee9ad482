#!/usr/bin/env bash
# test_server_normalize.sh: `bitspark serve` tokenizes with the vocabulary's Unicode
# normalization (NFC for a qwen35 vocabulary) and `--tokenizer-normalize none` gives llama.cpp's
# ids instead: /tokenize of decomposed text against `bitspark tokenize` of the same text, with
# and without the switch, and the two differ; a chat request with NFD text counts the NFC
# prompt's tokens. A bad switch value stops serve with a message.
source "$(dirname "$0")/server_lib.sh"
M=$(synth_model srv-tiny-q1_0 --preset tiny --type q1_0)
start_server D -m "$M" -np 1 -t 1 --ctx 256
start_server N -m "$M" -np 1 -t 1 --ctx 256 --tokenizer-normalize none
nfd='Cafe\u0301 cre\u0300me \u212a'
ids() { curl -s -H 'Content-Type: application/json' --max-time 30 "$1/tokenize" -d "{\"content\": \"$nfd\"}" |
        /usr/bin/python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["tokens"])))'; }
text=$(printf "$nfd")
want_nfc=$("$B" tokenize -m "$M" "$text")
want_none=$("$B" tokenize -m "$M" --tokenizer-normalize none "$text")
got_d=$(ids "$D") got_n=$(ids "$N")
[ -n "$got_d" ] && [ "$got_d" = "$want_nfc" ] && ok "serve: /tokenize applies NFC ($got_d)" || bad "serve NFC: [$got_d] want [$want_nfc]"
[ -n "$got_n" ] && [ "$got_n" = "$want_none" ] && [ "$got_n" != "$got_d" ] &&
    ok "serve --tokenizer-normalize none: llama.cpp's ids ($got_n)" || bad "serve none: [$got_n] want [$want_none]"
usage() { curl -s -H 'Content-Type: application/json' --max-time 60 "$1/v1/completions" -d "{\"prompt\": \"$2\", \"max_tokens\": 1, \"temperature\": 0}" |
          /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])'; }
a=$(usage "$D" "$nfd") b=$(usage "$D" "$(printf "$nfd" | /usr/bin/python3 -c 'import sys,unicodedata,json; print(json.dumps(unicodedata.normalize("NFC", sys.stdin.read()))[1:-1])')")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "completion prompt: NFD text counts as its NFC form ($a tokens)" || bad "prompt_tokens $a vs $b"
if "$B" serve -m "$M" --port 0 --tokenizer-normalize nfq >"$T/bad.out" 2>"$T/bad.err"; then bad "serve accepted nfq"
elif grep -q "expected auto|none|nfc|nfd|nfkc|nfkd, got 'nfq'" "$T/bad.err"; then ok "serve: bad --tokenizer-normalize refused"
else bad "serve bad value: $(cat "$T/bad.err")"; fi
finish
