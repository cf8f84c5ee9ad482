// webui.mjs: the chat page of bitspark serve in headless Debian chromium (playwright-core), run by
// tests/test_server_webui.sh: node webui.mjs URL SCREENSHOT.png. Sends a message, waits for
// streamed text to appear (and grow), checks the stats line and the stop button, and saves a
// screenshot whose pixels are checked not to be blank. Then the image control: hidden while
// /props has no "modalities" or says vision false; with vision true (/props rewritten here), the
// fixture image (BS_FIXTURES) shows as a thumbnail, can be removed, and goes out as an image_url
// part whose data: URL holds the file's bytes (the request is answered here, not by the server,
// which runs without a projector). Then the conversation it keeps (historyChecks: a refused
// message, a cut stream, New chat during a reply). Prints one JSON line; exit 1 on failure.
import { createRequire } from 'node:module';
const require = createRequire(process.env.BS_NODE_DIR + '/');
const { chromium } = require('playwright-core');
const [url, shot] = process.argv.slice(2);
const fixturePng = process.env.BS_FIXTURES + '/vision/image.png';
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
  // the server runs without --mmproj: /props says vision false, no image control
  await page.waitForFunction(() => document.body.dataset.vision === 'false', null, { timeout: 15000 })
    .catch(() => fail('with vision false in /props the page did not settle on vision false'));
  if (await page.isVisible('#attach')) fail('image control shown without vision in /props');
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
  // seen and clicked in one step inside the page, polled by time: on a loaded host a click from
  // outside (which waits for animation frames) came after the whole reply had streamed
  const folded = await page.waitForFunction(() => {
    const a = document.querySelectorAll('.assistant')[1], stop = document.getElementById('stop');
    if (!(a?.querySelector('.think')?.textContent.length > 10) || stop.disabled) return false;
    const f = !a.querySelector('details').open;
    stop.click();
    return { f };
  }, null, { timeout: 30000, polling: 10 }).then((h) => h.jsonValue()).then((v) => v.f)
    .catch(async (e) => fail('no streamed reasoning with Stop enabled: ' + (await page.textContent('#log'))));
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
  const image = await imageChecks(page);
  const conversation = await historyChecks(page);
  if (errors.length) fail('page errors: ' + errors.join('; '));
  console.log(JSON.stringify({ ok: true, first_chunk: first, text: final.slice(0, 60), stats, colours: distinct, image,
                               conversation }));
} finally {
  await browser.close();
}

// /props as the server sends it, with "modalities" replaced
async function propsWith(page, modalities) {
  await page.unroute('**/props');
  await page.route('**/props', async (route) => {
    const response = await route.fetch();
    route.fulfill({ response, json: { ...(await response.json()), modalities } });
  });
  await page.reload();
  await page.waitForFunction((v) => document.body.dataset.vision === v, String(modalities.vision), { timeout: 15000 })
    .catch(() => fail('the page did not take /props modalities ' + JSON.stringify(modalities)));
}

// a canned stream, so the page's request is checked whatever the server would answer (a
// function: the checks above run before a top-level const below them would be initialized)
function cannedSSE() {
  return [
    { choices: [{ index: 0, delta: { role: 'assistant', content: null }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { content: 'a picture' }, finish_reason: null }] },
    { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
      timings: { predicted_n: 2, predicted_per_second: 10, prompt_n: 30, cache_n: 0, prompt_per_second: 100, draft_n: 0 } },
  ].map((j) => 'data: ' + JSON.stringify(j) + '\n\n').join('') + 'data: [DONE]\n\n';
}

