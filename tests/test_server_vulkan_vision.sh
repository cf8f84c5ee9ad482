#!/bin/bash
# test_server_vulkan_vision.sh: image_url parts on `bitspark serve --device vulkan --mmproj`
# (lavapipe in CI, validation layer on: any message fails), the vision fixture (tiny-f32 +
# tiny-mmproj-f32): the answer is the CPU CLI's greedy answer (llama.cpp's greedy tokens), with
# the drafter on the device too; the same image again comes from the prompt cache with the same
# answer; an image request and a text one at once (two slots) answer as each does alone.
# Skipped (77) without a Vulkan device. Kept short: lavapipe is slow.
. "$(dirname "$0")/server_lib.sh"
PY=/usr/bin/python3
if ! "$B" devices 2>/dev/null | grep -q '^vulkan:[0-9]'; then echo "skipped: no Vulkan device"; exit 77; fi
FX=${BS_FIXTURES:?}
M="$FX/tiny-f32.gguf" MP="$FX/vision/tiny-mmproj-f32.gguf" IMG="$FX/vision/image.png"
"$B" run -m "$M" --mmproj "$MP" --image "$IMG" --chat --device cpu \
    -p "Describe this picture." -n 8 --temp 0 --ignore-eos -q -t 1 >"$T/vis.cli" || bad "the CPU CLI run"
export BITSPARK_VK_VALIDATE=1
start_server VK -m "$M" --mmproj "$MP" -md "$FX/tiny-dspark-f32.gguf" --draft-max 3 -np 2 -t 2 --ctx 512 \
    --device vulkan
grep -q 'device: Vulkan' "$T/server.VK.log" && ok "the server runs on Vulkan" || bad "not on Vulkan: $(head -c 600 "$T/server.VK.log")"
out=$("$PY" - "$VK" "$IMG" "$T/vis.cli" <<'PYEOF'
import base64, json, sys, threading, urllib.request
url, png, cli = sys.argv[1:4]
want = open(cli, encoding='utf-8').read()
data = 'data:image/png;base64,' + base64.b64encode(open(png, 'rb').read()).decode()
def ask(content, n=8, draft=0):
    body = json.dumps({'messages': [{'role': 'user', 'content': content}], 'max_tokens': n, 'temperature': 0,
                       'ignore_eos': True, 'draft_max': draft}).encode()
    r = urllib.request.Request(url + '/v1/chat/completions', body, {'Content-Type': 'application/json'})
    return json.load(urllib.request.urlopen(r, timeout=600))
img = [{'type': 'image_url', 'image_url': {'url': data}}, {'type': 'text', 'text': 'Describe this picture.'}]
d = ask(img, draft=3)   # first: a fresh slot, whose drafter sees the whole prompt
a, b = ask(img), ask(img)
alone = [ask(img, 16)['choices'][0]['message']['content'], ask('Plain text.', 16)['choices'][0]['message']['content']]
both = [None, None]
def one(i, c): both[i] = ask(c, 16)['choices'][0]['message']['content']
ts = [threading.Thread(target=one, args=(0, img)), threading.Thread(target=one, args=(1, 'Plain text.'))]
for t in ts: t.start()
for t in ts: t.join()
r = {'same': a['choices'][0]['message']['content'] == want, 'again': b['choices'][0]['message']['content'] == want,
     'cached': b['usage']['prompt_tokens_details']['cached_tokens'], 'prompt': b['usage']['prompt_tokens'],
     'drafter': d['choices'][0]['message']['content'] == want, 'drafted': d.get('timings', {}).get('draft_n', 0),
     'together': both == alone}
print(json.dumps(r))
sys.exit(0 if r['same'] and r['again'] and r['cached'] == r['prompt'] and r['drafter'] and r['drafted'] > 0 and r['together'] else 1)
PYEOF
) && ok "image_url on the device: the CPU CLI's answer, drafted too, cached again, beside a text request ($out)" \
  || bad "images on the device: $out"
grep -q 'vulkan validation:' "$T/server.VK.log" && bad "validation messages: $(grep -m3 'vulkan validation:' "$T/server.VK.log")" \
    || ok "no validation messages"
finish
