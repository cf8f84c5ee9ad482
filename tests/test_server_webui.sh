#!/usr/bin/env bash
# test_server_webui.sh: the chat page at / in headless Debian chromium (playwright-core): a
# message streams a reply that grows, the stats line shows the speed, the think block is
# folded, Stop ends a reply, and the screenshot is not blank; the image control is hidden unless
# /props says vision, and an attached fixture image is shown, removable and sent as an image_url
# data: URL (webui.mjs, BS_FIXTURES/vision/image.png); then a page of another origin cannot
# read or drive the server and a DNS-rebound page gets 403 (hostile_page.mjs); the page's
# Content-Security-Policy allows its own script and style by hash. Needs /usr/bin/chromium.
source "$(dirname "$0")/server_lib.sh"
[ -x /usr/bin/chromium ] || { echo "FAIL /usr/bin/chromium is missing (Debian package chromium)"; exit 1; }
node_deps
# a context long enough that the reply Stop ends (up to 20000 tokens) is still running when the
# page clicks Stop on a loaded host (with 4096 it could fill the context first)
M=$(synth_model srv-tiny-q1_0-ctx64k --preset tiny --type q1_0 --n-ctx 65536)
start_server U -m "$M" -np 2 -t 2 --ctx 24576
curl -s "$U/" | grep -q '<title>bitspark chat</title>' && ok "page served at /" || bad "page at /"
# its headers: a Content-Security-Policy that allows its own inline script and style by hash and
# nothing from elsewhere (the chromium run below works under it), never framed, no referrer
h=$(curl -s -D - -o /dev/null "$U/" | tr -d '\r')
csp=$(echo "$h" | sed -n 's/^Content-Security-Policy: //Ip')
want=$(/usr/bin/python3 -c "import hashlib, base64, sys
t = open(sys.argv[1], 'rb').read()
def h(tag):
    a = t.index(b'<' + tag + b'>') + len(tag) + 2
    return base64.b64encode(hashlib.sha256(t[a:t.index(b'</' + tag + b'>')]).digest()).decode()
print(h(b'script'), h(b'style'))" "$SRC/src/server/webui/index.html")
case "$csp" in
  *"script-src 'sha256-${want% *}'"*"style-src 'sha256-${want#* }'"*"connect-src 'self'"*"frame-ancestors 'none'"*)
    echo "$h" | grep -qi '^X-Frame-Options: DENY' && echo "$h" | grep -qi '^X-Content-Type-Options: nosniff' \
      && echo "$h" | grep -qi '^Referrer-Policy: no-referrer' && ok "page headers: CSP by hash, no framing, nosniff, no referrer" \
      || bad "page headers: $h" ;;
  *) bad "page CSP: '$csp' (want hashes $want)" ;;
esac
mkdir -p "$T/profile"
out=$(BS_PROFILE="$T/profile" timeout 170 node "$SRC/tests/node/webui.mjs" "$U" "${BS_TMP:-/tmp}/webui.png" 2>&1)
echo "$out" | grep -q '"ok":true' && ok "chromium: $out" || bad "chromium: $out"
curl -s "$U/slots" | grep -q '"is_processing":true' && bad "a slot still busy after Stop" || ok "slots idle after Stop"
# a hostile page (another origin: a second server's page) and DNS rebinding against U
start_server O -m "$M" -np 1 -t 1 --ctx 256
p0=$(curl -s "$U/metrics" | sed -n 's/^llamacpp:prompt_tokens_total //p')
mkdir -p "$T/profile2"
out=$(BS_PROFILE="$T/profile2" timeout 120 node "$SRC/tests/node/hostile_page.mjs" "$U" "$O" 2>&1)
echo "$out" | grep -q '"ok":true' && ok "chromium, hostile page: $out" || bad "hostile page: $out"
p1=$(curl -s "$U/metrics" | sed -n 's/^llamacpp:prompt_tokens_total //p')
[ "$p0" = "$p1" ] && ok "the hostile page ran nothing (prompt tokens $p0 = $p1)" || bad "hostile page ran a prompt: $p0 -> $p1"
finish