async function imageChecks(page) {
  const fs = await import('node:fs');
  const want = fs.readFileSync(fixturePng);
  await propsWith(page, { vision: false });
  if (await page.isVisible('#attach')) fail('image control shown with vision false');
  await propsWith(page, { vision: true });
  if (!await page.isVisible('#attach')) fail('image control hidden with vision true');
  await page.setInputFiles('#file', [fixturePng, fixturePng]);
  await page.waitForFunction(() => [...document.querySelectorAll('#pending img')].filter((i) => i.naturalWidth === 96).length === 2,
    null, { timeout: 10000 }).catch(() => fail('two thumbnails of the fixture (96 wide) did not show'));
  await page.click('#pending .thumb:nth-child(2) .remove');
  const left = await page.locator('#pending img').count();
  if (left !== 1) fail(`after removing one of two thumbnails ${left} are left`);
  let sent = null;
  await page.unroute('**/v1/chat/completions');
  await page.route('**/v1/chat/completions', (route) => {
    sent = JSON.parse(route.request().postData());
    route.fulfill({ status: 200, contentType: 'text/event-stream', body: cannedSSE() });
  });
  await page.fill('#input', 'What is in this picture?');
  await page.click('#send');
  await page.waitForFunction(() => /a picture/.test(document.querySelector('.assistant .content')?.textContent || ''),
    null, { timeout: 10000 }).catch(() => fail('no reply shown after sending an image'));
  const content = sent?.messages?.at(-1)?.content;
  if (!Array.isArray(content)) fail('user content is not an array of parts: ' + JSON.stringify(content)?.slice(0, 200));
  const imgs = content.filter((p) => p.type === 'image_url');
  const texts = content.filter((p) => p.type === 'text');
  if (imgs.length !== 1) fail(`${imgs.length} image_url parts sent, want 1`);
  const u = imgs[0].image_url?.url || '';
  if (!u.startsWith('data:image/png;base64,')) fail('image_url is not a PNG data: URL: ' + u.slice(0, 40));
  if (!Buffer.from(u.slice(u.indexOf(',') + 1), 'base64').equals(want)) fail('the data: URL does not hold the fixture bytes');
  if (texts.length !== 1 || texts[0].text !== 'What is in this picture?') fail('text part: ' + JSON.stringify(texts));
  if (await page.locator('#pending img').count() !== 0 || await page.isVisible('#pending')) fail('thumbnails left after sending');
  if (await page.locator('.user .imgs img').count() !== 1) fail('the sent message does not show its image');
  return { parts: content.map((p) => p.type), data_url_chars: u.length };
}

// The conversation the page keeps (answers canned here): a refused message is not sent again
// with the next; a stream that closes before its end says so; New chat while a reply is on its
// way starts empty (that reply does not join the new history).
async function historyChecks(page) {
  const bodies = [];
  let answer = null;
  await page.unroute('**/v1/chat/completions');
  await page.route('**/v1/chat/completions', async (route) => {
    bodies.push(JSON.parse(route.request().postData()));
    const a = answer;
    if (a.delay) await new Promise((r) => setTimeout(r, a.delay));
    await route.fulfill(a.fulfill).catch(() => {});   // (an aborted request has no one to answer)
  });
  const say = async (text) => { await page.fill('#input', text); await page.click('#send'); };
  const settled = () => page.waitForFunction(() => document.getElementById('send').disabled === false, null, { timeout: 10000 });
  await page.click('#clear');
  answer = { fulfill: { status: 400, contentType: 'application/json',
                        body: JSON.stringify({ error: { code: 400, message: 'too long for the context', type: 'exceed_context_size_error' } }) } };
  await say('a message the server refuses');
  await settled();
  if (!/too long for the context/.test(await page.textContent('#log'))) fail('the refusal is not shown');
  answer = { fulfill: { status: 200, contentType: 'text/event-stream', body: cannedSSE() } };
  await say('hi');
  await settled();
  const sent = bodies.at(-1).messages;
  if (sent.length !== 1 || sent[0].content !== 'hi') fail('after a refused message the next one sent: ' + JSON.stringify(sent));
  // a stream cut before its end
  answer = { fulfill: { status: 200, contentType: 'text/event-stream',
                        body: 'data: ' + JSON.stringify({ choices: [{ index: 0, delta: { content: 'partial' }, finish_reason: null }] }) + '\n\n' } };
  await say('again');
  await settled();
  const last = await page.evaluate(() => [...document.querySelectorAll('.assistant')].at(-1).textContent);
  if (!/partial/.test(last) || !/closed before the reply finished/.test(last)) fail('a cut stream is not said to be cut: ' + last);
  // New chat while a reply is on its way
  answer = { delay: 1500, fulfill: { status: 200, contentType: 'text/event-stream', body: cannedSSE() } };
  await say('an old chat');
  await page.waitForFunction(() => document.getElementById('stop').disabled === false, null, { timeout: 10000 });
  await page.click('#clear');
  await settled();
  answer = { fulfill: { status: 200, contentType: 'text/event-stream', body: cannedSSE() } };
  await say('a new chat');
  await settled();
  const fresh = bodies.at(-1).messages;
  if (fresh.length !== 1 || fresh[0].content !== 'a new chat') fail('New chat during a reply kept: ' + JSON.stringify(fresh));
  return { requests: bodies.length };
}
