// anthropic.test.mjs: bitspark serve's Anthropic Messages API (/v1/messages, count_tokens)
// driven by the official `@anthropic-ai/sdk` npm package, run by tests/test_server_anthropic.sh
// with BS_URL (a server on a synthetic tiny model), BS_KEY_URL (the same with --api-key
// secret-key) and BS_NODE_DIR (where the pinned packages are installed). The answers are checked
// against /v1/chat/completions on the same conversation: one code path, two shapes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { slotsIdle } from './slots_idle.mjs';

const require = createRequire(process.env.BS_NODE_DIR + '/');
const AnthropicMod = require('@anthropic-ai/sdk');
const Anthropic = AnthropicMod.default ?? AnthropicMod;
const URL_ = process.env.BS_URL;
const client = new Anthropic({ baseURL: URL_, apiKey: 'sk-test', maxRetries: 0, timeout: 60_000 });
const noThink = { thinking: { type: 'disabled' } };
const JSON_HDR = { 'Content-Type': 'application/json' };

async function chat(body) {
  const r = await fetch(URL_ + '/v1/chat/completions', { method: 'POST', headers: JSON_HDR, body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  return r.json();
}

const weather = { name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object',
  properties: { city: { type: 'string', maxLength: 8 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] } };
const weatherFn = { type: 'function', function: { name: weather.name, description: weather.description,
  parameters: weather.input_schema } };

test('messages.create: a message with a text block, usage, the same text as chat/completions', async () => {
  const r = await client.messages.create({ model: 'bonsai', system: 'You are terse.', max_tokens: 12, temperature: 0,
    ignore_eos: true, messages: [{ role: 'user', content: 'Hello there' }], ...noThink });
  assert.match(r.id, /^msg_/);
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.stop_sequence, null);
  assert.equal(r.content.length, 1);
  assert.equal(r.content[0].type, 'text');
  assert.equal(r.usage.output_tokens, 12);
  const c = await chat({ messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello there' }],
    max_tokens: 12, temperature: 0, ignore_eos: true, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(r.content[0].text, c.choices[0].message.content);
  assert.equal(r.usage.input_tokens + r.usage.cache_read_input_tokens, c.usage.prompt_tokens);
});

test('system as blocks, multi-turn with a thinking block in history, images refused without --mmproj', async () => {
  const r = await client.messages.create({ model: 'm', max_tokens: 4, temperature: 0,
    system: [{ type: 'text', text: 'Be brief.' }, { type: 'text', text: ' Be kind.' }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'greet', signature: '' }, { type: 'text', text: 'Hello!' }] },
      { role: 'user', content: 'And now?' }], ...noThink });
  assert.ok(r.content.length >= 1);
  const img = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } };
  await assert.rejects(client.messages.create({ model: 'm', max_tokens: 4,
    messages: [{ role: 'user', content: [img, { type: 'text', text: 'What is it?' }] }] }),
  (e) => e instanceof Anthropic.BadRequestError && e.error?.type === 'error' && /image|mmproj|vision/i.test(e.error.error.message));
});

test('streaming: Anthropic events in order, the same message as without streaming', async () => {
  const req = { model: 'm', max_tokens: 10, temperature: 0, ignore_eos: true,
    messages: [{ role: 'user', content: 'Tell me a story' }], ...noThink };
  const whole = await client.messages.create(req);
  const events = [];
  for await (const ev of await client.messages.create({ ...req, stream: true })) events.push(ev);
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.match(events[0].message.id, /^msg_/);
  // every block: start, deltas, stop; indices in order
  let open = -1, text = '';
  for (const e of events.slice(1, -2)) {
    if (e.type === 'ping') continue;
    if (e.type === 'content_block_start') { assert.equal(open, -1); open = e.index; continue; }
    assert.equal(e.index, open);
    if (e.type === 'content_block_stop') { open = -1; continue; }
    assert.equal(e.type, 'content_block_delta');
    if (e.delta.type === 'text_delta') text += e.delta.text;
  }
  assert.equal(open, -1);
  assert.equal(text, whole.content[0].text);
  assert.equal(events.at(-2).delta.stop_reason, 'max_tokens');
  assert.equal(events.at(-2).usage.output_tokens, 10);
  // the SDK's own accumulator builds the same message
  const final = await client.messages.stream(req).finalMessage();
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, 10);
});

