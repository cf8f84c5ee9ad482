#!/usr/bin/env bash
# test_library.sh: libbitspark as an embedder gets it. `cmake --install` into a temporary prefix;
# the shared library exports exactly the BS_API functions of bitspark.h (nothing internal);
# examples/simple.c and examples/spec.c, built with the installed header and pkg-config file
# (shared and static), generate on the trained tiny pair in models/: simple's text equals
# `bitspark run`'s greedy text, spec's (with the drafter) equals simple's, and spec reports its
# acceptance. examples/image.c (bs_vision_*, an image in the request) answers on the vision
# fixture as `bitspark run --mmproj --image --chat` does. examples/multi.c (three prompts in one
# bs_multi_eval per step, then per-sequence rollback) gives each prompt `bitspark run`'s text;
# examples/sampler.c (bs_eval + the sampler chain + the streaming detokenizer) gives run's text
# greedy and seeded, and valid JSON under a schema. bitspark.pc: --cflags is the header's
# directory alone, and --static links examples/image.c (libpng, libjpeg) with libbitspark.a.
set -u
B=${BITSPARK:?}; SRC=${BS_SRC:?}; BUILD=${BS_BUILD:?}; T=${BS_TMP:?}/library
CC=${BS_CC:-cc}; FLAGS=${BS_SANITIZE_FLAGS:-}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }
rm -rf "$T"; mkdir -p "$T"
M=$SRC/models/bonsai-tiny-q1_0.gguf; D=$SRC/models/bonsai-tiny-dspark.gguf
P="The quick brown fox"

cmake --install "$BUILD" --prefix "$T/prefix" >"$T/install.log" 2>&1 && ok "cmake --install" || bad "install: $(tail -3 "$T/install.log")"
pc=$(find "$T/prefix" -name bitspark.pc | head -1)
so=$(find "$T/prefix" -name 'libbitspark.so.0' | head -1)
[ -n "$pc" ] && [ -n "$so" ] && [ -f "$T/prefix/include/bitspark.h" ] && [ -x "$T/prefix/bin/bitspark" ] \
  && ok "installed: bin, header, libbitspark.so.0, bitspark.pc" || bad "install tree incomplete: $(find "$T/prefix" -type f | head)"
[ "$(readelf -d "$so" 2>/dev/null | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')" = libbitspark.so.0 ] && ok "soname libbitspark.so.0" || bad "soname"

# exports: exactly the BS_API functions of the header
grep -oE 'BS_API [^(;]*\b(bs|bitspark)_[a-z0-9_]+\(' "$SRC/include/bitspark.h" | grep -oE '(bs|bitspark)_[a-z0-9_]+\($' | tr -d '(' | sort -u >"$T/declared"
nm -D --defined-only "$so" | awk '$2 ~ /[TDBRVW]/ {print $3}' | sort -u >"$T/exported"
[ "$(wc -l <"$T/declared")" -gt 40 ] && ok "header declares $(wc -l <"$T/declared") functions" || bad "header parse"
extra=$(comm -13 "$T/declared" "$T/exported" | tr '\n' ' '); missing=$(comm -23 "$T/declared" "$T/exported" | tr '\n' ' ')
[ -z "$extra" ] && ok "nothing exported beyond bitspark.h" || bad "exported but not public: $extra"
[ -z "$missing" ] && ok "every public function exported" || bad "declared but not exported: $missing"

export PKG_CONFIG_PATH=$(dirname "$pc")
for ex in simple spec image multi sampler; do
  if $CC $FLAGS -std=c11 -Wall -Wextra -Werror "$SRC/examples/$ex.c" $(pkg-config --cflags --libs bitspark) -o "$T/$ex" 2>"$T/$ex.cc"; then
    ok "examples/$ex.c builds against the installed shared library"
  else bad "$ex build: $(head -5 "$T/$ex.cc")"; fi
done
if $CC $FLAGS -std=c11 "$SRC/examples/simple.c" $(pkg-config --cflags bitspark) "$(dirname "$so")/libbitspark.a" \
     $(pkg-config --libs jansson libmicrohttpd libutf8proc) -lpthread -lm -o "$T/simple-static" 2>"$T/static.cc"; then
  ok "examples/simple.c links the static library"
