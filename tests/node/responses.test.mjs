// responses.test.mjs: bitspark serve's OpenAI Responses API (/v1/responses) driven by the
// official `openai` npm package's client.responses, run by tests/test_server_anthropic.sh with
// BS_URL and BS_NODE_DIR. Answers are checked against /v1/chat/completions on the same
// conversation at temperature 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { slotsIdle } from './slots_idle.mjs';

const require = createRequire(process.env.BS_NODE_DIR + '/');
const OpenAI = require('openai').default ?? require('openai');
const URL_ = process.env.BS_URL;
const client = new OpenAI({ baseURL: URL_ + '/v1', apiKey: 'sk-test', maxRetries: 0, timeout: 60_000 });
const noThink = { reasoning: { effort: 'none' } };
const JSON_HDR = { 'Content-Type': 'application/json' };

async function chat(body) {
  const r = await fetch(URL_ + '/v1/chat/completions', { method: 'POST', headers: JSON_HDR,
    body: JSON.stringify({ chat_template_kwargs: { enable_thinking: false }, ...body }) });
  assert.equal(r.status, 200);
  return r.json();
}

const tool = { type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object',
  properties: { city: { type: 'string', maxLength: 8 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] } };
const toolFn = { type: 'function', function: { name: tool.name, description: tool.description, parameters: tool.parameters } };

test('responses.create: a response with a message item, usage, the same text as chat/completions', async () => {
  const r = await client.responses.create({ model: 'm', input: 'Hello there', max_output_tokens: 12, temperature: 0,
    ignore_eos: true, ...noThink });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output.length, 1);
  const msg = r.output[0];
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'output_text');
  assert.equal(r.output_text, msg.content[0].text);
  assert.equal(r.usage.output_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 12);
  const c = await chat({ messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 12, temperature: 0, ignore_eos: true });
  assert.equal(r.output_text, c.choices[0].message.content);
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
});