test('streaming a long prompt: a ping per prompt chunk evaluated, before the first block', async () => {
  const words = Array.from({ length: 220 }, (_, i) => `w${i}`).join(' ');
  const req = { model: 'm', max_tokens: 2, temperature: 0, ignore_eos: true, cache_prompt: false,
    messages: [{ role: 'user', content: words }], ...noThink };
  const n = (await client.messages.countTokens({ model: 'm', messages: req.messages, ...noThink })).input_tokens;
  assert.ok(n > 600 && n < 1000, `prompt of ${n} tokens`);
  // raw events: the SDK's iterator drops pings
  const r = await fetch(URL_ + '/v1/messages', { method: 'POST', headers: JSON_HDR, body: JSON.stringify({ ...req, stream: true }) });
  assert.equal(r.status, 200);
  const types = (await r.text()).split('\n').filter((l) => l.startsWith('event: ')).map((l) => l.slice(7));
  assert.equal(types.at(-1), 'message_stop');
  const first = types.indexOf('content_block_start');
  const pings = types.slice(0, first).filter((t) => t === 'ping').length;
  // the one after message_start, then one when the slot takes the prompt and one per 256 rows
  assert.ok(pings >= 1 + Math.ceil(n / 256), `${pings} pings for ${n} prompt tokens: ${types.join(' ')}`);
  assert.equal(types.slice(first).filter((t) => t === 'ping').length, 0);
});

test('thinking: the model reasoning comes as a thinking block, streamed as thinking_delta', async () => {
  const req = { model: 'm', max_tokens: 6, temperature: 0, ignore_eos: true, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'Think first' }] };
  const r = await client.messages.create(req);
  assert.equal(r.content[0].type, 'thinking');
  assert.ok(r.content[0].thinking.length > 0);
  const c = await chat({ messages: req.messages, max_tokens: 6, temperature: 0, ignore_eos: true,
    chat_template_kwargs: { enable_thinking: true } });
  assert.equal(r.content[0].thinking, c.choices[0].message.reasoning_content);
  const final = await client.messages.stream(req).finalMessage();
  assert.equal(final.content[0].thinking, r.content[0].thinking);
});

