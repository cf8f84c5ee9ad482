#!/usr/bin/env bash
# test_tool_inputs.sh: the commands that write raw outputs or read a model's vocabulary and
# names, given outputs or files that would hurt:
#  - logits -o / --taps-out, draft-logits -o and antidoom mine -o / --primes-out onto an input
#    (model, drafter, features, prompts, LoRA adapter) or onto each other: refused before any
#    work, the input byte for byte as it was;
#  - a draft-logits run that fails part way keeps the previous output (temporary + rename);
#  - a tokenizer with more tokens than the model's matrices have rows: refused by run, serve
#    and antidoom eval (every token id must have an embedding row and a logit);
#  - inspect shows control bytes in names from the file as '?', never raw (a terminal would
#    take them for escape sequences);
#  - drafter-to-safetensors writes integer tensors with their own dtypes (I32, I8), not BF16.
source "$(dirname "$0")/cli_lib.sh" tool_inputs
F=${BS_FIXTURES:?}
PY=${BS_PYTHON:-python3}
PATCH="$PY ${BS_SRC:?}/tests/gguf_patch.py"
LORA=$BS_SRC/models/bonsai-tiny-antidoom-lora.gguf

unchanged() { cmp -s "$1" "$2"; }   # unchanged FILE KEEP

# --- outputs onto inputs ---
cp "$F/tiny-f32.gguf" "$T/m.gguf"; cp "$T/m.gguf" "$T/m.keep"
expect_error "logits -o MODEL refused" "refusing to write .*it is the input" \
  "$B" logits -m "$T/m.gguf" --tokens 1,2,3 -o "$T/./m.gguf"
unchanged "$T/m.gguf" "$T/m.keep" && ok "logits -o MODEL: model intact" || bad "logits -o MODEL changed the model"
ln -s "$T/m.gguf" "$T/link.gguf"
expect_error "logits --taps-out MODEL (a symlink to it) refused" "refusing to write .*it is the input" \
  "$B" logits -m "$T/m.gguf" --tokens 1,2 -o "$T/l.f32" --taps 1 --taps-out "$T/link.gguf"
echo 1,2,3 > "$T/toks.txt"; cp "$T/toks.txt" "$T/toks.keep"
expect_error "logits -o TOKENS-FILE refused" "refusing to write" \
  "$B" logits -m "$T/m.gguf" --tokens-file "$T/toks.txt" -o "$T/toks.txt"
unchanged "$T/toks.txt" "$T/toks.keep" || bad "logits -o TOKENS-FILE changed it"
expect_error "logits -o X --taps-out ./X refused" "they are the same file" \
  "$B" logits -m "$T/m.gguf" --tokens 1,2 -o "$T/l.f32" --taps 1 --taps-out "$T/../$(basename "$T")/l.f32"
[ ! -e "$T/l.f32" ] && ok "  ... and nothing written" || bad "logits with clashing outputs wrote $T/l.f32"
echo old > "$T/l.f32"
"$B" logits -m "$T/m.gguf" --tokens 1,2 -o "$T/l.f32" 2>/dev/null && [ "$(stat -c %s "$T/l.f32")" = $((2 * 1024 * 4)) ] \
  && ok "logits over an old output: replaced by the whole new one" || bad "logits over an old output: $(stat -c %s "$T/l.f32")"

"$B" synth --preset drafter-tiny -o "$T/d.gguf" 2>/dev/null || bad "drafter fixture"
cp "$T/d.gguf" "$T/d.keep"
head -c $((2 * 3 * 256 * 4)) /dev/zero > "$T/feat.f32"
expect_error "draft-logits -o DRAFTER refused" "refusing to write .*it is the input" \
  "$B" draft-logits -md "$T/d.gguf" --features "$T/feat.f32" --rows 2 --anchor 5 -o "$T/d.gguf" --device cpu
unchanged "$T/d.gguf" "$T/d.keep" && ok "draft-logits -o DRAFTER: drafter intact" || bad "draft-logits -o DRAFTER changed it"
expect_error "draft-logits -o FEATURES refused" "refusing to write" \
  "$B" draft-logits -md "$T/d.gguf" --features "$T/feat.f32" --rows 2 --anchor 5 -o "$T/feat.f32" --device cpu
echo previous > "$T/prev.f32"
expect_error "draft-logits with a bad anchor fails" "outside the vocabulary" \
  "$B" draft-logits -md "$T/d.gguf" --features "$T/feat.f32" --rows 2 --anchor 99999 -o "$T/prev.f32" --device cpu
