// load.mjs: bounded loopback load on bitspark serve (run by tests/test_server_load.sh).
//   node load.mjs URL N CONCURRENCY MAX_TOKENS  -> N requests, half streaming, all checked
//   node load.mjs URL kill CLIENTS             -> streams killed mid-way, then slots must be idle
// Prints one JSON line with the results; exits 1 on any wrong answer.
const [url, mode, a, b] = process.argv.slice(2);
const post = (path, body, signal) => fetch(url + path, { method: 'POST', body: JSON.stringify(body), signal,
  headers: { 'Content-Type': 'application/json' } });
const noThink = { chat_template_kwargs: { enable_thinking: false } };
const fail = (msg) => { console.log(JSON.stringify({ ok: false, error: msg })); process.exit(1); };

function parseSSE(text) {
  const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  if (events.at(-1) !== '[DONE]') throw new Error('no [DONE]');
  return events.slice(0, -1).map((e) => JSON.parse(e));
}

async function one(i, maxTokens) {
  const stream = i % 2 === 1;
  const body = { messages: [{ role: 'user', content: `Request number ${i} says hello` }], max_tokens: maxTokens,
    temperature: i % 3 === 0 ? 0 : 0.7, seed: i, ignore_eos: true, stream, ...noThink,
    ...(stream ? { stream_options: { include_usage: true } } : {}) };
  const r = await post('/v1/chat/completions', body);
  if (r.status !== 200) throw new Error(`request ${i}: status ${r.status}: ${await r.text()}`);
  if (!stream) {
    const j = await r.json();
    if (j.usage.completion_tokens !== maxTokens || j.choices[0].finish_reason !== 'length')
      throw new Error(`request ${i}: ${JSON.stringify(j).slice(0, 300)}`);
    return maxTokens;
  }
  const ev = parseSSE(await r.text());
  const usage = ev.at(-1).usage;
  if (!usage || usage.completion_tokens !== maxTokens || ev.at(-2).choices[0].finish_reason !== 'length')
    throw new Error(`stream ${i}: ${JSON.stringify(ev.slice(-2)).slice(0, 300)}`);
  return maxTokens;
}

async function load(n, conc, maxTokens) {
  let next = 0, tokens = 0;
  const t0 = performance.now();
  const worker = async () => { while (next < n) { const k = await one(next++, maxTokens); tokens += k; } };
  await Promise.all(Array.from({ length: conc }, worker));
  const s = (performance.now() - t0) / 1e3;
  return { ok: true, requests: n, tokens, seconds: +s.toFixed(2), tokens_per_second: +(tokens / s).toFixed(1) };
}

async function kill(clients) {
  const controllers = [];
  const started = [];
  for (let i = 0; i < clients; i++) {
    const ac = new AbortController();
    controllers.push(ac);
    started.push((async () => {
      const r = await post('/v1/chat/completions', { messages: [{ role: 'user', content: `endless ${i}` }],
        max_tokens: 100000, ignore_eos: true, stream: true, ...noThink }, ac.signal);
      const rd = r.body.getReader();
      let got = 0;
      while (got < 3) { const { value, done } = await rd.read(); if (done) break; got += (new TextDecoder().decode(value).match(/^data: /gm) || []).length; }
      return got;
    })().catch((e) => (e.name === 'AbortError' ? -1 : Promise.reject(e))));
  }
  // wait until every stream (or as many as there are slots, the rest queue) has produced data,
  // then kill all clients at once
  await Promise.race([Promise.all(started.slice(0, +b || clients)), new Promise((r) => setTimeout(r, 30000))]);
  controllers.forEach((ac) => ac.abort());
  await Promise.allSettled(started);
  for (let k = 0; k < 200; k++) {
    const slots = await (await fetch(url + '/slots')).json();
    const m = await (await fetch(url + '/metrics')).text();
    if (slots.every((s) => !s.is_processing) && /^llamacpp:requests_deferred 0$/m.test(m))
      return { ok: true, clients, ms_to_idle: k * 25 };
    await new Promise((r) => setTimeout(r, 25));
  }
  fail('slots still busy 5 s after the clients died');
}

try {
  const res = mode === 'kill' ? await kill(+a) : await load(+mode, +a, +b);
  console.log(JSON.stringify(res));
  process.exit(0);   // no pending timers keep us alive
} catch (e) { fail(String(e.stack || e)); }