test('stop_sequences: stop_reason stop_sequence names the one that matched', async () => {
  const req = { model: 'm', max_tokens: 16, temperature: 0, ignore_eos: true, messages: [{ role: 'user', content: 'Go on' }], ...noThink };
  const full = (await client.messages.create(req)).content[0].text;
  const needle = full.slice(5, 8);
  assert.equal(needle.length, 3, full);
  const r = await client.messages.create({ ...req, stop_sequences: ['zzqqx', needle] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, needle);
  assert.equal(r.content[0].text, full.slice(0, full.indexOf(needle)));
  const final = await client.messages.stream({ ...req, stop_sequences: ['zzqqx', needle] }).finalMessage();
  assert.equal(final.stop_reason, 'stop_sequence');
  assert.equal(final.stop_sequence, needle);
});

test('tools: tool_choice forces a tool_use block; its tool_result goes back and is answered', async () => {
  const user = { role: 'user', content: 'Weather in Paris?' };
  const r = await client.messages.create({ model: 'm', max_tokens: 96, temperature: 0, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather' }, messages: [user] });
  assert.equal(r.stop_reason, 'tool_use');
  const use = r.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(r.content));
  assert.match(use.id, /^toolu_/);
  assert.equal(use.name, 'get_weather');
  assert.ok(typeof use.input.city === 'string' && ['c', 'f'].includes(use.input.unit), JSON.stringify(use.input));
  // streamed: the same call, its input as input_json_delta
  const s = await client.messages.stream({ model: 'm', max_tokens: 96, temperature: 0, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather' }, messages: [user] }).finalMessage();
  assert.deepEqual(s.content.find((b) => b.type === 'tool_use').input, use.input);
  assert.equal(s.stop_reason, 'tool_use');
  // tool_choice any: some tool is called
  const any = await client.messages.create({ model: 'm', max_tokens: 96, temperature: 0, tools: [weather],
    tool_choice: { type: 'any' }, messages: [user] });
  assert.equal(any.stop_reason, 'tool_use');
  // disable_parallel_tool_use: taken (at most one tool_use block), a boolean
  const one = await client.messages.create({ model: 'm', max_tokens: 96, temperature: 0, tools: [weather],
    tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [user] });
  assert.equal(one.content.filter((b) => b.type === 'tool_use').length, 1);
  // the round trip: the tool_use and its tool_result in history
  const convo = [user, { role: 'assistant', content: r.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp": 21}' }] }];
  const a = await client.messages.create({ model: 'm', max_tokens: 8, temperature: 0, tools: [weather], messages: convo, ...noThink });
  assert.equal(a.type, 'message');
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(a.stop_reason), a.stop_reason);
  // rendered as the chat endpoint renders the same conversation (prompt tokens equal)
  const c = await chat({ messages: [user, { role: 'assistant', content: '', tool_calls: [{ id: use.id, type: 'function',
    function: { name: use.name, arguments: JSON.stringify(use.input) } }] }, { role: 'tool', tool_call_id: use.id, content: '{"temp": 21}' }],
  tools: [weatherFn], max_tokens: 1, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(a.usage.input_tokens + a.usage.cache_read_input_tokens, c.usage.prompt_tokens);
});

test('count_tokens: the prompt size, the same as a generation counts it', async () => {
  const req = { model: 'm', system: 'S', tools: [weather], messages: [{ role: 'user', content: 'Count me' }], ...noThink };
  const n = await client.messages.countTokens(req);
  assert.ok(n.input_tokens > 10);
  const r = await client.messages.create({ ...req, max_tokens: 1 });
  assert.equal(n.input_tokens, r.usage.input_tokens + r.usage.cache_read_input_tokens);
  const longer = await client.messages.countTokens({ ...req, messages: [{ role: 'user', content: 'Count me and more words' }] });
  assert.ok(longer.input_tokens > n.input_tokens);
});

test('errors: Anthropic error shape and status codes', async () => {
  await assert.rejects(client.messages.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.type === 'error' &&
      e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message));
  const bad = async (body, re) => {
    const r = await fetch(URL_ + '/v1/messages', { method: 'POST', headers: JSON_HDR, body: JSON.stringify(body) });
    const j = await r.json();
    assert.equal(r.status, 400, JSON.stringify(j));
    assert.equal(j.type, 'error');
    assert.equal(j.error.type, 'invalid_request_error');
    assert.match(j.error.message, re);
  };
  const m = [{ role: 'user', content: 'x' }];
  await bad({ max_tokens: 4, messages: [] }, /messages/);
  await bad({ max_tokens: 4, messages: 'hi' }, /messages/);
  await bad({ max_tokens: 0, messages: m }, /max_tokens/);
  await bad({ max_tokens: 4, messages: [{ role: 'system', content: 'x' }] }, /role/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'document', source: {} }] }] }, /document/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: 42 }] }, /content/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] }, /text string/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: [null, 7] }] }, /not supported/);
  await bad({ max_tokens: 4, system: [{ type: 'image', source: { type: 'url', url: 'https://x/y.png' } }], messages: m }, /system/);
  await bad({ max_tokens: 4, messages: m, tools: [{ name: 'x' }] }, /input_schema/);
  await bad({ max_tokens: 4, messages: m, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, /not supported/);
  await bad({ max_tokens: 4, messages: m, tool_choice: { type: 'tool' } }, /tool_choice/);
  await bad({ max_tokens: 4, messages: m, tools: [{ name: 'x', input_schema: {} }],
    tool_choice: { type: 'auto', disable_parallel_tool_use: 'yes' } }, /disable_parallel_tool_use/);
  await bad({ max_tokens: 4, messages: m, temperature: 'hot' }, /temperature/);
  await bad({ max_tokens: 4, messages: m, stop_sequences: 'x' }, /stop_sequences/);
  await bad({ max_tokens: 4, messages: m, stop_sequences: Array(65).fill('x') }, /stop_sequences/);
  await bad({ max_tokens: 4, messages: m, temperature: -1 }, /temperature/);
  await bad({ max_tokens: 4, messages: m, stop_sequences: [1] }, /stop_sequences/);
  await bad({ max_tokens: 4, messages: m, thinking: { type: 'maybe' } }, /thinking/);
  await bad({ max_tokens: 4, messages: m, mcp_servers: [{ type: 'url', url: 'https://x', name: 'x' }] }, /mcp_servers/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }, /tool_use_id/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64' } }] }] }, /source/);
  await bad({ max_tokens: 4, messages: [{ role: 'assistant', content: [{ type: 'tool_use', name: 'x', input: 'y' }] }] }, /input/);
  await bad({ max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'text', text: 'a\u0000b' }] }], top_k: -5 }, /top_k/);
  const r = await fetch(URL_ + '/health');
  assert.equal(r.status, 200);
});

