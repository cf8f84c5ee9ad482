"""test_server_props.py: llama-server's /props, /models and serve options on `bitspark serve`
(server_props.c, server_media.c, server_sched.c):
- /props: default_generation_settings.params (seed, temperature, top_k, top_p, min_p,
  n_predict, samplers, ...) from serve's options, is_sleeping;
- /models and /v1/models: aliases (--alias, repeated and comma-separated; the first is the id),
  tags (--tags), capabilities (completion, chat, embeddings with --embeddings, vision with
  --mmproj, infill when the vocabulary has FIM tokens); /models and /v1/models are public under
  --api-key like /health (llama-server's list);
- --n-predict caps what a request may generate and is the length of requests that give none;
- --sleep-idle-seconds: after the idle time /props says is_sleeping, the next request answers
  as before (the same greedy tokens and logprobs) and wakes the server; the weights' memory goes
  too (RSS drops by about tiny-f32's size, mapped and --no-mmap), and a model file changed while
  asleep is refused rather than read;
- --media-path: file:// image URLs read below the directory (the same answer as the image sent
  as a data: URL); "..", absolute paths, a symbolic link out of it, a missing file, and any
  file:// URL without --media-path are 400s; remote URLs stay refused."""
import base64, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, SRC, TINY, Replica, check, finish, jbody, request, sanitized, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
FX = os.environ.get('BS_FIXTURES') or os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                                                    'fixtures')
W = workdir('props')


def post(port, path, body):
    st, _, d = request(port, 'POST', path, body)
    return st, jbody(d)


def get(port, path, headers=None):
    st, _, d = request(port, 'GET', path, headers=headers)
    return st, jbody(d)


def greedy(port, n=8):
    st, j = post(port, '/v1/completions', {'prompt': 'Hello there, my name is', 'max_tokens': n, 'temperature': 0,
                                           'logprobs': 2})
    return (j['choices'][0]['text'], j['choices'][0]['logprobs'], j['usage']['completion_tokens']) if st == 200 else None


# ---- /props, /models, --alias, --tags, --n-predict, --api-key ---------------------------------
srv = Replica(W, 'props', ['-m', TINY, '-t', '1', '--ctx', '256', '--alias', 'bonsai,bonsai-tiny', '-a', 'tiny',
                           '--tags', 'test,small', '--temp', '0.5', '--top-k', '17', '--seed', '42', '-n', '20',
                           '--embeddings', '--api-key', 'k3y']).start().wait_ready()