else bad "static link: $(head -5 "$T/static.cc")"; fi

cflags=$(pkg-config --cflags bitspark | xargs)
[ "$cflags" = "-I$T/prefix/include" ] || [ "$cflags" = "-I$(dirname "$pc")/../../include" ] && ok "pkg-config --cflags: the header's directory only ($cflags)" \
  || bad "pkg-config --cflags leaks: $cflags"
static_libs=$(pkg-config --static --libs bitspark | sed 's/-lbitspark\b/-l:libbitspark.a/')
if $CC $FLAGS -std=c11 "$SRC/examples/image.c" $(pkg-config --cflags bitspark) $static_libs -o "$T/image-static" 2>"$T/istatic.cc"; then
  ok "examples/image.c links libbitspark.a with pkg-config --static alone"
else bad "static image link: $(head -5 "$T/istatic.cc")"; fi
ldd "$T/image-static" 2>/dev/null | grep -q libbitspark && bad "image-static loads libbitspark.so" || true

export LD_LIBRARY_PATH=$(dirname "$so")
ldd "$T/simple" 2>/dev/null | grep -q "$(dirname "$so")/libbitspark.so.0" && ok "simple uses the installed .so" || bad "simple does not load the installed .so: $(ldd "$T/simple" | grep bitspark)"
"$B" run -m "$M" -p "$P" -n 24 --temp 0 -t 1 -q >"$T/run.txt" 2>"$T/run.err" || bad "bitspark run: $(tail -2 "$T/run.err")"
"$T/simple" "$M" "$P" 24 >"$T/simple.txt" 2>"$T/simple.err" && ok "simple runs" || bad "simple: $(tail -2 "$T/simple.err")"
"$T/simple-static" "$M" "$P" 24 >"$T/static.txt" 2>/dev/null || bad "simple-static failed"
"$T/spec" "$M" "$D" "$P" 24 >"$T/spec.txt" 2>"$T/spec.err" && ok "spec runs" || bad "spec: $(tail -2 "$T/spec.err")"
[ -s "$T/simple.txt" ] && cmp -s "$T/run.txt" "$T/simple.txt" && ok "simple's text equals bitspark run's" \
  || bad "simple vs run: [$(head -c 200 "$T/simple.txt")] vs [$(head -c 200 "$T/run.txt")]"
cmp -s "$T/simple.txt" "$T/static.txt" && ok "static build: the same text" || bad "static text differs"
cmp -s "$T/simple.txt" "$T/spec.txt" && ok "spec (drafter) text equals simple's (lossless)" \
  || bad "spec vs simple: [$(head -c 200 "$T/spec.txt")] vs [$(head -c 200 "$T/simple.txt")]"
grep -qE 'drafted [1-9][0-9]*, accepted [0-9]+ \(acceptance [0-9.]+%\)' "$T/spec.err" && ok "spec reports acceptance: $(grep -o 'acceptance [0-9.]*%' "$T/spec.err")" \
  || bad "spec acceptance line: $(tail -1 "$T/spec.err")"
for p in "$P" "Once upon a time" "1, 2, 3,"; do
  "$B" run -m "$M" -p "$p" -n 24 --temp 0 -t 1 -q 2>/dev/null; printf '\n---\n'
done >"$T/multi.want"
"$T/multi" "$M" 24 "$P" "Once upon a time" "1, 2, 3," >"$T/multi.txt" 2>"$T/multi.err" && ok "multi runs: $(cat "$T/multi.err")" \
  || bad "multi: $(tail -2 "$T/multi.err")"
[ -s "$T/multi.txt" ] && cmp -s "$T/multi.want" "$T/multi.txt" && ok "multi: each sequence's text equals bitspark run's" \
  || bad "multi vs run: [$(head -c 300 "$T/multi.txt")] vs [$(head -c 300 "$T/multi.want")]"
grep -q "rollback of 2 of them: the same logits" "$T/multi.err" && ok "multi: per-sequence rollback and re-eval, the same logits" \
  || bad "multi rollback: $(cat "$T/multi.err")"