[ "$(cat "$T/prev.f32")" = previous ] && ok "  ... and keeps the previous output" || bad "a failed draft-logits truncated its output"
"$B" draft-logits -md "$T/d.gguf" --features "$T/feat.f32" --rows 2 --anchor 5 -o "$T/prev.f32" --device cpu >/dev/null 2>&1 \
  && [ "$(stat -c %s "$T/prev.f32")" = $((4 * 1024 * 4)) ] && ok "draft-logits writes its block's rows" \
  || bad "draft-logits output: $(stat -c %s "$T/prev.f32")"

printf 'Once upon a time\n' > "$T/prompts.txt"
expect_error "antidoom mine -o MODEL refused" "refusing to write .*it is the input" \
  "$B" antidoom mine -m "$T/m.gguf" --prompts "$T/prompts.txt" -o "$T/m.gguf" -n 4
unchanged "$T/m.gguf" "$T/m.keep" && ok "antidoom mine -o MODEL: model intact" || bad "antidoom mine -o MODEL changed it"
cp "$LORA" "$T/lora.gguf"; cp "$LORA" "$T/lora.keep"
cp "$BS_SRC/models/bonsai-tiny-q1_0.gguf" "$T/bonsai.gguf"
expect_error "antidoom mine -o LORA refused" "refusing to write .*it is the input" \
  "$B" antidoom mine -m "$T/bonsai.gguf" --lora "$T/lora.gguf" --prompts "$T/prompts.txt" -o "$T/lora.gguf" -n 4
unchanged "$T/lora.gguf" "$T/lora.keep" || bad "antidoom mine -o LORA changed it"
expect_error "antidoom mine -o X --primes-out X refused" "they are the same file" \
  "$B" antidoom mine -m "$T/m.gguf" --prompts "$T/prompts.txt" -o "$T/p.jsonl" --primes-out "$T/p.jsonl" -n 4

# --- a tokenizer larger than the model ---
$PATCH add-tokens "$F/tiny-f32.gguf" "$T/bigvocab.gguf" 32 || bad "patching the vocabulary"
expect_error "run: tokenizer larger than the model refused" "the tokenizer has 1056 tokens, but the model's matrices only 1024 rows" \
  "$B" run -m "$T/bigvocab.gguf" -p hi -n 2
expect_error "serve: tokenizer larger than the model refused" "the tokenizer has 1056 tokens" \
  timeout 20 "$B" serve -m "$T/bigvocab.gguf" --port 0
printf '{"context_ids": [1, 2, 3], "chosen_token": "zz000031", "rejected_token": "zz000030"}\n' > "$T/pairs.jsonl"
expect_error "antidoom eval: tokenizer larger than the model refused" "the tokenizer has 1056 tokens" \
  "$B" antidoom eval -m "$T/bigvocab.gguf" --pairs "$T/pairs.jsonl"

# --- names with control bytes ---
# general.architecture's first bytes become ESC ] 0 ; and BEL (a terminal's title sequence)
$PATCH key-bytes "$F/tiny-f32.gguf" "$T/esc.gguf" general.architecture 1b5d303b07 || bad "patching a key"
"$B" inspect "$T/esc.gguf" > "$T/inspect.txt" 2>&1
if LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$T/inspect.txt"; then bad "inspect printed raw control bytes"
elif grep -qF '?]0;?al.architecture' "$T/inspect.txt"; then ok "inspect shows a key's control bytes as '?'"
else bad "inspect: the patched key is missing: $(grep -c . "$T/inspect.txt") lines"; fi

# --- integer tensors through drafter-to-safetensors ---
$PATCH tensor-type "$T/d.gguf" "$T/dint.gguf" blk.0.attn_norm.weight 26 || bad "patching a tensor type"
if "$B" convert drafter-to-safetensors "$T/dint.gguf" "$T/DI" >/dev/null 2>&1; then
  dt=$($PY -c "
import json, struct, sys
d = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
print(h['layers.0.input_layernorm.weight']['dtype'], h['layers.0.post_attention_layernorm.weight']['dtype'])" "$T/DI/model.safetensors")
  [ "$dt" = "I32 F32" ] && ok "drafter-to-safetensors: an I32 tensor stays I32" || bad "drafter-to-safetensors dtypes: $dt"
else bad "drafter-to-safetensors with an I32 tensor failed"; fi

exit $fail
