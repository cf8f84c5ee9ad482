// hostile_page.mjs: what a web page the user visits can do to a local bitspark serve, in headless
// Debian chromium (playwright-core), run by tests/test_server_webui.sh:
//   node hostile_page.mjs VICTIM_URL OTHER_ORIGIN_URL
// From a document of another origin (a second server's /health): reading /props fails (no
// CORS grant), a JSON POST is stopped at its preflight, a text/plain "simple" POST (no preflight)
// and a form POST are refused by the server (415), so nothing runs. DNS rebinding: the browser
// resolves evil.test to 127.0.0.1 (--host-resolver-rules) and loads http://evil.test:PORT/,
// same-origin with the victim in the browser's eyes; the server answers 403 (Host check).
// Prints one JSON line; exit 1 on failure.
import { createRequire } from 'node:module';
const require = createRequire(process.env.BS_NODE_DIR + '/');
const { chromium } = require('playwright-core');
const [victim, other] = process.argv.slice(2);
const port = new URL(victim).port;
const fail = (m) => { console.log(JSON.stringify({ ok: false, error: m })); process.exit(1); };

const browser = await chromium.launchPersistentContext(process.env.BS_PROFILE, {
  executablePath: '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--host-resolver-rules=MAP evil.test 127.0.0.1'],
});
try {
  const page = browser.pages()[0] ?? await browser.newPage();
  // a document of the other origin without the page's Content-Security-Policy (connect-src
  // 'self' would stop its fetches: an attacker's page sets none)
  await page.goto(other + '/health');
  const r = await page.evaluate(async (v) => {
    const out = {};
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'pwned' }], max_tokens: 2 });
    try { await (await fetch(v + '/props')).json(); out.props = 'read'; } catch (e) { out.props = 'blocked'; }
    try {
      await fetch(v + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
      out.json = 'sent';
    } catch (e) { out.json = 'blocked'; }
    // no-cors simple requests reach the server; the page cannot see the answer, the server must refuse
    await fetch(v + '/v1/chat/completions', { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body });
    await fetch(v + '/v1/completions', { method: 'POST', mode: 'no-cors', body: new URLSearchParams({ prompt: 'pwned' }) });
    await fetch(v + '/v1/chat/completions', { method: 'POST', mode: 'no-cors', body: new Blob([body]) });
    return out;
  }, victim);
  if (r.props !== 'blocked') fail('cross-origin page read /props');
  if (r.json !== 'blocked') fail('cross-origin JSON POST passed its preflight');
  // DNS rebinding
  const resp = await page.goto(`http://evil.test:${port}/`);
  const status = resp ? resp.status() : 0;
  const text = resp ? await resp.text() : '';
  if (status !== 403) fail(`rebound page got ${status}: ${text.slice(0, 120)}`);
  console.log(JSON.stringify({ ok: true, cross_origin: r, rebinding_status: status }));
} catch (e) {
  fail(String(e));
} finally {
  await browser.close();
}
