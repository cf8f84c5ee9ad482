// loop_guard.test.mjs: the doom-loop guard of bitspark serve, run by tests/server_loop_guard.sh with
// BS_URL (a server started with --loop-guard rewind on the looping model of tests/loop_model.h),
// BS_EXPECT (the texts test_server_loop_guard.c worked out for a generation from the model's
// first cycle word) and BS_NODE_DIR (the pinned openai package). Raw HTTP through fetch (SSE
// parsed by hand), plus the openai client reading the extra `loop_guard` field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(process.env.BS_NODE_DIR + '/');
const OpenAI = require('openai').default ?? require('openai');
const URL_ = process.env.BS_URL;
const JSON_HDR = { 'Content-Type': 'application/json' };   // the server refuses other POST bodies
const E = JSON.parse(readFileSync(process.env.BS_EXPECT, 'utf8'));
const client = new OpenAI({ baseURL: URL_ + '/v1', apiKey: 'sk-test', maxRetries: 0, timeout: 60_000 });
const K = E.cycle_len, M = E.escape_len;

// antidoom's criterion by brute force: some period p repeats >= 4 times in a row, covering >= 60
// characters (code points).
function hasLoop(text, minRepeats = 4, minChars = 60) {
  const s = [...text];
  for (let p = 1; p * minRepeats <= s.length; p++) {
    let run = 0;   // characters equal to the one p earlier, in a row
    for (let i = p; i < s.length; i++) {
      run = s[i] === s[i - p] ? run + 1 : 0;
      const copies = Math.floor((run + p) / p);
      if (copies >= minRepeats && copies * p >= minChars) return true;
    }
  }
  return false;
}

