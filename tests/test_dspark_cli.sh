#!/usr/bin/env bash
# DSpark on the command line: run -md with fixed and auto depth gives plain greedy's text; auto
# depth with a drafter whose drafts are never accepted parks (plain steps + rare probes); the
# speculative stats line; --draft-window; pair validation errors; bench --spec prints measured costs and
# labelled projections; draft-logits --rounds rejects bad scripts.
set -u
B=${BITSPARK:?}; F=${BS_FIXTURES:?}; T=${BS_TMP:-/tmp}/dspark_cli; mkdir -p "$T"
export BITSPARK_NO_COST_CACHE=1
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

P="$(cat "$F/prompt.txt")"
N=300   # fewer tokens in a sanitizer build (-O0 ASan is ~100x slower)
nm "$B" 2>/dev/null | grep -q __asan_init && N=80
R=("$B" run -m "$F/tiny-q1_0.gguf" -p "$P" -n $N --temp 0 -t 1 --ignore-eos -c 1024)
"${R[@]}" >"$T/plain" 2>/dev/null || bad "plain run"
DMS="1 4 auto"; [ $N -lt 300 ] && DMS="4 auto"
for dm in $DMS; do
  "${R[@]}" -md "$F/tiny-dspark-f32.gguf" --draft-max $dm >"$T/spec_$dm" 2>"$T/err_$dm" || bad "run -md --draft-max $dm"
  cmp -s "$T/plain" "$T/spec_$dm" && ok "run -md --draft-max $dm: same text as plain greedy" || bad "--draft-max $dm text differs"
done
grep -q 'n_drafted = [0-9]*, n_accepted = [0-9]*, acceptance = ' "$T/err_4" && ok "stats line" || bad "no stats line"
grep -q 'tokens per second' "$T/err_4" && ok "tokens/s reported" || bad "no tokens/s"
# auto with a random drafter: parks for nearly every round, probing rarely
line=$(grep 'auto depth:' "$T/err_auto")
parked=$(sed -n 's/.* \([0-9]*\) parked rounds.*/\1/p' <<<"$line"); probes=$(sed -n 's/.* \([0-9]*\) probes.*/\1/p' <<<"$line")
[ "${parked:-0}" -ge $((N - 30)) ] && [ "${probes:-999}" -le $((N / 20)) ] && ok "auto parks: $line" || bad "auto did not park: $line"

# --draft-window with the trained pair (real acceptance): text unchanged; a window covering the
# whole context drafts exactly as no window; a short one drafts differently
M=${BS_SRC:?}/models; NW=$((N + 100))
W=("$B" run -m "$M/bonsai-tiny-q1_0.gguf" -p "To copy a file, use" -n $NW --temp 0 -t 1 --ignore-eos -c 2048)
"${W[@]}" >"$T/wplain" 2>/dev/null || bad "trained plain run"
for w in 0 100000 16; do
  "${W[@]}" -md "$M/bonsai-tiny-dspark.gguf" --draft-max 3 --draft-window $w >"$T/w$w" 2>"$T/werr$w" || bad "run --draft-window $w"
  cmp -s "$T/wplain" "$T/w$w" && ok "--draft-window $w: same text as plain greedy" || bad "--draft-window $w text differs"
done
s0=$(grep -o 'n_drafted = .*rounds = [0-9]*' "$T/werr0"); sbig=$(grep -o 'n_drafted = .*rounds = [0-9]*' "$T/werr100000")
s16=$(grep -o 'n_drafted = .*rounds = [0-9]*' "$T/werr16")
[ -n "$s0" ] && [ "$s0" = "$sbig" ] && ok "a window over the whole context drafts as none: $s0" || bad "window 100000: '$sbig' vs '$s0'"
[ -n "$s16" ] && [ "$s16" != "$s0" ] && ok "window 16 drafts differently: $s16" || bad "window 16: '$s16' vs '$s0'"

