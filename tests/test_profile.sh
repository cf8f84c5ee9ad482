#!/usr/bin/env bash
# test_profile.sh: BITSPARK_PROFILE=1 prints the per-phase table at exit (decode and prompt
# columns, the matmul / DeltaNet / attention / sampling rows), =cpu switches the clock, and the
# profile changes no output token; without it nothing is printed.
source "$(dirname "$0")/cli_lib.sh" profile

M=$T/tiny.gguf
"$B" synth --preset tiny --type q1_0 -o "$M" >/dev/null 2>&1 || { echo "FAIL synth"; exit 1; }
R=("$B" run -m "$M" -t 2 -p "Once upon a time there was a" -n 6 --temp 0)

"${R[@]}" >"$T/plain" 2>"$T/plain.err" || bad "plain run rc"
BITSPARK_PROFILE=1 "${R[@]}" >"$T/prof" 2>"$T/prof.err" || bad "profiled run rc"
cmp -s "$T/plain" "$T/prof" && ok "same output with the profile on" || bad "output changed by the profile"
grep -q "bitspark profile" "$T/plain.err" && bad "profile printed while off" || ok "nothing printed when off"
grep -q "bitspark profile: wall ms per forward step" "$T/prof.err" && ok "table header" || bad "no table [$(cat "$T/prof.err")]"
for row in "1 row" "mm ffn gate+up" "mm lm head" "gdn recurrence" "attn softmax(QK)V" "swiglu" "sampling (per call)" "steps (rows)"; do
    grep -qF "$row" "$T/prof.err" && ok "row: $row" || bad "row missing: $row"
done
# the decode column counts one step per generated token after the first (prompt is one batch)
steps=$(sed -n 's/^steps (rows) *\([0-9]*\) .*/\1/p' "$T/prof.err")
[ -n "$steps" ] && [ "$steps" -ge 5 ] && ok "decode steps counted ($steps)" || bad "decode steps [$steps]"
BITSPARK_PROFILE=cpu "${R[@]}" >/dev/null 2>"$T/cpu.err"
grep -q "caller CPU ms per forward step" "$T/cpu.err" && ok "cpu clock" || bad "cpu clock header"
exit $fail