test('instructions and input items: rendered as a system message and the conversation', async () => {
  const input = [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
    { role: 'assistant', content: [{ type: 'output_text', text: 'Hello!' }] },
    { type: 'message', role: 'user', content: 'What now?' }];
  const r = await client.responses.create({ model: 'm', instructions: 'Answer in French.', input, max_output_tokens: 8,
    temperature: 0, ignore_eos: true, ...noThink });
  const c = await chat({ messages: [{ role: 'system', content: 'Answer in French.' }, { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello!' }, { role: 'user', content: 'What now?' }], max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.equal(r.output_text, c.choices[0].message.content);
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  const plain = await client.responses.create({ model: 'm', input, max_output_tokens: 1, ...noThink });
  assert.ok(plain.usage.input_tokens < r.usage.input_tokens);
});

test('streaming: response.* events in order with sequence numbers, the same text as without', async () => {
  const req = { model: 'm', input: 'Tell me a story', max_output_tokens: 10, temperature: 0, ignore_eos: true, ...noThink };
  const whole = await client.responses.create(req);
  const events = [];
  for await (const ev of await client.responses.create({ ...req, stream: true })) events.push(ev);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  const types = events.map((e) => e.type);
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
    'response.content_part.added']);
  assert.equal(events[0].response.status, 'in_progress');
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.incomplete']);
  const deltas = events.filter((e) => e.type === 'response.output_text.delta');
  assert.ok(deltas.length >= 1);
  assert.ok(types.slice(4, -4).every((t) => t === 'response.output_text.delta'), types.join(' '));
  assert.equal(deltas.map((e) => e.delta).join(''), whole.output_text);
  assert.equal(events.at(-4).text, whole.output_text);
  const last = events.at(-1).response;
  assert.equal(last.status, 'incomplete');
  assert.equal(last.usage.output_tokens, 10);
  assert.deepEqual(last.output[0].content, whole.output[0].content);
  // the SDK's stream helper accumulates the same text
  const fin = await client.responses.stream(req).finalResponse();
  assert.equal(fin.output_text, whole.output_text);
});

test('reasoning: the think block as a reasoning item', async () => {
  const r = await client.responses.create({ model: 'm', input: 'Think first', max_output_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(r.output[0].type, 'reasoning');
  const c = await chat({ messages: [{ role: 'user', content: 'Think first' }], max_tokens: 6, temperature: 0, ignore_eos: true,
    chat_template_kwargs: { enable_thinking: true } });
  assert.equal(r.output[0].content[0].text, c.choices[0].message.reasoning_content);
});

test('function tools: a forced call as a function_call item; its output goes back and is answered', async () => {
  const r = await client.responses.create({ model: 'm', input: 'Weather in Paris?', tools: [tool],
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 96, temperature: 0 });
  assert.equal(r.status, 'completed');
  assert.equal(r.parallel_tool_calls, true);
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  const args = JSON.parse(call.arguments);
  assert.ok(typeof args.city === 'string' && ['c', 'f'].includes(args.unit), call.arguments);
  // parallel_tool_calls false: taken and said (one function_call item at most)
  const one = await client.responses.create({ model: 'm', input: 'Weather in Paris?', tools: [tool],
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 96, temperature: 0, parallel_tool_calls: false });
  assert.equal(one.parallel_tool_calls, false);
  assert.equal(one.output.filter((o) => o.type === 'function_call').length, 1);
  // streamed: the arguments as function_call_arguments.delta / done
  const events = [];
  for await (const ev of await client.responses.create({ model: 'm', input: 'Weather in Paris?', tools: [tool],
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 96, temperature: 0, stream: true })) events.push(ev);
  const done = events.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(done.arguments, call.arguments);
  assert.equal(events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join(''), call.arguments);
  assert.equal(events.at(-1).type, 'response.completed');
  // the round trip
  const input = [{ role: 'user', content: 'Weather in Paris?' }, call,
    { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }];
  const a = await client.responses.create({ model: 'm', input, tools: [tool], max_output_tokens: 6, temperature: 0, ...noThink });
  assert.equal(a.object, 'response');
  const c = await chat({ messages: [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: '',
    tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
  { role: 'tool', tool_call_id: call.call_id, content: '{"temp": 21}' }], tools: [toolFn], max_tokens: 6, temperature: 0 });
  assert.equal(a.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(a.output_text, c.choices[0].message.content ?? '');
});

test('text.format json_schema constrains the output', async () => {
  const schema = { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] } }, required: ['city'] };
  const r = await client.responses.create({ model: 'm', input: 'JSON please', max_output_tokens: 48, temperature: 0,
    text: { format: { type: 'json_schema', name: 'answer', schema } } });
  assert.ok(['Paris', 'Rome'].includes(JSON.parse(r.output_text).city), r.output_text);
});

test('errors: 400 with the OpenAI shape', async () => {
  const is400 = (re) => (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && re.test(e.message);
  await assert.rejects(client.responses.create({ model: 'm', input: 'x', previous_response_id: 'resp_1' }), is400(/previous_response_id/));
  await assert.rejects(client.responses.create({ model: 'm', input: [] }), is400(/input/));
  await assert.rejects(client.responses.create({ model: 'm', input: 42 }), is400(/input/));
  await assert.rejects(client.responses.create({ model: 'm', input: [{ type: 'file_search_call' }] }), is400(/not supported/));
  await assert.rejects(client.responses.create({ model: 'm', input: [{ role: 'tool', content: 'x' }] }), is400(/role/));
  await assert.rejects(client.responses.create({ model: 'm', input: [{ type: 'message', content: 'x' }] }), is400(/role/));
  await assert.rejects(client.responses.create({ model: 'm', input: [null, 3] }), is400(/object/));
  await assert.rejects(client.responses.create({ model: 'm', input: 'x', tools: [{ type: 'web_search' }] }), is400(/function/));
  await assert.rejects(client.responses.create({ model: 'm', input: 'x', max_output_tokens: 0 }), is400(/max_output_tokens/));
  await assert.rejects(client.responses.create({ model: 'm', input: 'x', temperature: -1 }), is400(/temperature/));
  await assert.rejects(client.responses.create({ model: 'm', input: [{ type: 'function_call', name: 'f' }] }), is400(/arguments/));
  await assert.rejects(client.responses.create({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_file' }] }] }),
    is400(/input_file/));
  assert.equal((await fetch(URL_ + '/health')).status, 200);
});

test('a client abort mid-stream frees the slot', async () => {
  const stream = await client.responses.create({ model: 'm', input: 'Go on forever', max_output_tokens: 100000, temperature: 0,
    ignore_eos: true, stream: true, ...noThink });
  let n = 0;
  try {
    for await (const ev of stream) { if (ev.type === 'response.output_text.delta' && ++n === 3) break; }
  } catch (e) { /* breaking aborts the request */ }
  assert.equal(n, 3);
  assert.ok(await slotsIdle(URL_), 'all slots idle after the abort');
});
