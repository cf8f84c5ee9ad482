"""test_server_lora.py: llama-server's LoRA switching on `bitspark serve` (server_lora.c), with
the tiny model's adapter (models/bonsai-tiny-antidoom-lora.gguf):
- GET /lora-adapters lists id, path, scale; --lora-init-without-apply starts at scale 0;
  POST /lora-adapters [{"id", "scale"}] sets the scales of requests without "lora";
- a request's "lora" overrides them: scale 0 gives exactly the base model's answer (a server
  without --lora: same tokens, same logprobs), scale 1 another one, the same as a server whose
  global scale is 1;
- requests with different adapters never share a pass or a cached prefix they must not: run at
  the same time, each gets the answer it gets alone; the same prompt on the same slot with
  another scale is not served from the first one's cache;
- bad "lora" fields and bodies are 400s."""
import os, sys, threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, SRC, TINY, Replica, check, finish, jbody, request, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
ADAPTER = os.path.join(SRC, 'models', 'bonsai-tiny-antidoom-lora.gguf')
W = workdir('lora')
PROMPT = 'Hello there, my name is'


def post(port, path, body):
    st, _, d = request(port, 'POST', path, body)
    return st, jbody(d)


def answer(port, lora=None, prompt=PROMPT, slot=None, n=8):
    """(text, logprobs) of a greedy completion; None on an error."""
    body = {'prompt': prompt, 'max_tokens': n, 'temperature': 0, 'logprobs': 3}
    if lora is not None:
        body['lora'] = lora
    if slot is not None:
        body['id_slot'] = slot
    st, j = post(port, '/v1/completions', body)
    if st != 200:
        return None
    c = j['choices'][0]
    return c['text'], c['logprobs']


base = Replica(W, 'base', ['-m', TINY, '-t', '1', '--ctx', '256']).start().wait_ready()
try:
    R0 = answer(base.port)
    R0b = answer(base.port, prompt='Once upon a time')
    R0x = answer(base.port, prompt=PROMPT + ' Alice and I like')
finally:
    base.stop()
check(R0 is not None, 'the base model answers')

srv = Replica(W, 'lora', ['-m', TINY, '-t', '2', '--ctx', '256', '-np', '2', '--lora', ADAPTER,
                          '--lora-init-without-apply', '--embeddings']).start().wait_ready()
