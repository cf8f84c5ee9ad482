"""test_server_llama_opts.py: llama-server's command line starts `bitspark serve` too
(cli_serve_compat.c):
- the options a deployment passes out of habit (--jinja, -ngl, -fa on, -cb, --metrics, -ctk,
  -b / -ub, --threads-http, -to, --mlock, --cache-reuse, -dev none, ...) are taken: the server
  answers, and each option without a meaning here says so on stderr;
- --reasoning-budget 0 and --chat-template-kwargs '{"enable_thinking": false}' render requests
  that do not say as enable_thinking false does, and a request that says wins;
  --reasoning-format none keeps the think block in content as the request field does;
- options asking for what this server does not do (--chat-template, TLS, -hf, --path) are
  refused at once with the reason;
- llama-server's environment variables (LLAMA_ARG_*, LLAMA_API_KEY) stand for their options,
  the command line winning."""
import os
import shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, TINY, Replica, check, finish, jbody, request, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
W = workdir('llama_opts')
servers = []


def serve(name, *args):
    r = Replica(W, name, ['-m', TINY, '-t', '1', '-np', '1', '--ctx', '512'] + list(args)).start()
    servers.append(r)
    return r.wait_ready()


def post(port, path, body):
    st, _, d = request(port, 'POST', path, body)
    return st, jbody(d)


