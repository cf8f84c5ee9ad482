#!/usr/bin/env bash
# test_atomic_tools.sh: no tool destroys a user's file.
#  - quantize onto its input (same string, ./ spelling, a symlink, a hard link) and convert
#    drafter-to-gguf D D/model.safetensors are refused with a clear message, input intact;
#  - kill -9 at several points of a quantize and of a synth run over an existing file: the final
#    name holds either the previous file or the complete new one, never a truncated file;
#  - SIGTERM / SIGINT mid-run: previous file intact and no temporary left behind;
#  - disk full (a 4 MiB tmpfs; where mounting is not allowed, a file-size limit, EFBIG): the
#    error names the cause, the previous file is intact, nothing else is left in the directory.
source "$(dirname "$0")/cli_lib.sh" atomic_tools
F=${BS_FIXTURES:?}

# --- writing onto an input ---
cp "$F/tiny-f32.gguf" "$T/a.gguf"; cp "$T/a.gguf" "$T/a.keep"
ln -s "$T/a.gguf" "$T/sym.gguf"; ln "$T/a.gguf" "$T/hard.gguf"
for out in "$T/a.gguf" "$T/./a.gguf" "$T/../$(basename "$T")/a.gguf" "$T/sym.gguf" "$T/hard.gguf"; do
  "$B" quantize "$T/a.gguf" "$out" q8_0 2>"$T/err"; rc=$?
  [ $rc = 1 ] && grep -q "refusing to write .*it is the input\|input and output are the same file" "$T/err" && cmp -s "$T/a.gguf" "$T/a.keep" \
    && ok "quantize onto its input ($out) refused" || bad "quantize onto $out: rc=$rc $(cat "$T/err")"
done
"$B" synth --preset drafter-tiny -o "$T/d.gguf" 2>/dev/null && "$B" convert drafter-to-safetensors "$T/d.gguf" "$T/D" 2>/dev/null \
  && cp "$T/D/model.safetensors" "$T/st.keep" || bad "drafter fixture"
"$B" convert drafter-to-gguf "$T/D" "$T/D/model.safetensors" 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "refusing to write" "$T/err" && cmp -s "$T/D/model.safetensors" "$T/st.keep" \
  && ok "convert drafter-to-gguf D D/model.safetensors refused" || bad "convert onto input: rc=$rc $(cat "$T/err")"
cp "$T/d.gguf" "$T/D/model.safetensors"; cp "$T/d.gguf" "$T/d.keep"
"$B" convert drafter-to-safetensors "$T/D/model.safetensors" "$T/D" 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "refusing to write" "$T/err" && cmp -s "$T/D/model.safetensors" "$T/d.keep" \
  && ok "convert drafter-to-safetensors D/model.safetensors D refused" || bad "drafter-to-safetensors onto input: rc=$rc $(cat "$T/err")"

# --- kill -9 / SIGTERM / SIGINT during quantize and synth ---
# a model big enough (~160 MB f32) that a run takes a few tenths of a second
BIG=(--preset tiny --type f32 --n-layer 8 --n-embd 512 --n-ff 2048 --n-head 4 --n-head-kv 2
     --head-dim 128 --n-vocab 8192)