# pair validation and option errors: one line, exit 1
"$B" synth --preset drafter-tiny --drafter-type f32 --n-embd 128 --head-dim 32 -o "$T/d128.gguf" >/dev/null 2>&1
out=$("${R[@]}" -md "$T/d128.gguf" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q 'hidden size 128 != target hidden size 256' <<<"$out" && ok "mismatched drafter refused" || bad "mismatch: rc=$rc $out"
"$B" synth --preset drafter-tiny --drafter-type f32 --taps 1,9 -o "$T/dtap.gguf" >/dev/null 2>&1
out=$("${R[@]}" -md "$T/dtap.gguf" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q 'taps target layer 9' <<<"$out" && ok "taps outside the target refused" || bad "taps: rc=$rc $out"
out=$("${R[@]}" -md "$F/tiny-dspark-f32.gguf" --draft-max 5 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q 'exceeds the drafter' <<<"$out" && ok "--draft-max above the block size refused" || bad "draft-max 5: rc=$rc $out"

# drafters with blocks of 16 and more (the loader takes up to 64): the session's cheap rollback
# holds a round's rows; greedy output with the whole block drafted is plain decoding's
"$B" synth --preset drafter-tiny --drafter-type f32 --block-size 24 -o "$T/d24.gguf" >/dev/null 2>&1
"$B" run -m "$F/tiny-q1_0.gguf" -t 1 -p "Once upon a time" -n 40 --temp 0 --ignore-eos -q >"$T/p24" 2>/dev/null
"$B" run -m "$F/tiny-q1_0.gguf" -t 1 -md "$T/d24.gguf" --draft-max 24 -p "Once upon a time" -n 40 --temp 0 --ignore-eos \
    -q >"$T/s24" 2>"$T/e24"; rc=$?
[ $rc -eq 0 ] && [ -s "$T/p24" ] && cmp -s "$T/p24" "$T/s24" && ok "a block-24 drafter at depth 24: plain decoding's text" \
  || bad "block 24: rc=$rc $(cat "$T/e24")"

# bench --spec
out=$("$B" bench -m "$F/tiny-q1_0.gguf" -md "$F/tiny-dspark-f32.gguf" --spec -t 1 -p 16 -r 1 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q 'verify, width 5' <<<"$out" && grep -q 'PROJECTIONS' <<<"$out" && grep -q '^   0.90 ' <<<"$out" \
  && ok "bench --spec" || bad "bench --spec: rc=$rc $out"
# its wording follows the drafter: a synthesized one is called random, a trained one is not; a
# measured run where nothing was accepted shows no speedup ratio
grep -q 'none accepted.*no speedup measured' <<<"$out" && ! grep -q 'drafter: .*[0-9]x;' <<<"$out" \
  && ok "bench --spec: no ratio without accepted drafts" || bad "bench --spec presents a ratio with nothing accepted: $out"
"$B" synth --preset drafter-tiny --drafter-type f32 -o "$T/dsyn.gguf" >/dev/null 2>&1
out=$("$B" bench -m "$F/tiny-q1_0.gguf" -md "$T/dsyn.gguf" --spec -t 1 -p 16 -r 1 -n 0 2>&1)
grep -q "synthetic drafter's weights are random" <<<"$out" && ok "bench --spec: a synthesized drafter is called random" \
  || bad "bench --spec, synthesized drafter: $out"
out=$("$B" bench -m "$M/bonsai-tiny-q1_0.gguf" -md "$M/bonsai-tiny-dspark.gguf" --spec -t 1 -p 16 -r 1 -n 32 2>&1); rc=$?
[ $rc -eq 0 ] && ! grep -q 'random' <<<"$out" && grep -q 'drafter: .*[0-9]x; [1-9][0-9]* drafted, [1-9][0-9]* accepted' <<<"$out" \
  && ok "bench --spec, trained drafter: not called random, measured ratio with accepted drafts" \
  || bad "bench --spec, trained drafter: rc=$rc $out"
# bench --spec measures through the engine and the drafter's forward, not the speculative rounds' internals
! grep -q '#include "dspark/speculative.h"' "$BS_SRC/src/tools/spec_bench.c" && ok "spec_bench does not include dspark/speculative.h" \
  || bad "spec_bench includes dspark/speculative.h"
# serve refuses a fixed depth above the block size as run does (the same drafter loader)
out=$(timeout 60 "$B" serve -m "$F/tiny-q1_0.gguf" -md "$F/tiny-dspark-f32.gguf" --draft-max 5 --port 0 -t 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'exceeds the drafter' <<<"$out" && ok "serve --draft-max above the block size refused" \
  || bad "serve --draft-max 5: rc=$rc $out"

# draft-logits --rounds errors
feat="$F/dspark/random7.ctx_feat.f32"
for ops in "+8" "-1" "+3,x" "+3,5@1"; do
  out=$("$B" draft-logits -md "$F/tiny-dspark-f32.gguf" --features "$feat" --rows 7 -o "$T/r.f32" --rounds "$ops" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "--rounds '$ops' refused: $out" || bad "--rounds '$ops': rc=$rc $out"
done

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
