// openai.test.mjs: bitspark serve driven by the official `openai` npm package (v6), run by
// tests/test_server_openai.sh with BS_URL (a server with -np 4 on a synthetic tiny model) and
// BS_NODE_DIR (where the pinned packages are installed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(process.env.BS_NODE_DIR + '/');
const OpenAI = require('openai').default ?? require('openai');
const URL_ = process.env.BS_URL;
const JSON_HDR = { 'Content-Type': 'application/json' };   // the server refuses other POST bodies
const client = new OpenAI({ baseURL: URL_ + '/v1', apiKey: 'sk-test', maxRetries: 0, timeout: 60_000 });
const noThink = { chat_template_kwargs: { enable_thinking: false } };
const msgs = (text) => [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: text }];

async function getJSON(path) {
  const r = await fetch(URL_ + path);
  assert.equal(r.status, 200, path);
  return r.json();
}

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

test('models.list', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].object, 'model');
  assert.match(list.data[0].id, /tiny/);
});

test('chat: non-streaming answer with usage and timings', async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: msgs('Hello there'), max_tokens: 12,
    temperature: 0, ignore_eos: true, ...noThink });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.ok(r.usage.prompt_tokens > 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(r.timings.predicted_n, 12);
  assert.equal(r.timings.prompt_n + r.timings.cache_n, r.usage.prompt_tokens);
  assert.ok(r.timings.predicted_per_second > 0);
});

test('chat: temperature 0 is deterministic; seeded sampling is reproducible', async () => {
  const req = { model: 'x', messages: msgs('Tell me a story'), max_tokens: 16, ignore_eos: true, ...noThink };
  const a = await client.chat.completions.create({ ...req, temperature: 0 });
  const b = await client.chat.completions.create({ ...req, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const s1 = await client.chat.completions.create({ ...req, temperature: 1.0, seed: 1234 });
  const s2 = await client.chat.completions.create({ ...req, temperature: 1.0, seed: 1234 });
  assert.equal(s1.choices[0].message.content, s2.choices[0].message.content);
});

test('chat: stream with include_usage: role, deltas, finish, usage, [DONE]; same text as non-stream', async () => {
  const req = { model: 'x', messages: msgs('Stream this'), max_tokens: 10, temperature: 0, ignore_eos: true, ...noThink };
  const full = await client.chat.completions.create(req);
  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true,
    stream_options: { include_usage: true } }));
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.completion_tokens, 10);
  const fin = chunks.at(-2);
  assert.equal(fin.choices[0].finish_reason, 'length');
  assert.equal(fin.timings.predicted_n, 10);
  for (const c of chunks.slice(0, -2)) assert.equal(c.choices[0].finish_reason, null);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, full.choices[0].message.content);
  assert.ok(chunks.length >= 4, 'several content chunks');
});

test('chat: stream without include_usage has no usage chunk', async () => {
  const chunks = await collect(await client.chat.completions.create({ model: 'x', messages: msgs('Hi'),
    max_tokens: 4, temperature: 0, stream: true, ...noThink }));
  assert.ok(chunks.every((c) => c.choices.length === 1 && !c.usage));
});

test('chat: stop string cuts the text before it; max_tokens gives length', async () => {
  const req = { model: 'x', messages: msgs('Count'), max_tokens: 24, temperature: 0, ignore_eos: true, ...noThink };
  const full = (await client.chat.completions.create(req)).choices[0].message.content;
  assert.ok(full.length > 8, 'need some text: ' + JSON.stringify(full));
  const stop = full.slice(5, 8);
  const cut = full.slice(0, full.indexOf(stop));
  const r = await client.chat.completions.create({ ...req, stop: [stop] });
  assert.equal(r.choices[0].message.content, cut.trimStart());
  assert.equal(r.choices[0].finish_reason, 'stop');
  const chunks = await collect(await client.chat.completions.create({ ...req, stop, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), cut.trimStart());
});

test('chat: thinking on puts the output into reasoning_content', async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: msgs('Think first'), max_tokens: 8,
    temperature: 0, ignore_eos: true, logit_bias: {} });
  const m = r.choices[0].message;
  const gen = (m.reasoning_content ?? '') + (m.content ?? '');
  assert.ok(gen.length > 0);
  assert.ok((m.reasoning_content ?? '').length > 0, 'reasoning_content: ' + JSON.stringify(m));
  const chunks = await collect(await client.chat.completions.create({ model: 'x', messages: msgs('Think first'),
    max_tokens: 8, temperature: 0, ignore_eos: true, stream: true }));
  const rs = chunks.map((c) => c.choices[0]?.delta?.reasoning_content ?? '').join('');
  assert.equal(rs, m.reasoning_content);
});