CHAT = {'messages': [{'role': 'user', 'content': 'Why is the sky blue?'}]}
try:
    habit = serve('habit', '--jinja', '-ngl', '99', '-fa', 'on', '-cb', '--metrics', '-ctk', 'q8_0', '-ctv', 'q8_0',
                  '-b', '2048', '-ub', '512', '--threads-http', '2', '-to', '30', '--mlock', '--cache-reuse', '256',
                  '-dev', 'none', '--no-context-shift', '-lv', '3', '--numa', 'distribute', '-kvu')
    st, c = post(habit.port, '/completion', {'prompt': 'Hello', 'n_predict': 4, 'temperature': 0})
    log = habit.log()
    check(st == 200 and c['tokens_predicted'] == 4 and '-fa: ignored' in log and '-ctk: ignored' in log and
          '--jinja: ignored' in log, "llama-server's habitual options: taken, each without a meaning said so",
          f'{st} {log[-600:]}')

    plain = serve('plain')
    _, t_default = post(plain.port, '/apply-template', CHAT)
    _, t_off = post(plain.port, '/apply-template', dict(CHAT, chat_template_kwargs={'enable_thinking': False}))
    _, t_none = post(plain.port, '/apply-template', dict(CHAT, reasoning_effort='none'))
    _, t_high = post(plain.port, '/apply-template', dict(CHAT, reasoning_effort='high'))
    check(t_none['prompt'] == t_off['prompt'] and t_high['prompt'] == t_default['prompt'],
          'reasoning_effort none: thinking off (llama-server\'s rule), high: the default', t_none['prompt'][-40:])
    _, g_on = post(plain.port, '/v1/chat/completions', dict(CHAT, max_tokens=1))
    _, g_off = post(plain.port, '/v1/chat/completions', dict(CHAT, max_tokens=1, add_generation_prompt=False))
    _, t_nogen = post(plain.port, '/apply-template', dict(CHAT, add_generation_prompt=False))
    n_nogen = len(jbody(request(plain.port, 'POST', '/tokenize', {'content': t_nogen['prompt']})[2])['tokens'])
    check(g_off['usage']['prompt_tokens'] == n_nogen < g_on['usage']['prompt_tokens'],
          'add_generation_prompt false on chat: no assistant opener', f"{g_off['usage']} {g_on['usage']} {n_nogen}")
    budget = serve('budget', '--reasoning-budget', '0')
    _, t_budget = post(budget.port, '/apply-template', CHAT)
    _, t_asked = post(budget.port, '/apply-template', dict(CHAT, chat_template_kwargs={'enable_thinking': True}))
    kwargs = serve('kwargs', '--chat-template-kwargs', '{"enable_thinking": false}')
    _, t_kwargs = post(kwargs.port, '/apply-template', CHAT)
    check(t_default['prompt'] != t_off['prompt'] and t_budget['prompt'] == t_off['prompt'] and
          t_kwargs['prompt'] == t_off['prompt'] and t_asked['prompt'] == t_default['prompt'],
          '--reasoning-budget 0, --chat-template-kwargs: thinking off unless a request asks',
          f"{t_default['prompt'][-40:]!r} {t_budget['prompt'][-40:]!r} {t_asked['prompt'][-40:]!r}")
    st, want = post(plain.port, '/v1/chat/completions', dict(CHAT, max_tokens=12, temperature=0, reasoning_format='none'))
    none = serve('none', '--reasoning-format', 'none')
    st2, got = post(none.port, '/v1/chat/completions', dict(CHAT, max_tokens=12, temperature=0))
    check(st == st2 == 200 and got['choices'][0]['message'] == want['choices'][0]['message'],
          '--reasoning-format none: the think block stays in content', f"{got['choices'][0]} {want['choices'][0]}")
    # llama-server's "auto" values and aliases: -c 0 the model's context, -np -1 four slots, -n -1 the
    # default cap; --reasoning off; --samplers as requests' default stages
    more = serve('more', '-t', '-1', '-c', '0', '-np', '-1', '--predict', '-1', '--keep', '-1', '--embedding',
                 '--reasoning', 'off', '--samplers', 'top_k;temperature', '-cram', '0', '--no-mmproj')
    _, _, d = request(more.port, 'GET', '/props')
    mp = jbody(d)
    _, t_more = post(more.port, '/apply-template', CHAT)
    st, c = post(more.port, '/completion', {'prompt': 'Hello', 'n_predict': 2, 'temperature': 0.5})
    gs = c.get('generation_settings', {})
    seq = serve('seq', '--sampling-seq', 'kti')   # letters: top-k, temperature (i: infill, absent here)
    _, c2 = post(seq.port, '/completion', {'prompt': 'Hello', 'n_predict': 2, 'temperature': 0})
    tmp = serve('tmp', '--samplers', 'temp')      # a name made of letters: temperature only
    _, c3 = post(tmp.port, '/completion', {'prompt': 'Hello', 'n_predict': 2, 'temperature': 0})
    g2, g3 = c2.get('generation_settings', {}), c3.get('generation_settings', {})
    check(g2.get('temperature') == 0 and g2.get('top_k') == 40 and g2.get('top_p') == 1 and g3.get('top_k') == 0 and
          g3.get('top_p') == 1 and g3.get('temperature') == 0, '--sampling-seq kti and --samplers temp: letters and names apart',
          f'{g2} {g3}')
    check(mp['total_slots'] == 4 and mp['default_generation_settings']['n_ctx'] == 8192 and t_more['prompt'] == t_off['prompt']
          and st == 200 and gs.get('top_p') == 1 and gs.get('min_p') == 0 and gs.get('top_k') == 40,
          "-c 0, -np -1, --reasoning off, --samplers: llama-server's meanings",
          f"{mp['total_slots']} {mp['default_generation_settings']['n_ctx']} {gs.get('top_p')} {gs.get('min_p')}")
    # embd_normalize: -1 the mean, 0 max-abs to 32760, 1 taxicab, 2 L2 (the default), 3 the 3-norm
    vec = {}
    for n in (-1, 0, 1, 2, 3, None):
        _, e = post(more.port, '/embedding', {'content': 'Hello world'} if n is None else {'content': 'Hello world', 'embd_normalize': n})
        vec[n] = e[0]['embedding'][0]
    norms = {n: (sum(x * x for x in v) ** .5, sum(abs(x) for x in v), max(abs(x) for x in v), sum(abs(x) ** 3 for x in v) ** (1 / 3))
             for n, v in vec.items()}
    check(abs(norms[2][0] - 1) < 1e-4 and abs(norms[1][1] - 1) < 1e-4 and abs(norms[0][2] - 32760) < 0.5 and
          abs(norms[3][3] - 1) < 1e-4 and norms[-1][0] > 2 and vec[None] == vec[2],
          "embd_normalize -1, 0, 1, 2, 3: llama.cpp's normalizations (2 the default)", str({n: v[:3] for n, v in norms.items()}))
    # parallel_tool_calls false: the first of the calls only (a grammar makes the model write two)
    call = '<tool_call>\\n{\\"name\\": \\"f\\", \\"arguments\\": {}}\\n</tool_call>'
    tools = [{'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object', 'properties': {}}}}]
    calls = {}
    for par in (True, False):
        st, c = post(plain.port, '/v1/chat/completions', dict(CHAT, tools=tools, grammar=f'root ::= "{call}\\n{call}"',
                                                             max_tokens=300, temperature=0, parallel_tool_calls=par))
        calls[par] = len(c['choices'][0]['message'].get('tool_calls') or []) if st == 200 else -1
    check(calls == {True: 2, False: 1}, 'parallel_tool_calls false: one call', str(calls))
    # speculative.n_max 0 (llama-server's name): no drafting for that request
    draft = serve('draft', '-md', os.path.join(os.path.dirname(TINY), 'bonsai-tiny-dspark.gguf'), '--draft-max', '4')
    q = {'prompt': 'Once upon a time', 'n_predict': 16, 'temperature': 0, 'ignore_eos': True}
    _, d1 = post(draft.port, '/completion', q)
    _, d0 = post(draft.port, '/completion', dict(q, **{'speculative.n_max': 0}))
    check(d1['timings']['draft_n'] > 0 and d0['timings']['draft_n'] == 0 and d0['content'] == d1['content'],
          'speculative.n_max 0: the same text, nothing drafted', f"{d1['timings']['draft_n']} {d0['timings']['draft_n']}")
    # --lora A,B:SCALE: llama-server's list form
    lf = os.path.join(os.path.dirname(TINY), 'bonsai-tiny-antidoom-lora.gguf')
    lo = serve('lora', '--lora', f'{lf},{lf}:0.5')
    _, _, d = request(lo.port, 'GET', '/lora-adapters')
    ad = jbody(d)
    check(isinstance(ad, list) and [a['scale'] for a in ad] == [1.0, 0.5], '--lora A,B:0.5: two adapters at their scales', str(ad))
    # --lora-scaled A:S,B:S (llama-server's newer one-value form) beside the two-value FILE S form
    ls = serve('lscaled', '--lora-scaled', f'{lf}:0.25,{lf}:0.75', '--lora-scaled', lf, '0.5')
    _, _, d = request(ls.port, 'GET', '/lora-adapters')
    ad = jbody(d)
    check(isinstance(ad, list) and [a['scale'] for a in ad] == [0.25, 0.75, 0.5],
          '--lora-scaled A:0.25,B:0.75 and --lora-scaled C 0.5: three adapters at their scales', str(ad))
    # a file whose name ends in :NUMBER, given the two-value way, is that file at that scale
    odd = os.path.join(W, 'ad:1')
    shutil.copyfile(lf, odd)
    lo2 = serve('lodd', '--lora-scaled', odd, '0.5')
    _, _, d = request(lo2.port, 'GET', '/lora-adapters')
    ad = jbody(d)
    check(isinstance(ad, list) and len(ad) == 1 and ad[0]['scale'] == 0.5 and ad[0]['path'].endswith('ad:1'),
          '--lora-scaled DIR/ad:1 0.5: the file ad:1 at 0.5', str(ad))
    # --samplers naming no stage is refused at the start (a misspelling would turn every stage off)
    bad = subprocess.run([B, 'serve', '-m', TINY, '--port', '0', '--samplers', 'foo'], capture_output=True, text=True, timeout=30)
    check(bad.returncode != 0 and 'no stage' in bad.stderr, '--samplers foo: refused', bad.stderr[-200:])
    # --log-file: what the server says goes there
    logf = os.path.join(W, 'file.log')
    lp = subprocess.Popen([B, 'serve', '-m', TINY, '--port', '0', '-t', '1', '--ctx', '256', '--log-file', logf],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 60 and not (os.path.exists(logf) and 'listening on' in open(logf).read()):
        time.sleep(0.05)
    said = open(logf).read() if os.path.exists(logf) else ''
    lp.terminate()
    lp.wait(30)
    check('listening on' in said, '--log-file: the log goes to the file', said[-200:])
    # llama-server's environment variables stand for its options; the command line wins
    env = {'LLAMA_ARG_MODEL': TINY, 'LLAMA_API_KEY': 'env-key', 'LLAMA_ARG_N_PARALLEL': '2', 'LLAMA_ARG_JINJA': 'true',
           'LLAMA_ARG_CTX_SIZE': '256', 'LLAMA_ARG_EMBEDDINGS': 'off', 'LLAMA_ARG_ALIAS': 'env-name', 'LLAMA_ARG_MMAP': 'false'}
    os.environ.update(env)
    try:
        envd = Replica(W, 'env', ['-t', '1', '-c', '512', '-a', 'cli-name']).start()
        servers.append(envd)
        envd.wait_ready()
    finally:
        for k in env:
            del os.environ[k]
    st, _, _ = request(envd.port, 'GET', '/props')
    st2, _, d = request(envd.port, 'GET', '/props', headers={'Authorization': 'Bearer env-key'})
    props = jbody(d)
    check(st == 401 and st2 == 200 and props['total_slots'] == 2 and props['default_generation_settings']['n_ctx'] == 512
          and props['model_alias'] == 'cli-name',
          'LLAMA_ARG_MODEL, LLAMA_API_KEY, LLAMA_ARG_N_PARALLEL taken; -c and -a over LLAMA_ARG_CTX_SIZE and _ALIAS',
          f"{st} {st2} {props.get('total_slots')} {props.get('default_generation_settings', {}).get('n_ctx')}")
finally:
    for r in servers:
        r.stop()
p = subprocess.run([B, 'serve', '-m', TINY], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, LLAMA_ARG_EMBEDDINGS='maybe'))
check(p.returncode != 0 and 'LLAMA_ARG_EMBEDDINGS' in p.stderr, 'a flag variable that is no truth value: refused',
      p.stderr.strip()[-200:])
p = subprocess.run([B, 'serve', '-m', TINY], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, LLAMA_ARG_HF_REPO='org/model'))
check(p.returncode != 0 and 'from the environment' in p.stderr and 'no downloads' in p.stderr,
      'an environment variable for a refused option: refused, saying where it came from', p.stderr.strip()[-200:])

for args, why in ((['--chat-template', 'chatml'], 'rendered natively'), (['--ssl-key-file', 'k.pem'], 'TLS'),
                  (['-hf', 'org/model'], 'no downloads'), (['--path', '/tmp'], 'no static files'),
                  (['-ngl', 'many'], 'layer count'), (['--reasoning-budget', '-2'], 'out of range'),
                  (['--chat-template-kwargs', '[1]'], 'JSON object'), (['-fa', '--embeddings'], 'expected on|off|auto'),
                  (['--log-file', '/nonexistent/dir/x.log'], 'cannot open')):
    p = subprocess.run([B, 'serve', '-m', TINY, '--port', '0'] + args, capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and why in p.stderr, f'{args[0]} {args[1]}: refused with the reason', p.stderr.strip()[-200:])
finish()