P = srv.port
AUTH = {'Authorization': 'Bearer k3y'}
try:
    st, j = get(P, '/props', AUTH)
    prm = (j or {}).get('default_generation_settings', {}).get('params', {})
    check(st == 200 and prm.get('temperature') == 0.5 and prm.get('top_k') == 17 and prm.get('seed') == 42 and
          prm.get('n_predict') == 20 and isinstance(prm.get('samplers'), list) and 'top_k' in prm['samplers'] and
          'top_p' in prm and 'min_p' in prm, '/props default_generation_settings.params', str(prm))
    check(j.get('is_sleeping') is False, '/props is_sleeping false', str(j.get('is_sleeping')))
    check(j.get('eos_token') == '<|im_end|>' and isinstance(j.get('bos_token'), str) and j.get('media_marker') == '<__media__>'
          and j.get('endpoint_slots') is True and j.get('endpoint_metrics') is True and j.get('webui') is True and
          prm.get('samplers') == ['penalties', 'dry', 'top_n_sigma', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'],
          "/props: llama-server's bos/eos tokens, media_marker, endpoint flags, the whole sampler chain",
          str({k: j.get(k) for k in ('bos_token', 'eos_token', 'media_marker', 'endpoint_slots', 'webui')}) + str(prm.get('samplers')))
    check(j.get('total_slots') == 1 and j.get('model_alias') == 'bonsai', '/props total_slots, model_alias')

    st, j = get(P, '/v1/models', AUTH)
    m = (j or {}).get('data', [{}])[0]
    check(st == 200 and m.get('id') == 'bonsai' and m.get('aliases') == ['bonsai', 'bonsai-tiny', 'tiny'],
          '/v1/models: the first alias is the id, every alias listed', str(m))
    check(m.get('tags') == ['test', 'small'], '/v1/models tags', str(m.get('tags')))
    caps = m.get('capabilities', [])
    check('completion' in caps and 'chat' in caps and 'embeddings' in caps and 'vision' not in caps,
          '/v1/models capabilities (completion, chat, embeddings; no vision without --mmproj)', str(caps))
    st, j2 = get(P, '/models')
    check(st == 200 and j2.get('data', [{}])[0].get('id') == 'bonsai', '/models is public under --api-key', f'{st}')
    check(get(P, '/v1/models')[0] == 200 and get(P, '/props')[0] == 401, '/v1/models is public, /props needs the key')
    check(get(P, '/props')[0] == 401, '/props still needs the key')
    meta = m.get('meta', {})
    check(m.get('owned_by') == 'llamacpp' and meta.get('n_params', 0) > 0 and meta.get('size', 0) > 0 and
          meta.get('vocab_type') == 2, "/v1/models: llama-server's owned_by and meta (n_params, size, vocab_type)", str(m))
    st, tags = get(P, '/api/tags')
    check(st == 200 and tags.get('models', [{}])[0].get('name') == 'bonsai', "/api/tags (Ollama's list): public", f'{st}')
    st, _, d = request(P, 'POST', '/api/show', {'model': 'bonsai'}, headers=AUTH)
    show = jbody(d)
    check(st == 200 and '<|im_start|>' in show.get('template', '') and
          show.get('model_info', {}).get('llama.context_length', 0) > 0 and 'completion' in show.get('capabilities', []),
          "/api/show (Ollama's): the template, the context, capabilities", f'{st} {str(show)[:200]}')
    st, _, d = request(P, 'POST', '/responses', {'input': 'Hi', 'max_output_tokens': 3}, headers=AUTH)
    check(st == 200 and jbody(d).get('object') == 'response', '/responses: the Responses API without /v1', f'{st}')

    st, _, d = request(P, 'POST', '/v1/completions', {'prompt': 'Hello', 'max_tokens': 100, 'ignore_eos': True,
                                                       'temperature': 0}, headers=AUTH)
    j = jbody(d)
    check(st == 200 and j['usage']['completion_tokens'] == 20 and j['choices'][0]['finish_reason'] == 'length',
          '--n-predict 20 caps max_tokens 100', f'{st} {j and j.get("usage")}')
    # and is the default of requests that give no length (llama-server's params_from_json_cmpl)
    st, _, d = request(P, 'POST', '/v1/completions', {'prompt': 'Hello', 'ignore_eos': True, 'temperature': 0},
                       headers=AUTH)
    j = jbody(d)
    check(st == 200 and j['usage']['completion_tokens'] == 20,
          '--n-predict 20: /v1/completions without max_tokens generates 20 (not OpenAI\'s 16)', f'{st} {j and j.get("usage")}')
    st, _, d = request(P, 'POST', '/completion', {'prompt': 'Hello', 'ignore_eos': True, 'temperature': 0,
                                                  'max_tokens': 3}, headers=AUTH)
    j = jbody(d)
    check(st == 200 and j['tokens_predicted'] == 3, 'a smaller max_tokens is kept', f'{st} {j and j.get("tokens_predicted")}')
    st, _, d = request(P, 'POST', '/completion', {'prompt': 'Hello', 'ignore_eos': True, 'temperature': 0},
                       headers=AUTH)
    j = jbody(d)
    check(st == 200 and j['tokens_predicted'] == 20 and j['generation_settings']['n_predict'] == 20,
          '/completion without n_predict: generation_settings.n_predict is the server\'s 20',
          f'{st} {j and (j.get("tokens_predicted"), j.get("generation_settings", {}).get("n_predict"))}')
finally:
    srv.stop()

# ---- --sleep-idle-seconds ---------------------------------------------------------------------
ref_srv = Replica(W, 'ref', ['-m', TINY, '-t', '1', '--ctx', '256']).start().wait_ready()
try:
    REF = greedy(ref_srv.port)
finally:
    ref_srv.stop()


def rss_kb(pid):
    with open(f'/proc/{pid}/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith('VmRSS:'))


sl = Replica(W, 'sleep', ['-m', TINY, '-t', '2', '--ctx', '4096', '-np', '4', '--sleep-idle-seconds', '1']).start().wait_ready()
try:
    long_prompt = ' '.join(f'w{i}' for i in range(1000))   # ~4000 tokens in each slot's cache
    for k in range(4):
        post(sl.port, '/v1/completions', {'prompt': f'{k} {long_prompt}', 'max_tokens': 1, 'id_slot': k})
    rss_full = rss_kb(sl.proc.pid)
    check(greedy(sl.port) == REF, 'before sleeping: the reference answer')
    check(get(sl.port, '/props')[1]['is_sleeping'] is False, 'busy a moment ago: awake')
    asleep = False
    for _ in range(60):
        time.sleep(0.1)
        if get(sl.port, '/props')[1]['is_sleeping']:
            asleep = True
            break
    check(asleep, 'after the idle time /props says is_sleeping')
    check('slots\' memory freed' in sl.log(), 'the log says the memory was freed')
    if not sanitized():   # ASan keeps freed memory in its quarantine
        rss_asleep = rss_kb(sl.proc.pid)
        check(rss_full - rss_asleep > 12000, f'asleep: the KV caches\' memory went back to the system ({rss_full} -> {rss_asleep} kB)',
              f'RSS {rss_full} kB -> {rss_asleep} kB')
    st, slots = get(sl.port, '/slots')
    check(st == 200 and all(x['n_cached'] == 0 for x in slots), 'asleep: the slots hold nothing', str(slots))
    check(greedy(sl.port) == REF, 'the next request wakes it and answers as before (tokens and logprobs)')
    check(get(sl.port, '/props')[1]['is_sleeping'] is False, 'awake after the request')
    check(greedy(sl.port) == REF, 'and again')
finally:
    sl.stop()

# ---- --sleep-idle-seconds frees the weights (model/sleep.c) -----------------------------------
def rss_split(pid):
    with open(f'/proc/{pid}/status') as f:
        return {l.split(':')[0]: int(l.split()[1]) for l in f if l.startswith(('VmRSS:', 'RssAnon:', 'RssFile:'))}


F32 = os.path.join(FX, 'tiny-f32.gguf')
if not os.path.exists(F32):
    print(f'FAIL the fixture {F32} is missing')
    sys.exit(1)
weights_kb = os.path.getsize(F32) // 1024
for extra in ([], ['--no-mmap']):   # mapped pages, and a file read into memory
    what = ' '.join(['tiny-f32'] + extra)
    ws = Replica(W, 'sleepw', ['-m', F32, '-t', '2', '--ctx', '256', '--sleep-idle-seconds', '1'] + extra).start().wait_ready()
    try:
        before = greedy(ws.port)
        awake_kb = rss_split(ws.proc.pid)
        for _ in range(60):
            time.sleep(0.1)
            if get(ws.port, '/props')[1]['is_sleeping']:
                break
        check('weights\' memory freed' in ws.log(), f'{what}: the log says the weights were freed')
        asleep_kb = rss_split(ws.proc.pid)
        if not sanitized():
            check(awake_kb['VmRSS'] - asleep_kb['VmRSS'] > 0.8 * weights_kb,
                  f'{what}: asleep, RSS dropped by about the weights ({weights_kb} kB)', f'{awake_kb} -> {asleep_kb}')
        check(get(ws.port, '/props')[1]['is_sleeping'] is True, f'{what}: /props is_sleeping true')
        check(greedy(ws.port) == before, f'{what}: a request while asleep wakes it and answers as before (tokens, logprobs)')
        check(get(ws.port, '/props')[1]['is_sleeping'] is False, f'{what}: /props is_sleeping false once awake')
    finally:
        ws.stop()

# with a drafter that borrows the target's embedding and LM head: they stay valid across sleep
DRAFT = os.path.join(SRC, 'models', 'bonsai-tiny-dspark.gguf')
wd = Replica(W, 'sleepd', ['-m', TINY, '-md', DRAFT, '--draft-max', '4', '--draft-share-embeddings', '--no-mmap', '-t', '2',
                           '--ctx', '512', '--sleep-idle-seconds', '1']).start().wait_ready()
try:
    body = {'prompt': 'Once upon a time', 'max_tokens': 24, 'temperature': 0, 'logprobs': 2, 'ignore_eos': True}
    st, a = post(wd.port, '/v1/completions', body)
    for _ in range(60):
        time.sleep(0.1)
        if get(wd.port, '/props')[1]['is_sleeping']:
            break
    check('weights\' memory freed' in wd.log(), 'drafter: the target\'s weights were freed')
    st2, b = post(wd.port, '/v1/completions', body)
    check(st == st2 == 200 and a['choices'] == b['choices'] and a['timings']['draft_n'] > 0 and b['timings']['draft_n'] > 0,
          'drafter sharing the embeddings: after waking the same drafted answer', f'{a.get("timings")} {b.get("timings")}')
finally:
    wd.stop()

# a model file that changed while the server slept is not read again
COPY = os.path.join(W, 'copy.gguf')
with open(TINY, 'rb') as fi, open(COPY, 'wb') as fo:
    fo.write(fi.read())
ch = Replica(W, 'sleepc', ['-m', COPY, '-t', '1', '--ctx', '256', '--sleep-idle-seconds', '1']).start().wait_ready()
try:
    check(greedy(ch.port) is not None, 'changed file: the first request')
    for _ in range(60):
        time.sleep(0.1)
        if get(ch.port, '/props')[1]['is_sleeping']:
            break
    st0 = os.stat(COPY)
    os.utime(COPY, ns=(st0.st_atime_ns, st0.st_mtime_ns + 5 * 10**9))
    st, _, d = request(ch.port, 'POST', '/v1/completions', {'prompt': 'Hello', 'max_tokens': 2})
    check(st >= 500 and b'changed since it was loaded' in d, 'a file changed while asleep: the request fails, naming it',
          f'{st} {d[:200]}')
    check(get(ch.port, '/health')[0] == 200, 'and the server still answers')
finally:
    ch.stop()

# ---- --media-path -----------------------------------------------------------------------------
MODEL, MMPROJ, IMG = (os.path.join(FX, p) for p in ('tiny-f32.gguf', 'vision/tiny-mmproj-f32.gguf', 'vision/image.png'))
if not all(os.path.exists(p) for p in (MODEL, MMPROJ, IMG)):
    print(f'FAIL the vision fixture is missing in {FX}')
    sys.exit(1)
MEDIA = os.path.join(W, 'media')
os.makedirs(os.path.join(MEDIA, 'sub'))
with open(IMG, 'rb') as f:
    png = f.read()
for p in ('cat.png', 'sub/cat.png'):
    with open(os.path.join(MEDIA, p), 'wb') as f:
        f.write(png)
with open(os.path.join(W, 'outside.png'), 'wb') as f:
    f.write(png)
os.symlink(os.path.join(W, 'outside.png'), os.path.join(MEDIA, 'link.png'))


def image_chat(port, url):
    body = {'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'What is this?'},
                                                      {'type': 'image_url', 'image_url': {'url': url}}]}],
            'max_tokens': 6, 'temperature': 0}
    st, j = post(port, '/v1/chat/completions', body)
    return st, (j['choices'][0]['message']['content'] if st == 200 else j)