test('chat: logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: msgs('Probabilities'), max_tokens: 6,
    temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3, ...noThink });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 6);
  for (const e of lp) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    assert.equal(e.token, e.top_logprobs[0].token, 'greedy picks the most likely token');
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6);
  }
});

test('completions: text, logprobs and echo', async () => {
  const r = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 5,
    temperature: 0, logprobs: 2, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 5);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (const t of lp.top_logprobs) assert.equal(Object.keys(t).length <= 2, true);
  const e = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 5,
    temperature: 0, echo: true, ignore_eos: true });
  assert.equal(e.choices[0].text, 'Once upon a time' + r.choices[0].text);
  const chunks = await collect(await client.completions.create({ model: 'x', prompt: 'Once upon a time',
    max_tokens: 5, temperature: 0, stream: true, ignore_eos: true }));
  assert.equal(chunks.map((c) => c.choices[0].text).join(''), r.choices[0].text);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
});

test('tools: offered tools render, a tool call round trip renders, tool_calls shape', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const r = await client.chat.completions.create({ model: 'x', messages: msgs('Weather in Paris?'), tools,
    max_tokens: 6, temperature: 0, ...noThink });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  // forced output: ban nothing, but make the model's next tokens irrelevant -- the round trip
  // below checks that assistant tool_calls and tool results are accepted and rendered
  const convo = [...msgs('Weather in Paris?'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }];
  const r2 = await client.chat.completions.create({ model: 'x', messages: convo, tools, max_tokens: 4,
    temperature: 0, ...noThink });
  assert.equal(r2.choices[0].message.role, 'assistant');
  const p = await (await fetch(URL_ + '/apply-template', { method: 'POST', headers: JSON_HDR,
    body: JSON.stringify({ messages: convo, tools, ...noThink }) })).json();
  assert.match(p.prompt, /<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<\/parameter>/);
  assert.match(p.prompt, /<tool_response>\n\{"temp": 21\}\n<\/tool_response>/);
  assert.match(p.prompt, /get_weather/);
});

test('constrained output: response_format json_object / json_schema, grammar, tool_choice', async () => {
  const schema = { type: 'object', properties: { city: { enum: ['Paris', 'Rome', 'Oslo'] }, n: { type: 'integer' },
    ok: { type: 'boolean' }, tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 2 } },
    required: ['city', 'n', 'ok'] };
  const a = await client.chat.completions.create({ model: 'x', messages: msgs('Answer in JSON'), max_tokens: 96,
    temperature: 0, response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } } });
  const doc = JSON.parse(a.choices[0].message.content);
  assert.ok(['Paris', 'Rome', 'Oslo'].includes(doc.city) && Number.isInteger(doc.n) && typeof doc.ok === 'boolean', a.choices[0].message.content);
  for (const k of Object.keys(doc)) assert.ok(k in schema.properties, k);
  assert.equal(a.choices[0].finish_reason, 'stop');
  const o = await client.chat.completions.create({ model: 'x', messages: msgs('JSON please'), max_tokens: 200,
    temperature: 0.8, seed: 3, response_format: { type: 'json_object' } });
  if (o.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(o.choices[0].message.content), 'object');
  else assert.match(o.choices[0].message.content, /^\{/);   /* cut by max_tokens: still the start of an object */
  const g = await client.completions.create({ model: 'x', prompt: 'Colour:', max_tokens: 16, temperature: 0.9, seed: 5,
    grammar: 'root ::= ("red" | "green" | "blue") ("," " "? ("red" | "green" | "blue")){0,2}' });
  assert.match(g.choices[0].text, /^(red|green|blue)(, ?(red|green|blue)){0,2}$/);
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
    properties: { city: { type: 'string', maxLength: 8 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] } } },
    { type: 'function', function: { name: 'noop' } }];
  const t = await client.chat.completions.create({ model: 'x', messages: msgs('Weather?'), max_tokens: 96, temperature: 0,
    tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const call = t.choices[0].message.tool_calls?.[0];
  assert.ok(call, JSON.stringify(t.choices[0].message));
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.ok(typeof args.city === 'string' && ['c', 'f'].includes(args.unit), call.function.arguments);
  assert.equal(t.choices[0].finish_reason, 'tool_calls');
});