P = srv.port
try:
    st, _, d = request(P, 'GET', '/lora-adapters')
    j = jbody(d)
    check(st == 200 and isinstance(j, list) and len(j) == 1 and j[0]['id'] == 0 and j[0]['scale'] == 0 and
          j[0]['path'].endswith('bonsai-tiny-antidoom-lora.gguf'), '--lora-init-without-apply: listed at scale 0', str(j))
    check(answer(P) == R0, 'scale 0 (not applied): the base model\'s answer, logprobs included')
    R1 = answer(P, [{'id': 0, 'scale': 1}])
    check(R1 is not None and R1 != R0, 'a request\'s lora scale 1 changes the answer', str(R1))
    check(answer(P, [{'id': 0, 'scale': 0}]) == R0, 'a request\'s lora scale 0: the base model\'s answer')
    check(answer(P, []) == R0, 'lora []: every adapter at 0')
    Rh = answer(P, [{'id': 0, 'scale': 0.5}])
    check(Rh is not None and Rh != R1 and Rh != R0, 'scale 0.5: yet another answer')

    E0 = post(P, '/v1/embeddings', {'input': PROMPT})[1]['data'][0]['embedding']
    st, j = post(P, '/lora-adapters', [{'id': 0, 'scale': 1}])
    check(st == 200 and j == {'success': True}, 'POST /lora-adapters', f'{st} {j}')
    # embeddings run with the global scales, and are not starved by generations with others
    long_gen = threading.Thread(target=lambda: post(P, '/v1/completions', {
        'prompt': 'x', 'max_tokens': 400, 'ignore_eos': True, 'lora': [{'id': 0, 'scale': 0}]}))
    long_gen.start()
    st, j = post(P, '/v1/embeddings', {'input': PROMPT})
    E1 = j['data'][0]['embedding'] if st == 200 else None
    long_gen.join(120)
    check(E1 is not None and E1 != E0, 'embeddings use the global scale, beside a generation with another', f'{st}')
    j = jbody(request(P, 'GET', '/lora-adapters')[2])
    check(j[0]['scale'] == 1, 'the global scale is 1 now', str(j))
    check(answer(P) == R1, 'a request without lora runs with the global scale')
    check(answer(P, [{'id': 0, 'scale': 0}]) == R0, 'its own lora overrides the global one')
    props = jbody(request(P, 'GET', '/props')[2])
    check(props['default_generation_settings']['params']['lora'] == [{'id': 0, 'scale': 1.0}],
          '/props lists the global scales', str(props['default_generation_settings']['params'].get('lora')))

    # the cached prefix: the same prompt on the same slot, adapters switched between
    a = answer(P, [{'id': 0, 'scale': 1}], slot=0)
    b = answer(P, [{'id': 0, 'scale': 0}], slot=0)
    c = answer(P, [{'id': 0, 'scale': 1}], slot=0)
    check(a == R1 and b == R0 and c == R1, 'a slot\'s cache is not reused across adapters', f'{b} vs {R0}')
    answer(P, [{'id': 0, 'scale': 1}], slot=1)
    x = answer(P, [{'id': 0, 'scale': 0}], prompt=PROMPT + ' Alice and I like', slot=1)
    check(x == R0x, 'a longer prompt on a prefix cached with other adapters: the base model\'s answer', f'{x} vs {R0x}')

    # concurrent requests with different adapters: each the answer it gets alone
    alone = {0: R0, 1: R1, 2: answer(P, [{'id': 0, 'scale': 0}], prompt='Once upon a time'),
             3: answer(P, [{'id': 0, 'scale': 1}], prompt='Once upon a time')}
    check(alone[2] == R0b, 'the second prompt at scale 0: the base model\'s answer')
    specs = {0: ([{'id': 0, 'scale': 0}], PROMPT), 1: ([{'id': 0, 'scale': 1}], PROMPT),
             2: ([{'id': 0, 'scale': 0}], 'Once upon a time'), 3: ([{'id': 0, 'scale': 1}], 'Once upon a time')}
    got, threads = {}, []
    for rnd in range(3):
        for k, (lora, prompt) in specs.items():
            t = threading.Thread(target=lambda k=k, lora=lora, prompt=prompt, rnd=rnd:
                                 got.__setitem__((rnd, k), answer(P, lora, prompt, n=16)))
            threads.append(t)
    alone16 = {k: answer(P, lora, prompt, n=16) for k, (lora, prompt) in specs.items()}
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wrong = [(r, k) for (r, k), v in got.items() if v != alone16[k]]
    check(len(got) == 12 and not wrong, 'concurrent requests with different adapters get their own answers',
          f'{len(got)} answers, wrong: {wrong}')

    # bad input
    for bad_lora, what in [([{'id': 1, 'scale': 1}], 'an id past the adapters'), ([{'id': 0}], 'no scale'),
                           ([{'scale': 1}], 'no id'), ({'id': 0, 'scale': 1}, 'not a list'),
                           ([{'id': 0, 'scale': 'x'}], 'a scale that is no number'),
                           ([{'id': 0, 'scale': 1e9}], 'a huge scale'), ([7], 'an entry that is no object')]:
        st, j = post(P, '/v1/completions', {'prompt': 'x', 'max_tokens': 1, 'lora': bad_lora})
        check(st == 400 and 'lora' in j['error']['message'], f'lora with {what}: 400', f'{st} {j}')
        st, j = post(P, '/lora-adapters', bad_lora)
        check(st == 400, f'POST /lora-adapters with {what}: 400', f'{st} {j}')
    st, _, d = request(P, 'DELETE', '/lora-adapters')
    check(st == 405, 'DELETE /lora-adapters: 405', str(st))
finally:
    srv.stop()

# no adapters: an empty list, and a request naming one is a 400
none = Replica(W, 'none', ['-m', TINY, '-t', '1', '--ctx', '256']).start().wait_ready()
try:
    check(jbody(request(none.port, 'GET', '/lora-adapters')[2]) == [], 'no --lora: an empty list')
    st, j = post(none.port, '/v1/completions', {'prompt': 'x', 'max_tokens': 1, 'lora': [{'id': 0, 'scale': 1}]})
    check(st == 400, 'no --lora: a request naming an adapter is a 400', f'{st}')
finally:
    none.stop()
finish()