"$T/sampler" "$M" "$P" 24 >"$T/sampler.txt" 2>"$T/sampler.err" && cmp -s "$T/run.txt" "$T/sampler.txt" \
  && ok "sampler (greedy): the text of bitspark run" || bad "sampler greedy: [$(head -c 200 "$T/sampler.txt")] $(tail -1 "$T/sampler.err")"
"$B" run -m "$M" -p "$P" -n 24 --temp 0.9 --seed 42 -t 1 -q >"$T/run-seed.txt" 2>/dev/null
"$T/sampler" "$M" "$P" 24 0.9 42 >"$T/sampler-seed.txt" 2>/dev/null && [ -s "$T/run-seed.txt" ] && cmp -s "$T/run-seed.txt" "$T/sampler-seed.txt" \
  && ok "sampler (temp 0.9, seed 42): the text of bitspark run --seed 42" \
  || bad "sampler seeded: [$(head -c 200 "$T/sampler-seed.txt")] vs [$(head -c 200 "$T/run-seed.txt")]"
schema='{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}'
"$T/sampler" "$M" "Give me JSON:" 60 0 0 "$schema" >"$T/sampler-json.txt" 2>"$T/sampler-json.err"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d["ok"], bool)' "$T/sampler-json.txt" 2>/dev/null \
  && ok "sampler under a JSON schema: $(tr -s ' \n' ' ' <"$T/sampler-json.txt")" \
  || bad "sampler JSON: [$(head -c 200 "$T/sampler-json.txt")] $(tail -1 "$T/sampler-json.err")"
# the README's library program, as it stands there, with model.gguf the tiny model
awk '/^## The library/{on=1} on && /^    /{sub(/^    /, ""); print} on && /^## Testing/{exit}' "$SRC/README.md" >"$T/readme.c"
mkdir -p "$T/readme" && ln -sf "$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" "$T/readme/model.gguf"
if grep -q "int main" "$T/readme.c" && $CC $FLAGS -std=c11 -Wall -Wextra -Werror "$T/readme.c" $(pkg-config --cflags --libs bitspark) -o "$T/readme/app" 2>"$T/readme.cc"; then
  ok "the README's library program builds as written"
else bad "README program: $(head -5 "$T/readme.cc")"; fi
(cd "$T/readme" && ./app) >"$T/readme.txt" 2>/dev/null
{ cat "$T/run.txt"; printf '\n'; } | cmp -s - "$T/readme.txt" && ok "the README's program prints bitspark run's text" \
  || bad "README program output: [$(head -c 200 "$T/readme.txt")] vs [$(head -c 200 "$T/run.txt")]"
FX=${BS_FIXTURES:?}
VM=$FX/tiny-f32.gguf VP=$FX/vision/tiny-mmproj-f32.gguf VI=$FX/vision/image.png
"$B" run -m "$VM" --mmproj "$VP" --image "$VI" --chat -p "Describe this picture." -n 16 --temp 0 -t 1 -q >"$T/vrun.txt" 2>/dev/null
"$T/image" "$VM" "$VP" "$VI" "Describe this picture." 16 >"$T/image.txt" 2>"$T/image.err" && ok "image runs" || bad "image: $(tail -2 "$T/image.err")"
[ -s "$T/image.txt" ] && cmp -s "$T/vrun.txt" "$T/image.txt" && ok "image's text equals bitspark run --image's" \
  || bad "image vs run: [$(head -c 200 "$T/image.txt")] vs [$(head -c 200 "$T/vrun.txt")]"
"$T/image" "$VM" "$VM" "$VI" hi >/dev/null 2>"$T/err.txt"
grep -q "not an mmproj" "$T/err.txt" && ok "image: a text GGUF as projector is a clean error" || bad "image bad projector: $(cat "$T/err.txt")"
"$T/simple" "$T/no-such.gguf" hi >/dev/null 2>"$T/err.txt"; rc=$?
[ $rc -ne 0 ] && grep -q "no-such.gguf" "$T/err.txt" && ok "a missing model: clean error" || bad "missing model: rc $rc $(cat "$T/err.txt")"
echo "test_library: $pass passed, $fail failed"
[ $fail -eq 0 ]