test('tools: XML calls stream as the model writes them; the stream helper assembles the whole answer', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }, { type: 'function', function: { name: 'noop' } }];
  // the model is made to write the Qwen3.5 XML form (tools offered, tool_choice auto)
  const grammar = 'root ::= "Checking.\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\n" [a-z]{24,30} ' +
    '"\\n</parameter>\\n<parameter=days>\\n" [1-9] "\\n</parameter>\\n</function>\\n</tool_call>\\n' +
    '<tool_call>\\n<function=noop>\\n</function>\\n</tool_call>"';
  const req = { model: 'x', messages: msgs('Weather?'), max_tokens: 400, temperature: 0, tools, grammar };
  const whole = await client.chat.completions.create(req);
  const m = whole.choices[0].message;
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, 'Checking.');
  assert.equal(m.tool_calls.length, 2);
  const args = JSON.parse(m.tool_calls[0].function.arguments);
  assert.match(args.city, /^[a-z]{24,30}$/);
  assert.ok(Number.isInteger(args.days), m.tool_calls[0].function.arguments);
  assert.equal(m.tool_calls[1].function.name, 'noop');
  assert.equal(m.tool_calls[1].function.arguments, '{}');
  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
  const deltas = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
  const first = deltas.filter((d) => d.index === 0);
  assert.equal(first[0].id, `call_${chunks[0].id}_0`);
  assert.equal(first[0].function.name, 'get_weather');
  // the city came in pieces, before its value ended
  assert.ok(first.filter((d) => d.function?.arguments).length >= 3, JSON.stringify(first));
  assert.equal(first.map((d) => d.function?.arguments ?? '').join(''), m.tool_calls[0].function.arguments);
  assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'Checking.');
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');
  // the SDK's stream helper puts the deltas together into the same message
  const helper = client.chat.completions.stream(req);
  const fin = await helper.finalChatCompletion();
  assert.deepEqual(fin.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]),
                   m.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  // parallel_tool_calls false: the first call only, streamed or not
  const one = await client.chat.completions.create({ ...req, parallel_tool_calls: false });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
  const oneChunks = await collect(await client.chat.completions.create({ ...req, parallel_tool_calls: false, stream: true }));
  assert.ok(oneChunks.every((c) => (c.choices[0]?.delta?.tool_calls ?? []).every((d) => d.index === 0)));
  // a call cut by max_tokens: the arguments it has, finish_reason length
  const cut = await client.chat.completions.create({ ...req, max_tokens: 60 });
  assert.equal(cut.choices[0].finish_reason, 'length');
  assert.equal(cut.choices[0].message.tool_calls?.[0]?.function.name, 'get_weather', JSON.stringify(cut.choices[0].message));
  assert.match(cut.choices[0].message.tool_calls[0].function.arguments, /^\{"city":"[a-z]*"\}$/);
});

test('n choices: choice k is the single answer with seed + k; the prompt is evaluated once', async () => {
  const base = { model: 'x', messages: msgs('Tell me something'), max_tokens: 10, temperature: 0.9, ignore_eos: true, ...noThink };
  const before = (await (await fetch(URL_ + '/metrics')).text()).match(/^llamacpp:prompt_tokens_total (\d+)/m)[1];
  const r = await client.chat.completions.create({ ...base, n: 3, seed: 40 });
  const after = (await (await fetch(URL_ + '/metrics')).text()).match(/^llamacpp:prompt_tokens_total (\d+)/m)[1];
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.usage.completion_tokens, 30);
  for (let k = 0; k < 3; k++) {
    const one = await client.chat.completions.create({ ...base, seed: 40 + k });
    assert.equal(r.choices[k].message.content + r.choices[k].message.reasoning_content,
                 one.choices[0].message.content + one.choices[0].message.reasoning_content, `choice ${k}`);
  }
  assert.equal(Number(after) - Number(before), r.usage.prompt_tokens, 'the other choices took the first one\'s prompt');
  await assert.rejects(client.chat.completions.create({ ...base, n: 2, stream: true }), (e) => e.status === 400);
  await assert.rejects(client.chat.completions.create({ ...base, n: 17 }), (e) => e.status === 400);
});

test('errors surface as APIError with the OpenAI shape', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: [], max_tokens: 2 }),
    (e) => e.status === 400 && e.error?.type === 'invalid_request_error');
  const long = 'word '.repeat(3000);
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: msgs(long), max_tokens: 2 }),
    (e) => e.status === 400 && e.error?.type === 'exceed_context_size_error' && e.error.n_ctx > 0);
});

