// webui.mjs: the chat page of bitspark serve in headless Debian chromium (playwright-core), run by
// tests/test_server_webui.sh: node webui.mjs URL SCREENSHOT.png. Sends a message, waits for
// streamed text to appear (and grow), checks the stats line and the stop button, and saves a
// screenshot whose pixels are checked not to be blank. Prints one JSON line; exit 1 on failure.
import { createRequire } from 'node:module';
const require = createRequire(process.env.BS_NODE_DIR + '/');
const { chromium } = require('playwright-core');
const [url, shot] = process.argv.slice(2);
const fail = (m) => { console.log(JSON.stringify({ ok: false, error: m })); process.exit(1); };

// a fresh profile directory per run (playwright passes it as --user-data-dir)
const browser = await chromium.launchPersistentContext(process.env.BS_PROFILE, {
  executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1000, height: 700 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = browser.pages()[0] ?? await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // random weights may end a reply at any time: the test asks for ignore_eos so that lengths and
  // the Stop button are deterministic (the page itself sends what a user sets)
  await page.route('**/v1/chat/completions', (route) => route.continue({
    postData: JSON.stringify({ ...JSON.parse(route.request().postData()), ignore_eos: true }) }));
  await page.goto(url + '/');
  await page.waitForFunction(() => /tiny/.test(document.getElementById('model').textContent), null, { timeout: 15000 });
  await page.fill('#temp', '0');
  await page.fill('#maxtok', '40');
  await page.uncheck('#think');
  await page.fill('#input', 'Hello bitspark, tell me something.');
  await page.click('#send');
  // streamed text appears while the reply runs, then grows
  await page.waitForFunction(() => (document.querySelector('.assistant .content')?.textContent || '').length > 0, null, { timeout: 30000 });
  const first = await page.textContent('.assistant .content');
  await page.waitForFunction(() => /tokens\/s/.test(document.querySelector('.assistant .stats')?.textContent || ''), null, { timeout: 60000 });
  const final = await page.textContent('.assistant .content');
  const stats = await page.textContent('.assistant .stats');
  if (!(final.length >= first.length && final.startsWith(first))) fail(`text did not grow: ${first} / ${final}`);
  if (!/^40 tokens/.test(stats)) fail('stats: ' + stats);
  // thinking on: a folded think block; stop ends a long reply
  await page.check('#think');
  await page.fill('#maxtok', '20000');
  await page.fill('#input', 'Now think for a long time.');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.assistant')[1]?.querySelector('.think')?.textContent.length > 10, null, { timeout: 30000 })
    .catch(async (e) => fail('no streamed reasoning: ' + (await page.textContent('#log'))));
  const folded = await page.evaluate(() => !document.querySelectorAll('.assistant')[1].querySelector('details').open);
  await page.click('#stop');
  await page.waitForFunction(() => /stopped/.test(document.querySelectorAll('.assistant')[1]?.querySelector('.stats')?.textContent || ''), null, { timeout: 10000 });
  if (!folded) fail('think block not folded');
  await page.screenshot({ path: shot });
  // not blank: count distinct colours of the rendered page (a blank page has one)
  const distinct = await page.evaluate(async (png) => {
    const img = new Image();
    img.src = 'data:image/png;base64,' + png;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width; c.height = img.height;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4 * 7) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    return seen.size;
  }, (await import('node:fs')).readFileSync(shot).toString('base64'));
  if (distinct < 20) fail('screenshot looks blank: ' + distinct + ' colours');
  if (errors.length) fail('page errors: ' + errors.join('; '));
  console.log(JSON.stringify({ ok: true, first_chunk: first, text: final.slice(0, 60), stats, colours: distinct }));
} finally {
  await browser.close();
}