DATA_URL = 'data:image/png;base64,' + base64.b64encode(png).decode()
vis = Replica(W, 'media', ['-m', MODEL, '--mmproj', MMPROJ, '-t', '2', '--ctx', '512', '--media-path', MEDIA]).start().wait_ready()
try:
    st, want = image_chat(vis.port, DATA_URL)
    check(st == 200, 'the image as a data: URL answers', f'{st} {want}')
    st, got = image_chat(vis.port, 'file://cat.png')
    check(st == 200 and got == want, 'file://cat.png from --media-path: the same answer', f'{st} {got!r} vs {want!r}')
    st, got = image_chat(vis.port, 'file://sub/cat.png')
    check(st == 200 and got == want, 'file://sub/cat.png: subdirectories too', f'{st} {got!r}')
    for url, what in [('file://../outside.png', '".." out of the directory'), ('file://sub/../../outside.png', 'a ".." deeper in'),
                      ('file:///etc/passwd', 'an absolute path'), ('file://link.png', 'a symbolic link out of it'),
                      ('file://missing.png', 'a missing file'), ('file://sub', 'a directory'),
                      ('http://127.0.0.1/cat.png', 'a remote URL')]:
        st, j = image_chat(vis.port, url)
        check(st == 400 and 'image_url' in j['error']['message'], f'{what}: 400', f'{st} {j}')
    st, caps = get(vis.port, '/v1/models')
    check('vision' in caps['data'][0]['capabilities'], '/v1/models capabilities: vision with --mmproj')
finally:
    vis.stop()
rootmedia = Replica(W, 'rootmedia', ['-m', MODEL, '--mmproj', MMPROJ, '-t', '2', '--ctx', '512', '--media-path', '/']).start().wait_ready()
try:   # --media-path /: every file below the root (the prefix check took none)
    st, got = image_chat(rootmedia.port, 'file://' + os.path.realpath(MEDIA).lstrip('/') + '/cat.png')
    check(st == 200 and got == want, '--media-path /: a file below the root', f'{st} {got!r} vs {want!r}')
finally:
    rootmedia.stop()
novis = Replica(W, 'nomedia', ['-m', MODEL, '--mmproj', MMPROJ, '-t', '2', '--ctx', '512']).start().wait_ready()
try:
    st, j = image_chat(novis.port, 'file://cat.png')
    check(st == 400 and '--media-path' in j['error']['message'], 'no --media-path: file:// URLs are 400', f'{st} {j}')
finally:
    novis.stop()
finish()