test('x-api-key: accepted as the API key (and Bearer), 401 without', async () => {
  const base = process.env.BS_KEY_URL;
  const req = { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
  const ok = await new Anthropic({ baseURL: base, apiKey: 'secret-key', maxRetries: 0 }).messages.create(req);
  assert.equal(ok.type, 'message');
  const bearer = await new Anthropic({ baseURL: base, apiKey: null, authToken: 'secret-key', maxRetries: 0 }).messages.countTokens(
    { model: 'm', messages: req.messages });
  assert.ok(bearer.input_tokens > 0);
  await assert.rejects(new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 }).messages.create(req),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
  const r = await fetch(base + '/v1/messages', { method: 'POST', headers: { ...JSON_HDR, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(req) });
  assert.equal(r.status, 401);
});

test('errors the HTTP layer gives before routing have Anthropic\'s shape on /v1/messages*', async () => {
  const base = process.env.BS_KEY_URL;   // --api-key secret-key --body-limit 65536
  const req = { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
  await assert.rejects(new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 }).messages.create(req),
    (e) => e instanceof Anthropic.AuthenticationError && e.error?.type === 'error' &&
      e.error.error.type === 'authentication_error');
  const key = { 'x-api-key': 'secret-key' };
  const shaped = async (path, init, status, type) => {
    const r = await fetch(base + path, init);
    const j = await r.json();
    assert.equal(r.status, status, JSON.stringify(j));
    assert.equal(j.type, 'error', `${path} ${status}: ${JSON.stringify(j)}`);
    assert.equal(j.error.type, type, JSON.stringify(j));
    assert.equal(typeof j.error.message, 'string');
  };
  await shaped('/v1/messages', { method: 'POST', headers: { ...JSON_HDR, ...key }, body: '{"max_tokens": 2,' }, 400,
    'invalid_request_error');
  await shaped('/v1/messages', { method: 'POST', headers: { 'Content-Type': 'text/plain', Origin: 'https://evil.example', ...key }, body: '{}' }, 415,
    'invalid_request_error');
  await shaped('/v1/messages', { method: 'GET', headers: key }, 405, 'invalid_request_error');
  await shaped('/v1/messages/nope', { method: 'POST', headers: { ...JSON_HDR, ...key }, body: '{}' }, 404, 'not_found_error');
  await shaped('/v1/messages/count_tokens', { method: 'POST', headers: JSON_HDR, body: '{}' }, 401, 'authentication_error');
  await shaped('/v1/messages', { method: 'POST', headers: { ...JSON_HDR, ...key },
    body: JSON.stringify({ ...req, system: 'x'.repeat(70000) }) }, 413, 'request_too_large');
  // elsewhere the OpenAI shape stays
  const r = await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { ...JSON_HDR, ...key }, body: '{' });
  const j = await r.json();
  assert.equal(r.status, 400);
  assert.equal(j.error.code, 400);
  assert.equal(j.type, undefined);
});

test('a client abort mid-stream frees the slot', async () => {
  const ac = new AbortController();
  const stream = await client.messages.create({ model: 'm', max_tokens: 100000, temperature: 0, ignore_eos: true, stream: true,
    messages: [{ role: 'user', content: 'Go on forever' }], ...noThink }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const ev of stream) { if (ev.type === 'content_block_delta' && ++n === 3) break; }
  } catch (e) { /* breaking aborts the request */ }
  assert.equal(n, 3);
  assert.ok(await slotsIdle(URL_), 'all slots idle after the abort');
});
