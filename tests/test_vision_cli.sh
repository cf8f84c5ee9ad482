#!/usr/bin/env bash
# test_vision_cli.sh: images in `run`, `chat` and `logits` (--mmproj F --image PATH) on the
# vision fixture (tiny-f32 + tiny-mmproj-f32, tests/fixtures/vision):
#  - run --chat with the fixture image gives llama.cpp's greedy tokens (ref.json), and the
#    logits of `logits --mmproj --image` predict each of them (argmax per row);
#  - a raw prompt placing the image with <|image_pad|> gives the same as --chat renders it;
#  - with the fixture drafter the greedy text equals the text without it (two images);
#  - chat: --image with the first message answers as run does, /image attaches one to a later
#    message, and that turn reuses the prompt up to it;
#  - clear errors: --image without --mmproj, a missing or bad image, a text GGUF as projector,
#    a projector of another width, markers that do not match the images;
#  - run --device vulkan:0 with the image gives the greedy tokens too.
source "$(dirname "$0")/cli_lib.sh" visioncli
F=${BS_FIXTURES:?}
M=$F/tiny-f32.gguf MP=$F/vision/tiny-mmproj-f32.gguf IMG=$F/vision/image.png
export BITSPARK_NO_COST_CACHE=1
R=("$B" run -m "$M" -t 1 --temp 0 --ignore-eos)
PY=/usr/bin/python3
GREEDY=$($PY -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['greedy_tokens'])))" "$F/vision/ref.json")

# --- run: llama.cpp's greedy tokens ---
"${R[@]}" --mmproj "$MP" --image "$IMG" --chat -p "Describe this picture." -n 8 -q >"$T/run" 2>"$T/run.err" || bad "run rc [$(cat "$T/run.err")]"
"$B" detokenize -m "$M" "$GREEDY" >"$T/greedy" 2>/dev/null
[ -s "$T/run" ] && cmp -s "$T/run" "$T/greedy" && ok "run --image: the fixture's greedy tokens" \
    || bad "run --image: [$(od -c "$T/run" | head -3)] vs [$(od -c "$T/greedy" | head -3)]"