async function post(path, body) {
  const r = await fetch(URL_ + path, { method: 'POST', headers: JSON_HDR, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

// POST with stream: true; returns the parsed `data:` events (without [DONE]) and whether it ended.
async function postStream(path, body) {
  const r = await fetch(URL_ + path, { method: 'POST', headers: JSON_HDR, body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200);
  const raw = await r.text();
  const events = raw.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  return events.slice(0, -1).map((e) => JSON.parse(e));
}

async function metrics() {
  const text = await (await fetch(URL_ + '/metrics')).text();
  const get = (n) => Number(text.match(new RegExp('^llamacpp:' + n + ' (\\S+)$', 'm'))[1]);
  return { loops: get('loop_guard_loops_detected_total'), rewinds: get('loop_guard_rewinds_total'),
    stops: get('loop_guard_stops_total') };
}

const compl = (extra) => ({ prompt: E.prompt, max_tokens: 64, temperature: 0, ...extra });

// The span of the one loop this model falls into from its first cycle word.
function checkSpan(span, repeats) {
  assert.equal(span.period, E.period);
  assert.equal(span.repeats, repeats);
  assert.equal(span.start, 0);
  assert.equal(span.repeat_start, E.period);
  assert.equal(span.end, repeats * E.period);
  assert.equal(span.rejected_token, K);          // the first token of the second copy
  assert.equal(span.rejected_id, E.rejected_id);
}

test('completions, rewind (the server default): the loop is gone, one rewind reported', async () => {
  const m0 = await metrics();
  const { status, json: r } = await post('/v1/completions', compl({}));
  assert.equal(status, 200);
  assert.equal(r.choices[0].text, E.rewind_text);
  assert.ok(!hasLoop(r.choices[0].text));
  assert.equal(r.choices[0].finish_reason, 'stop');             // end-of-generation after the escape
  assert.equal(r.usage.completion_tokens, K + M);
  assert.equal(r.timings.predicted_n, K + M);
  assert.deepEqual(Object.keys(r.loop_guard).sort(),
    ['discarded_tokens', 'loops_detected', 'mode', 'rewinds', 'span', 'stopped']);
  assert.equal(r.loop_guard.mode, 'rewind');
  assert.equal(r.loop_guard.loops_detected, 1);
  assert.equal(r.loop_guard.rewinds, 1);
  assert.equal(r.loop_guard.discarded_tokens, 4 * K - K);        // copies 2..4 thrown away
  assert.equal(r.loop_guard.stopped, false);
  checkSpan(r.loop_guard.span, 4);
  const m1 = await metrics();
  assert.deepEqual(m1, { loops: m0.loops + 1, rewinds: m0.rewinds + 1, stops: m0.stops });
});

test('completions, "loop_guard": "stop": ends as the 4th copy completes', async () => {
  const m0 = await metrics();
  const { json: r } = await post('/v1/completions', compl({ loop_guard: 'stop' }));
  assert.equal(r.choices[0].text, E.stop_text);
  assert.ok(hasLoop(r.choices[0].text));
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.completion_tokens, 4 * K);
  assert.equal(r.loop_guard.mode, 'stop');
  assert.equal(r.loop_guard.stopped, true);
  assert.equal(r.loop_guard.loops_detected, 1);
  assert.equal(r.loop_guard.rewinds, 0);
  assert.equal(r.loop_guard.discarded_tokens, 0);
  checkSpan(r.loop_guard.span, 4);
  const m1 = await metrics();
  assert.deepEqual(m1, { loops: m0.loops + 1, rewinds: m0.rewinds, stops: m0.stops + 1 });
});

test('completions, "loop_guard": "off": the model loops until max_tokens', async () => {
  const { json: r } = await post('/v1/completions', compl({ loop_guard: 'off', max_tokens: 30 }));
  assert.equal(r.choices[0].text, E.off_text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(r.loop_guard, { mode: 'off', loops_detected: 0, rewinds: 0, discarded_tokens: 0, stopped: false,
    span: null });
});

test('per-request thresholds: min_repeats 6 stops at the 6th copy; max_rewinds 0 stops instead of rewinding', async () => {
  let { json: r } = await post('/v1/completions', compl({ loop_guard: { mode: 'stop', min_repeats: 6 } }));
  assert.equal(r.choices[0].text, E.stop6_text);
  assert.equal(r.usage.completion_tokens, 6 * K);
  checkSpan(r.loop_guard.span, 6);
  ({ json: r } = await post('/v1/completions', compl({ loop_guard: { max_rewinds: 0 } })));   // mode: the default
  assert.equal(r.loop_guard.mode, 'rewind');
  assert.equal(r.loop_guard.stopped, true);
  assert.equal(r.loop_guard.rewinds, 0);
  assert.equal(r.choices[0].text, E.stop_text);
  assert.equal(r.choices[0].finish_reason, 'stop');
  // a threshold the text cannot reach: no loop reported
  ({ json: r } = await post('/v1/completions', compl({ loop_guard: { min_chars: 100000 }, max_tokens: 30 })));
  assert.equal(r.choices[0].text, E.off_text);
  assert.equal(r.loop_guard.loops_detected, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
});

// Two top_logprobs maps name the same tokens with logprobs within tol.
function sameTop(a, b, tol, what) {
  assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort(), what);
  for (const k of Object.keys(a)) assert.ok(Math.abs(a[k] - b[k]) <= tol, `${what}: ${k} ${a[k]} vs ${b[k]}`);
}

test('rewind leaves the model state as a straight run over the kept tokens (logprobs)', async () => {
  const rw = (await post('/v1/completions', compl({ logprobs: 3 }))).json.choices[0];
  const off = (await post('/v1/completions', compl({ logprobs: 3, loop_guard: 'off', max_tokens: 3 * K }))).json.choices[0];
  const top = rw.logprobs.top_logprobs, offTop = off.logprobs.top_logprobs;
  // the distribution at the rewind point (after the kept first copy), where the banned token was
  // drawn before, is the straight run's (1e-4: the same single-token decode steps, restored state)
  for (let i = 0; i <= K; i++) sameTop(top[i], offTop[i], 1e-4, `position ${i}`);
  // and the check can tell positions apart: the same word a copy later has another distribution
  assert.ok(Math.abs(offTop[K][' pro'] - offTop[2 * K][' pro']) > 1e-2, 'context matters');
  // after the escape token: a straight run whose prompt is the kept tokens (a batched prompt pass
  // instead of single steps: 1e-3)
  const ids = (await post('/tokenize', { content: rw.text })).json.tokens;
  assert.equal(ids.length, K + M);
  const st = (await post('/v1/completions', { prompt: [...E.prompt, ...ids.slice(0, K + 1)], max_tokens: M - 1,
    temperature: 0, logprobs: 3, loop_guard: 'off' })).json.choices[0];
  assert.equal(rw.text, E.rewind_text);
  assert.equal(st.text, rw.text.slice(rw.logprobs.text_offset[K + 1]));
  for (let j = 0; j + 1 < M; j++) sameTop(top[K + 1 + j], st.logprobs.top_logprobs[j], 1e-3, `escape ${j}`);
});

test('streaming completions, rewind: no streamed piece is ever taken back; the finish chunk reports', async () => {
  const ev = await postStream('/v1/completions', compl({ logprobs: 2, stream_options: { include_usage: true } }));
  const text = ev.map((e) => e.choices[0]?.text ?? '').join('');
  assert.equal(text, E.rewind_text);
  const toks = ev.flatMap((e) => e.choices[0]?.logprobs?.tokens ?? []);
  assert.equal(toks.length, K + M);                              // logprobs of kept tokens only
  assert.equal(toks.join(''), E.rewind_text);
  const fin = ev.at(-2), usage = ev.at(-1);
  assert.equal(fin.choices[0].finish_reason, 'stop');
  assert.equal(fin.timings.predicted_n, K + M);
  assert.equal(fin.loop_guard.rewinds, 1);
  assert.equal(fin.loop_guard.discarded_tokens, 3 * K);
  checkSpan(fin.loop_guard.span, 4);
  assert.equal(usage.usage.completion_tokens, K + M);
  for (const e of ev.slice(0, -2)) assert.equal(e.loop_guard, undefined);
});

test('streaming completions, stop', async () => {
  const ev = await postStream('/v1/completions', compl({ loop_guard: 'stop' }));
  assert.equal(ev.map((e) => e.choices[0].text).join(''), E.stop_text);
  assert.equal(ev.at(-1).choices[0].finish_reason, 'stop');
  assert.equal(ev.at(-1).loop_guard.stopped, true);
});

// Chat: the template's assistant header leads this model into the same cycle (from another word).
const chat = (extra) => ({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 60, temperature: 0,
  chat_template_kwargs: { enable_thinking: false }, ...extra });

test('chat, non-streaming: off loops, stop ends at the loop, rewind removes it', async () => {
  const off = (await post('/v1/chat/completions', chat({ loop_guard: 'off' }))).json;
  const offText = off.choices[0].message.content;
  assert.ok(hasLoop(offText), 'the model loops: ' + offText);
  assert.equal(off.loop_guard.mode, 'off');
  const stop = (await post('/v1/chat/completions', chat({ loop_guard: 'stop' }))).json;
  const stopText = stop.choices[0].message.content;
  assert.equal(stop.choices[0].finish_reason, 'stop');
  assert.ok(stop.loop_guard.stopped);
  assert.equal(stop.usage.completion_tokens, 4 * K);
  assert.ok(offText.startsWith(stopText) && hasLoop(stopText));
  assert.ok(!hasLoop(stopText.slice(0, -1)), 'stopped as soon as the loop was complete');
  const rw = (await post('/v1/chat/completions', chat({}))).json;
  const rwText = rw.choices[0].message.content;
  assert.ok(!hasLoop(rwText), rwText);
  assert.equal(rw.choices[0].finish_reason, 'stop');
  assert.equal(rw.loop_guard.mode, 'rewind');
  assert.equal(rw.loop_guard.rewinds, 1);
  assert.equal(rw.loop_guard.stopped, false);
  assert.equal(rw.usage.completion_tokens, K + M);
  const p = rw.loop_guard.span.period;
  assert.ok(rwText.startsWith(offText.slice(0, p)), 'the first copy is kept');
  // the first token of the second copy is not (each word of this model is a space + >= 3 letters)
  assert.notEqual(rwText.slice(p, p + 4), offText.slice(p, p + 4));
});

test('chat, streaming rewind: same text as non-streaming; loop_guard on the finish chunk', async () => {
  const full = (await post('/v1/chat/completions', chat({}))).json;
  const ev = await postStream('/v1/chat/completions', chat({}));
  assert.equal(ev.map((e) => e.choices[0].delta.content ?? '').join(''), full.choices[0].message.content);
  assert.equal(ev.at(-1).choices[0].finish_reason, 'stop');
  assert.deepEqual(ev.at(-1).loop_guard, full.loop_guard);
});

test('openai client: completions.create carries loop_guard (raw response too), and on the stream', async () => {
  const { data, response } = await client.completions.create({ model: 'x', prompt: E.prompt, max_tokens: 64,
    temperature: 0, loop_guard: 'stop' }).withResponse();
  assert.equal(data.choices[0].text, E.stop_text);
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.equal(data.loop_guard.stopped, true);
  assert.equal(response.status, 200);
  const r = await client.chat.completions.create({ model: 'x', ...chat({}) });
  assert.equal(r.loop_guard.rewinds, 1);
  assert.ok(!hasLoop(r.choices[0].message.content));
  const chunks = [];
  for await (const c of await client.completions.create({ model: 'x', prompt: E.prompt, max_tokens: 64,
    temperature: 0, stream: true })) chunks.push(c);
  assert.equal(chunks.map((c) => c.choices[0].text).join(''), E.rewind_text);
  assert.equal(chunks.at(-1).loop_guard.rewinds, 1);
});

test('bad loop_guard fields are 400s; /props shows the default', async () => {
  for (const lg of ['sometimes', 3, { mode: 'later' }, { min_repeats: 1 }, { max_rewinds: -1 }, { typo: 1 }]) {
    const { status, json } = await post('/v1/completions', compl({ loop_guard: lg }));
    assert.equal(status, 400, JSON.stringify(lg));
    assert.match(json.error.message, /loop_guard|min_repeats|max_rewinds/);
  }
  const props = await (await fetch(URL_ + '/props')).json();
  assert.equal(props.default_generation_settings.loop_guard.mode, 'rewind');
  assert.equal(props.default_generation_settings.loop_guard.min_repeats, 4);
});
