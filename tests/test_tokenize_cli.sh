#!/usr/bin/env bash
# test_tokenize_cli.sh: `bitspark tokenize` / `detokenize` on the fixture vocabulary: ids as
# llama.cpp gives them, --special, --json, round trips through the shell, and clean failures
# (non-zero exit, one-line message, no crash) on bad UTF-8, bad ids and missing files.
set -u
B=${BITSPARK:?} M=${BS_FIXTURES:?}/tiny-f32.gguf T=${BS_TMP:-/tmp}/tokcli.$$
mkdir -p "$T"
fail=0
check() {  # check NAME EXPECTED ACTUAL
    if [ "$2" != "$3" ]; then echo "FAIL $1: expected [$2] got [$3]"; fail=1; else echo "ok   $1"; fi
}
expect_error() {  # expect_error NAME PATTERN CMD...
    local name=$1 pat=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ $rc -ne 1 ] || ! grep -q -- "$pat" "$T/err" || [ "$(wc -l <"$T/err")" -ne 1 ]; then
        echo "FAIL $name: rc=$rc stderr=[$(cat "$T/err")]"; fail=1
    else echo "ok   $name"; fi
}

check "plain ids" "72 101 597 569" "$("$B" tokenize -m "$M" "Hello world")"
check "leading space" "654 101 597 569" "$("$B" tokenize -m "$M" " Hello world")"
check "json" "[72, 101, 597, 44, 569, 33]" "$("$B" tokenize -m "$M" --json "Hello, world!")"
check "specials as text" "60 124 366 95 329 406 124 62 117 851" "$("$B" tokenize -m "$M" "<|im_start|>user")"
check "specials parsed" "957 117 851" "$("$B" tokenize -m "$M" --special "<|im_start|>user")"
want=$(/usr/bin/python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['prompt_tokens'])))" "$BS_FIXTURES/tiny-f32.json")
check "prompt file" "$want" "$("$B" tokenize -m "$M" --special -f "$BS_FIXTURES/prompt.txt")"
check "prompt stdin" "$want" "$("$B" tokenize -m "$M" --special -f - <"$BS_FIXTURES/prompt.txt")"

# round trips (compared as files: command substitution would drop trailing newlines)
for text in "Hello, world!" $'tabs\tand\tnewlines\n\nend\n' "Привет мир 東京 🎉" "  trailing   " "<|im_end|> x"; do
    printf '%s' "$text" >"$T/in"
    ids=$("$B" tokenize -m "$M" -f "$T/in")
    "$B" detokenize -m "$M" $ids >"$T/back"
    if cmp -s "$T/in" "$T/back"; then echo "ok   round trip [$text]"; else echo "FAIL round trip [$text]"; fail=1; fi
done
check "detokenize commas" "<|im_start|>user" "$("$B" detokenize -m "$M" 957,117,851)"
check "detokenize no-special" "user" "$("$B" detokenize -m "$M" --no-special 957 117 851)"
# a code point split across tokens, cut short: U+FFFD, never raw bytes
check "partial code point" "$(printf '\xef\xbf\xbd')" "$("$B" detokenize -m "$M" 226)"

expect_error "bad utf-8" "offset 3" "$B" tokenize -m "$M" $'abc\xff'
expect_error "id too large" "out of range" "$B" detokenize -m "$M" 1 1024
expect_error "negative id" "out of range" "$B" detokenize -m "$M" -- -5
expect_error "not an id" "not a token id" "$B" detokenize -m "$M" 12x
expect_error "missing model" "missing -m" "$B" tokenize "hi"
expect_error "no such file" "nonexistent" "$B" tokenize -m "$T/nonexistent.gguf" "hi"
head -c 100 "$M" >"$T/trunc.gguf"
expect_error "truncated gguf" "trunc.gguf" "$B" tokenize -m "$T/trunc.gguf" "hi"

rm -rf "$T"
exit $fail