# --- logits --mmproj --image: each row's argmax is the next greedy token ---
TOKS=$($PY -c "import json,sys; r=json.load(open(sys.argv[1])); c=r['chunks']
print(','.join(map(str, c[0]['tokens'])) + ',<image>,' + ','.join(map(str, c[2]['tokens'] + r['greedy_tokens'])))" "$F/vision/ref.json")
if "$B" logits -m "$M" --mmproj "$MP" --image "$IMG" --tokens "$TOKS" -o "$T/lg.f32" 2>"$T/lg.err"; then
    $PY - "$T/lg.f32" "$F/vision/ref.json" <<'EOF' && ok "logits --image: argmax rows give the greedy tokens" || bad "logits --image argmax"
import array, json, sys
r = json.load(open(sys.argv[2]))
lg = array.array('f'); lg.frombytes(open(sys.argv[1], 'rb').read())
V, g = r['n_vocab'], r['greedy_tokens']
rows = len(lg) // V
first = rows - len(g) - 1   # the prompt's last row predicts greedy[0]
got = [max(range(V), key=lambda v: lg[(first + i) * V + v]) for i in range(len(g))]
sys.exit(0 if rows == r['n_prompt_rows'] + len(g) and got == g else 1)
EOF
else bad "logits --mmproj --image [$(cat "$T/lg.err")]"; fi

# --- a raw prompt placing the image itself ---
printf '<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this picture.<|im_end|>\n<|im_start|>assistant\n' >"$T/raw.txt"
"${R[@]}" --mmproj "$MP" --image "$IMG" -f "$T/raw.txt" -n 8 -q >"$T/raw" 2>/dev/null
cmp -s "$T/run" "$T/raw" && ok "raw prompt with <|image_pad|> = --chat" || bad "raw prompt differs"

# --- the drafter: same greedy text (two images) ---
"${R[@]}" --mmproj "$MP" --image "$IMG" --image "$IMG" --chat -p "Describe these." -n 40 -q >"$T/plain" 2>/dev/null
"${R[@]}" --mmproj "$MP" --image "$IMG" --image "$IMG" --chat -p "Describe these." -n 40 \
    -md "$F/tiny-dspark-f32.gguf" --draft-max 3 >"$T/spec" 2>"$T/spec.err"
if [ -s "$T/plain" ] && cmp -s "$T/plain" "$T/spec" && grep -q "n_drafted = [1-9]" "$T/spec.err"; then
    ok "drafter: same greedy text with two images"
else bad "drafter: [$(head -c 200 "$T/spec")] vs [$(head -c 200 "$T/plain")] $(grep n_drafted "$T/spec.err")"; fi

# --- chat ---
printf 'Describe this picture.\nsomething else\n/image %s\nDescribe this picture.\n/image %s/nope.png\n/exit\n' "$IMG" "$T" |
    "$B" chat -m "$M" -t 1 --temp 0 --ignore-eos -n 8 --mmproj "$MP" --image "$IMG" -v >"$T/chat" 2>"$T/chat.err"
first=$(head -n 1 "$T/chat")
[ "$first" = "$(head -n 1 "$T/run")" ] && ok "chat --image: the first reply is run's" || bad "chat first reply [$first]"
grep -q "image 2 attached" "$T/chat.err" && ok "chat: /image attaches" || bad "chat /image [$(cat "$T/chat.err" | tail -5)]"
reuse=$(sed -n 's/^reusing \([0-9]*\) of .*/\1/p' "$T/chat.err" | tail -1)
[ -n "$reuse" ] && [ "$reuse" -gt 12 ] && ok "chat: the turn with the new image reuses $reuse positions" || bad "chat reuse [$reuse]"
grep -q "nope.png" "$T/chat.err" && ok "chat: a missing /image file is reported" || bad "chat missing image"
[ "$(grep -c '<|im_start|>assistant' "$T/chat.err")" -ge 3 ] && ok "chat: three replies" || bad "chat replies"

# --- errors ---
"$B" synth --preset mmproj-tiny --proj-dim 128 -o "$T/mm128.gguf" >/dev/null 2>&1 || bad "synth mmproj"
printf 'not an image' >"$T/bad.png"
expect_error "run --image without --mmproj" "needs --mmproj" "${R[@]}" --image "$IMG" -p hi
expect_error "chat --image without --mmproj" "needs --mmproj" "$B" chat -m "$M" --image "$IMG"
expect_error "logits --image without --mmproj" "needs --mmproj" "$B" logits -m "$M" --image "$IMG" --tokens "1,<image>" -o "$T/x.f32"
expect_error "a missing image" "no-such.png" "${R[@]}" --mmproj "$MP" --image "$T/no-such.png" -p hi
expect_error "not an image" "not a PNG" "${R[@]}" --mmproj "$MP" --image "$T/bad.png" -p hi
expect_error "a text GGUF as projector" "not an mmproj" "${R[@]}" --mmproj "$M" --image "$IMG" -p hi
expect_error "a projector of another width" "n_embd is 256" "${R[@]}" --mmproj "$T/mm128.gguf" --image "$IMG" -p hi
expect_error "logits: another width" "n_embd is 256" "$B" logits -m "$M" --mmproj "$T/mm128.gguf" --image "$IMG" --tokens "1,<image>" -o "$T/x.f32"
expect_error "more markers than images" "places 2 images" "${R[@]}" --mmproj "$MP" --image "$IMG" -p "<|image_pad|> and <|image_pad|>"
# an image on a Vulkan session (lavapipe counts as a device here): llama.cpp's greedy tokens too
if BITSPARK_VK_ALLOW_CPU=1 "$B" devices 2>/dev/null | grep -q '^vulkan:0'; then
    "${R[@]}" --device vulkan:0 --mmproj "$MP" --image "$IMG" --chat -p "Describe this picture." -n 8 -q \
        >"$T/run_vk" 2>"$T/run_vk.err" || bad "run --device vulkan:0 --image rc [$(cat "$T/run_vk.err")]"
    [ -s "$T/run_vk" ] && cmp -s "$T/run_vk" "$T/greedy" && ok "run --device vulkan:0 --image: the fixture's greedy tokens" \
        || bad "run --device vulkan:0 --image: [$(od -c "$T/run_vk" | head -3)]"
else ok "an image on a Vulkan session: skipped (no Vulkan device)"; fi
exit $fail