test('tokenize / detokenize round trip', async () => {
  const post = async (p, b) => (await fetch(URL_ + p, { method: 'POST', headers: JSON_HDR, body: JSON.stringify(b) })).json();
  const text = 'Hello world, <|im_start|>user ünïcode';
  const t = await post('/tokenize', { content: text });
  assert.ok(t.tokens.length > 3 && t.tokens.every(Number.isInteger));
  const d = await post('/detokenize', { tokens: t.tokens });
  assert.equal(d.content, text);
  const wp = await post('/tokenize', { content: 'Hello', with_pieces: true });
  assert.equal(wp.tokens.map((x) => x.piece).join(''), 'Hello');
});

test('client abort mid-stream frees the slot', async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ model: 'x', messages: msgs('Go on forever'),
    max_tokens: 100000, temperature: 0, ignore_eos: true, stream: true, ...noThink }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const c of stream) { if (++n === 3) break; }
  } catch (e) { /* breaking aborts the request */ }
  assert.equal(n, 3);
  let idle = false;
  for (let i = 0; i < 100 && !idle; i++) {
    const slots = await getJSON('/slots');
    idle = slots.every((s) => !s.is_processing);
    if (!idle) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(idle, 'all slots idle after the abort');
});

test('batched slots: 4 concurrent greedy requests equal their solo answers; decode passes carry several rows', async () => {
  const prompts = ['Alpha one', 'Bravo two two', 'Charlie three three three', 'Delta four'];
  const N = process.env.BS_SANITIZED === '1' ? 12 : 48;
  const req = (p) => ({ model: 'x', messages: msgs(p), max_tokens: N, temperature: 0, ignore_eos: true, ...noThink });
  const solo = [];
  for (const p of prompts) solo.push((await client.chat.completions.create(req(p))).choices[0].message.content);
  const m0 = await (await fetch(URL_ + '/metrics')).text();
  const together = await Promise.all(prompts.map((p) => client.chat.completions.create(req(p))));
  assert.deepEqual(together.map((r) => r.choices[0].message.content), solo);
  const m1 = await (await fetch(URL_ + '/metrics')).text();
  const val = (m, k) => Number(m.match(new RegExp('^llamacpp:' + k + ' (\\S+)$', 'm'))[1]);
  const passes = val(m1, 'n_decode_total') - val(m0, 'n_decode_total');
  // 4 * N tokens; the first of each comes from its prompt pass. Fewer passes than steps means
  // some passes carried several slots' rows.
  assert.ok(passes > 0 && passes < 4 * (N - 1), `batched: ${passes} passes for ${4 * (N - 1)} decode steps`);
  assert.ok(val(m1, 'tokens_predicted_total') >= val(m0, 'tokens_predicted_total') + 4 * N);
  console.log(`# batched: ${passes} decode passes for ${4 * (N - 1)} decode steps`);
});

test('prompt cache: a second turn reuses the first and answers as if computed fresh', async () => {
  const turn1 = msgs('My name is Ada.');
  const a1 = await client.chat.completions.create({ model: 'x', messages: turn1, max_tokens: 8, temperature: 0,
    ignore_eos: true, ...noThink });
  const turn2 = [...turn1, { role: 'assistant', content: a1.choices[0].message.content },
    { role: 'user', content: 'What is my name?' }];
  const req2 = { model: 'x', messages: turn2, max_tokens: 8, temperature: 0, ignore_eos: true, ...noThink };
  const a2 = await client.chat.completions.create(req2);
  assert.ok(a2.usage.prompt_tokens_details.cached_tokens > 10, 'cached: ' + JSON.stringify(a2.usage));
  // fill every slot with unrelated conversations, then ask again: computed without the cache
  await Promise.all(['x1', 'x2', 'x3', 'x4'].map((p) => client.chat.completions.create({ model: 'x',
    messages: [{ role: 'user', content: 'Unrelated ' + p }], max_tokens: 2, temperature: 0, ...noThink })));
  const fresh = await fetch(URL_ + '/v1/chat/completions', { method: 'POST', headers: JSON_HDR,
    body: JSON.stringify({ ...req2, cache_prompt: false }) }).then((r) => r.json());
  assert.equal(fresh.choices[0].message.content, a2.choices[0].message.content);
});

test('metrics and props', async () => {
  const m = await (await fetch(URL_ + '/metrics')).text();
  for (const k of ['prompt_tokens_total', 'tokens_predicted_total', 'requests_processing', 'requests_deferred',
    'spec_decode_num_draft_tokens_total', 'spec_decode_num_accepted_tokens_total'])
    assert.match(m, new RegExp('^llamacpp:' + k + ' ', 'm'));
  const p = await getJSON('/props');
  assert.equal(p.total_slots, 4);
  assert.ok(p.default_generation_settings.n_ctx > 0);
  assert.deepEqual(await getJSON('/health'), { status: 'ok' });
});