"$B" synth "${BIG[@]}" -o "$T/big.gguf" 2>/dev/null || bad "big synth"
"$B" quantize "$T/big.gguf" "$T/ref.gguf" q8_0 -t 1 2>/dev/null || bad "reference quantize"
"$B" synth "${BIG[@]}" --seed 9 -o "$T/ref-synth.gguf" 2>/dev/null || bad "reference synth"
old=$F/tiny-q8_0.gguf
no_temps() { [ -z "$(find "$T" -name '.*.tmp-*' -print -quit)" ]; }
check_after() {   # check_after WHAT REF: the output is the old file or the complete new one
  if cmp -s "$T/out.gguf" "$old"; then echo old
  elif cmp -s "$T/out.gguf" "$2"; then echo new
  else echo "BROKEN($(stat -c %s "$T/out.gguf" 2>/dev/null || echo missing) bytes)"; fi
}
interrupt() {   # interrupt SIGNAL DELAY REF CMD...: run CMD over a copy of $old, signal it after DELAY s
  local sig=$1 delay=$2 ref=$3; shift 3
  cp "$old" "$T/out.gguf"
  # a background job of a script starts with SIGINT ignored: give it the default action back
  env --default-signal=INT "$@" 2>/dev/null & local pid=$!
  sleep "$delay"
  local alive=no; kill -s "$sig" $pid 2>/dev/null && alive=yes
  wait $pid 2>/dev/null
  echo "$alive $(check_after x "$ref")"
}
for what in quantize synth; do
  if [ $what = quantize ]; then cmd=("$B" quantize "$T/big.gguf" "$T/out.gguf" q8_0 -t 1); ref=$T/ref.gguf
  else cmd=("$B" synth "${BIG[@]}" --seed 9 -o "$T/out.gguf"); ref=$T/ref-synth.gguf; fi
  hits=0 broken=0 seen=""
  for delay in 0.02 0.06 0.12 0.2 0.3 0.45 1.5; do
    r=$(interrupt KILL $delay "$ref" "${cmd[@]}")
    seen="$seen $delay:${r// /,}"
    case $r in yes\ *) hits=$((hits + 1));; esac
    case $r in *BROKEN*) broken=$((broken + 1));; esac
  done
  find "$T" -name '.*.tmp-*' -delete   # what kill -9 may leave: a temporary, never the final name
  [ $broken = 0 ] && [ $hits -ge 1 ] && ok "$what killed -9 at$seen: old or complete, never truncated" \
    || bad "$what under kill -9:$seen"
  for sig in TERM INT; do
    r=$(interrupt $sig 0.05 "$ref" "${cmd[@]}")
    case $r in yes\ old|no\ new) no_temps && ok "$what SIG$sig ($r): previous file intact, no temporary" \
                                      || bad "$what SIG$sig left a temporary";;
               *) bad "$what SIG$sig: $r";; esac
  done
done
rm -f "$T/big.gguf" "$T/ref.gguf" "$T/ref-synth.gguf"

# --- disk full ---
M=$T/full
mkdir -p "$M"
if mount -t tmpfs -o size=4m tmpfs "$M" 2>/dev/null; then
  trap 'umount "$M" 2>/dev/null; rm -rf "$T"' EXIT
  how="4 MiB tmpfs" want="No space left on device"
  run_full() { "$@"; }
else
  how="ulimit -f 4096 (mounting a tmpfs is not allowed here)" want="File too large"
  run_full() { ( trap '' XFSZ; ulimit -f 4096; "$@" ); }
fi
echo "previous" > "$M/out.gguf"
run_full "$B" quantize "$F/tiny-f32.gguf" "$M/dummy.gguf" f32 2>/dev/null   # ~7 MB: does not fit
run_full "$B" synth --preset tiny --type f32 -o "$M/out.gguf" 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "$want" "$T/err" && [ "$(cat "$M/out.gguf")" = previous ] \
  && [ "$(ls -A "$M")" = out.gguf ] && ok "synth on a full disk ($how): '$(cat "$T/err")', nothing left behind" \
  || bad "synth disk full ($how): rc=$rc $(cat "$T/err"); dir: $(ls -A "$M")"
run_full "$B" quantize "$F/tiny-f32.gguf" "$M/out.gguf" f32 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "$want" "$T/err" && [ "$(cat "$M/out.gguf")" = previous ] \
  && [ "$(ls -A "$M")" = out.gguf ] && ok "quantize on a full disk ($how): '$(cat "$T/err")', nothing left behind" \
  || bad "quantize disk full ($how): rc=$rc $(cat "$T/err"); dir: $(ls -A "$M")"
umount "$M" 2>/dev/null
exit $fail
