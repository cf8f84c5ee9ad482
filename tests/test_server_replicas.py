"""test_server_replicas.py: three `bitspark serve` replicas of the tiny model behind Debian's
nginx running deploy/nginx/bitspark.conf (its replica addresses and listen port replaced by
loopback ones; nginx runs as this user with its own prefix, config and logs in a temporary
directory). Bounded, loopback only.

A mixed load (8 workers, streaming and not, ~200 requests of 24 prompts, greedy) runs through
nginx while:
  1. one replica is killed with SIGKILL: every non-streaming request still succeeds (nginx
     retries it on another replica), streams the kill cuts are reported (they must all come from
     that replica, and end: none hangs);
  2. it is restarted on its port: it serves through nginx again, never before it is ready;
  3. a rolling SIGTERM restart goes through all three (drain, exit 0, restart, wait until it
     serves again): no request fails, streams included.
Then: every complete answer equals the answer of a single replica asked directly; multi-turn
chats with X-Session-Id stay on one replica and their second turn reuses the cached prompt
(cached_tokens at least the first turn's prompt) with the same answer as without a cache; and
sessions spread over more than one replica. Exit 77 (skipped) without nginx."""
import os, random, re, shutil, signal, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import (B, SKIP, SRC, TINY, Replica, bad, check, finish, free_port, jbody, metrics, ok, request,
                         sanitized, stream, workdir)

NGINX = shutil.which('nginx') or next((p for p in ('/usr/sbin/nginx',) if os.access(p, os.X_OK)), None)
if not B:
    print('BITSPARK is not set')
    sys.exit(1)
if not NGINX:
    print('SKIP: nginx is not installed (tools/deps.sh test installs Debian\'s nginx)')
    sys.exit(SKIP)

W = workdir('replicas')
CHAT = '/v1/chat/completions'
SLOW = sanitized()
N_MIN = 40 if SLOW else 200      # requests of the load (at least)
PACE = 1.5 if SLOW else 0.5      # seconds a worker waits between its requests (the load runs until the
                                 # restarts are done, which take longer in a sanitizer build)
TIMEOUT = 60 if SLOW else 30     # a request that takes longer has hung
ARGS = ['-m', TINY, '-t', '1', '-np', '2', '--ctx', '8192', '--drain-timeout', '120']
PROMPTS = [f'Request {i}: tell me about the {w}.' for i, w in
           enumerate('sea moon river city forest desert train island mountain garden bridge winter '
                     'harbour market tower valley library lantern meadow cliff orchard glacier canyon comet'.split())]


def body(i):
    return {'messages': [{'role': 'user', 'content': PROMPTS[i]}], 'max_tokens': 24 + 8 * (i % 6), 'temperature': 0}


def answer_of(d):
    m = d['choices'][0]['message']
    return (m.get('reasoning_content') or '', m.get('content') or '')


def stream_answer(st):
    r, c = '', ''
    for ev in st['events']:
        for ch in ev.get('choices') or []:
            d = ch.get('delta') or {}
            r += d.get('reasoning_content') or ''
            c += d.get('content') or ''
    return (r, c)


# ---- replicas and nginx ----------------------------------------------------------------------
reps = [Replica(W, f'r{i}', ARGS + ['--replica-id', f'r{i}']) for i in range(3)]
for r in reps:
    r.start()
for r in reps:
    r.wait_ready()
port = free_port()
conf = open(os.path.join(SRC, 'deploy', 'nginx', 'bitspark.conf')).read()
addrs = re.findall(r'server 10\.0\.0\.1\d:8080', conf)
if len(addrs) != 3 or 'listen 8000;' not in conf:
    bad(f'deploy/nginx/bitspark.conf: expected 3 upstream servers and listen 8000, got {addrs}')
    finish()
for a, r in zip(addrs, reps):
    conf = conf.replace(a, f'server 127.0.0.1:{r.port}')
conf = conf.replace('listen 8000;', f'listen 127.0.0.1:{port};')
open(os.path.join(W, 'bitspark.conf'), 'w').write(conf)
for d in ('body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'):
    os.makedirs(os.path.join(W, 'tmp', d), exist_ok=True)
user = 'user root root;\n' if os.geteuid() == 0 else ''   # workers stay this user (the directory is private)
open(os.path.join(W, 'nginx.conf'), 'w').write(f'''{user}worker_processes 1;
pid {W}/nginx.pid;
error_log {W}/nginx-error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format up '$status|$upstream_addr|$upstream_status|$request_time|$http_x_session_id';
    access_log {W}/nginx-access.log up;
    client_body_temp_path {W}/tmp/body;
    proxy_temp_path {W}/tmp/proxy;
    fastcgi_temp_path {W}/tmp/fastcgi;
    uwsgi_temp_path {W}/tmp/uwsgi;
    scgi_temp_path {W}/tmp/scgi;
    include {W}/bitspark.conf;
}}
''')
ngx = subprocess.Popen([NGINX, '-p', W + '/', '-c', os.path.join(W, 'nginx.conf'), '-e', os.path.join(W, 'nginx-error.log'),
                        '-g', 'daemon off;'], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def cleanup():
    if ngx.poll() is None:
        ngx.send_signal(signal.SIGQUIT)
        try:
            ngx.wait(10)
        except subprocess.TimeoutExpired:
            ngx.kill()
    for r in reps:
        r.stop()


up = False
for _ in range(500):
    if ngx.poll() is not None:
        break
    if request(port, 'GET', '/health', timeout=2)[0] == 200:
        up = True
        break
    time.sleep(0.01)
if not check(up, 'nginx is up in front of 3 replicas', open(os.path.join(W, 'nginx-error.log')).read()[-2000:]):
    cleanup()
    finish()

# ---- the single-replica answers ------------------------------------------------------------------
ref = {}
for i in range(len(PROMPTS)):
    st, _, d = request(reps[0].port, 'POST', CHAT, dict(body(i), cache_prompt=False))
    if st != 200:
        bad(f'reference answer {i}: {st} {d[:200]}')
        cleanup()
        finish()
    ref[i] = answer_of(jbody(d))
# long enough to be surely running when a replica is killed or drains (~0.5 s on a quiet tiny
# model, ten times that on a loaded CI host: the drain timeout above leaves room for that)
LONG = {'messages': [{'role': 'user', 'content': 'A long story, please.'}], 'max_tokens': 3000, 'ignore_eos': True,
        'temperature': 0}
t_ref = time.time()
st, _, d = request(reps[0].port, 'POST', CHAT, dict(LONG, cache_prompt=False))
ref_long = answer_of(jbody(d)) if st == 200 else None
ok(f'{len(ref)} reference answers from one replica, and one of 3000 tokens ({time.time() - t_ref:.2f} s)')

# ---- the load ------------------------------------------------------------------------------------
lock = threading.Lock()
results = []   # dicts: i, stream, t0, t1, status, replica, answer, done, cut, error, phase
stop_load = threading.Event()
phase = ['steady']


def worker(w):
    rng = random.Random(w)
    n = 0
    while not stop_load.is_set() or len(results) < N_MIN:
        i = rng.randrange(len(PROMPTS))
        streaming = (n + w) % 2 == 1
        n += 1
        t0 = time.time()
        ph = phase[0]
        if streaming:
            st = stream(port, CHAT, body(i), timeout=TIMEOUT)
            res = {'status': st['status'], 'replica': st['headers'].get('x-replica-id'), 'answer': stream_answer(st),
                   'done': st['done'], 'cut': st['cut'], 'error': st['error'], 'body': st.get('body', b'')}
        else:
            s, h, d = request(port, 'POST', CHAT, body(i), timeout=TIMEOUT)
            j = jbody(d) if s == 200 else None
            res = {'status': s, 'replica': h.get('x-replica-id'), 'answer': answer_of(j) if j else None,
                   'done': j is not None, 'cut': False, 'error': None if s else d.decode(), 'body': d}
        res.update(i=i, stream=streaming, t0=t0, t1=time.time(), phase=ph, phase_end=phase[0])
        with lock:
            results.append(res)
        time.sleep(PACE * rng.uniform(0.5, 1.5))


def served_since(r, tokens0, timeout=20):
    """Wait until replica r has generated more than tokens0 tokens (it serves through nginx
    again: the test sends nothing to it directly during the load)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if metrics(r.port).get('llamacpp:tokens_predicted_total', 0) > tokens0:
            return True
        time.sleep(0.05)
    return False


def wait_results(n, timeout=60):
    t0 = time.time()
    while len(results) < n and time.time() - t0 < timeout:
        time.sleep(0.02)


threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(8)]
t_start = time.time()
for t in threads:
    t.start()
wait_results(20)

# 1. SIGKILL one replica while it runs a long stream and a long non-streaming request of its own
# (their session id hashes to it) besides its share of the load
def session_on(r):
    """A session id that nginx hashes to replica r."""
    return next(f'{r.name}-{k}' for k in range(200) if request(port, 'POST', CHAT, dict(body(0), max_tokens=1),
                                                              headers={'X-Session-Id': f'{r.name}-{k}'})[1].get('x-replica-id') == r.name)


victim = reps[1]
sid = session_on(victim)
opened = threading.Event()
long_res = {}
lt = [threading.Thread(target=lambda: long_res.update(s=stream(port, CHAT, LONG, headers={'X-Session-Id': sid},
                                                             timeout=TIMEOUT, on_open=opened.set)), daemon=True),
      threading.Thread(target=lambda: long_res.update(p=request(port, 'POST', CHAT, LONG, headers={'X-Session-Id': sid},
                                                               timeout=TIMEOUT)), daemon=True)]
for t in lt:
    t.start()
opened.wait(10)
t_wait = time.time()
while metrics(victim.port).get('llamacpp:requests_in_flight', 0) < 2 and time.time() - t_wait < 5:
    time.sleep(0.005)
phase[0] = 'kill'
t_kill = time.time()
victim.proc.kill()
victim.proc.wait()
victim.logf.close()
time.sleep(1.0)
# 2. restart it on the same port; it must serve through nginx again, never before it is ready
victim.start()
t_restart = time.time()
victim.wait_ready()
t_ready = time.time()
phase[0] = 'rejoin'
check(served_since(victim, 0), f'{victim.name} restarted: serves through nginx again')
phase[0] = 'rolling'
# 3. rolling SIGTERM restart
t_roll = time.time()
drain_streams, drain_sent = [], []
for r in reps:
    # a long stream in flight on r when it gets SIGTERM (sent to it directly: which replica a
    # session hashes to depends on which ones nginx has taken out just now): the drain lets it finish
    got, opened = {}, threading.Event()
    th = threading.Thread(target=lambda: got.update(s=stream(r.port, CHAT, LONG, timeout=TIMEOUT, on_open=opened.set)),
                          daemon=True)
    th.start()
    opened.wait(10)
    drain_streams.append((r.name, th, got))
    tok0 = 0
    r.signal(signal.SIGTERM)
    for _ in range(100):
        if request(r.port, 'GET', '/ready')[0] == 503:
            break
        time.sleep(0.005)
    # while it drains, new requests through nginx (a third of them hashed to r) are answered by
    # the others: r refuses them with 503 and nginx sends them on
    for k in range(6):
        if k % 2:
            x = stream(port, CHAT, body(k), timeout=TIMEOUT)
            good = x['done'] and stream_answer(x) == ref[k]
            rid = x['headers'].get('x-replica-id')
        else:
            st_, h_, d_ = request(port, 'POST', CHAT, body(k), timeout=TIMEOUT)
            good = st_ == 200 and answer_of(jbody(d_)) == ref[k]
            rid = h_.get('x-replica-id')
        drain_sent.append((r.name, rid, good, th.is_alive()))
    rc = r.wait(150)
    r.logf.close()
    drained = 'draining' in r.log() and 'stopped' in r.log()
    check(rc == 0 and drained, f'rolling restart: {r.name} drained and exited 0', f'exit {rc}: {r.log()[-500:]}')
    r.start().wait_ready()
    check(served_since(r, tok0), f'rolling restart: {r.name} serves through nginx again')
t_roll_end = time.time()
phase[0] = 'after'
stop_load.set()
for t in threads:
    t.join(TIMEOUT + 10)
hung = [t for t in threads if t.is_alive()]
check(not hung, f'load: {len(results)} requests in {time.time() - t_start:.1f} s, no worker hung')

# ---- what the load saw ----------------------------------------------------------------------------
plain = [x for x in results if not x['stream']]
streams = [x for x in results if x['stream']]
failed_plain = [x for x in plain if x['status'] != 200]
check(not failed_plain, f'{len(plain)} non-streaming requests: all 200 (the killed replica\'s were retried)',
      str([(x['status'], x['phase'], x['body'][:120]) for x in failed_plain[:5]]))
cut = [x for x in streams if not x['done']]
cut_ok = all(x['cut'] and x['replica'] == victim.name and x['t0'] <= t_kill <= x['t1'] for x in cut)
check(cut_ok, f'{len(streams)} streams: {len(cut)} cut by the SIGKILL, all on {victim.name} and running at the kill',
      str([(x['status'], x['replica'], x['phase'], x['error'], round(x['t0'] - t_kill, 2)) for x in cut if not
           (x['cut'] and x['replica'] == victim.name and x['t0'] <= t_kill <= x['t1'])][:5]))
for name, th, got in drain_streams:
    th.join(TIMEOUT + 5)
    ds = got.get('s')
    check(ds and ds['done'] and ds['headers'].get('x-replica-id') == name and stream_answer(ds) == ref_long,
          f'rolling restart: the long stream on {name} finished in full while it drained',
          str(ds and (ds['status'], ds['done'], ds['error'], ds['headers'].get('x-replica-id'),
                      [ch.get('finish_reason') for ev in ds['events'][-2:] for ch in ev.get('choices') or []],
                      len(ds['events']))))
rolling = [x for x in results if x['t1'] >= t_roll and x['t0'] <= t_roll_end]
check(all(good and rid != name for name, rid, good, _ in drain_sent) and all(alive for *_, alive in drain_sent),
      f'rolling restart: {len(drain_sent)} requests sent through nginx while a replica drained: all answered, '
      f'none by the draining one', str(drain_sent))
check(rolling and all(x['status'] == 200 and x['done'] for x in rolling),
      f'rolling restart: {len(rolling)} requests during it, none failed',
      str([(x['status'], x['stream'], x['replica'], x['error']) for x in rolling if not (x['status'] == 200 and x['done'])][:5]))
for t in lt:
    t.join(TIMEOUT + 5)
ls, lp = long_res.get('s'), long_res.get('p')
check(ls and ls['cut'] and not ls['done'] and ls['headers'].get('x-replica-id') == victim.name,
      f'the long stream on {victim.name} was cut by the kill, and reported so (not hung)',
      str(ls and (ls['status'], ls['done'], ls['cut'], ls['error'], len(ls['events']))))
lj = jbody(lp[2]) if lp and lp[0] == 200 else None
check(lj and lp[1].get('x-replica-id') != victim.name and answer_of(lj) == ref_long,
      f'the long non-streaming request on {victim.name} was retried by nginx on '
      f'{lp[1].get("x-replica-id") if lp else None} and answered in full',
      str(lp and (lp[0], lp[1].get('x-replica-id'), lp[2][:200])))
# 50 ms of slack: the test sees the 'listening on' line up to one poll after the state changed
early = [x for x in results if x['replica'] == victim.name and x['t0'] > t_kill and x['t1'] < t_ready - 0.05 and x['done']]
check(not early, f'{victim.name} answered nothing between the kill and being ready again',
      str([(x['t0'] - t_kill, x['t1'] - t_kill) for x in early[:5]]))
wrong = [x for x in results if x['done'] and x['answer'] != ref[x['i']]]
check(not wrong, f'{sum(x["done"] for x in results)} complete answers equal the single-replica answers',
      str([(x['i'], x['replica'], x['answer'], ref[x['i']]) for x in wrong[:3]]))
by = {}
for x in results:
    if x['done']:
        by[x['replica']] = by.get(x['replica'], 0) + 1
check(len(by) == 3, f'answers per replica: {dict(sorted(by.items()))}')
log = open(os.path.join(W, 'nginx-access.log')).read().splitlines()
retried = [x.split('|') for x in log if ',' in x.split('|')[1]]
ok(f'nginx: {len(log)} requests, {len(retried)} of them retried on another replica '
   f'(upstream statuses {sorted(set(x[2] for x in retried))})')

# ---- affinity: multi-turn chats with X-Session-Id ---------------------------------------------------
def chat(msgs):
    return {'messages': msgs, 'max_tokens': 16, 'temperature': 0}


def turn(sid, body, k):   # one chat turn of session sid: (headers, answer), or (headers, None) reported
    st, h, d = request(port, 'POST', CHAT, body, headers={'X-Session-Id': sid})
    j = jbody(d) if st == 200 else None
    if not j:
        bad(f'affinity turn {k}: {st} {d[:200]}')
    return h, j

homes = set()
aff_ok = True
for k in range(9):   # 9 sessions on 3 replicas: all on one only with probability 3^-8
    sid = f'session-{k}-{random.randrange(1 << 30)}'
    msgs = [{'role': 'user', 'content': f'Session {k}: describe a {PROMPTS[k % len(PROMPTS)].split()[-1]}'}]
    h1, j1 = turn(sid, chat(msgs), 1)
    if not j1:
        aff_ok = False
        continue
    m1 = j1['choices'][0]['message']
    msgs2 = msgs + [{'role': 'assistant', 'content': m1.get('content') or ''},
                    {'role': 'user', 'content': 'And then? Say more.'}]
    b2 = chat(msgs2)
    h2, j2 = turn(sid, b2, 2)
    if not j2:
        aff_ok = False
        continue
    cached = j2['usage'].get('prompt_tokens_details', {}).get('cached_tokens', 0)
    home = next(r for r in reps if r.name == h1.get('x-replica-id'))
    other = next(r for r in reps if r is not home)
    s3, _, d3 = request(home.port, 'POST', CHAT, dict(b2, cache_prompt=False))   # the same without the cache
    same = s3 == 200 and answer_of(jbody(d3)) == answer_of(j2)
    # turn 2 on a replica that never saw turn 1: only the template's common start is cached
    s4, _, d4 = request(other.port, 'POST', CHAT, b2)
    cached_elsewhere = jbody(d4)['usage']['prompt_tokens_details']['cached_tokens'] if s4 == 200 else None
    homes.add(h1.get('x-replica-id'))
    # turn 1's prompt up to its assistant header (rendered differently in turn 2) is reused
    n1 = j1['usage']['prompt_tokens']
    if not (h1.get('x-replica-id') == h2.get('x-replica-id') and cached >= n1 - 8 and cached_elsewhere is not None and
            cached > cached_elsewhere + 4 and same):
        aff_ok = False
        bad(f'affinity {sid}: replicas {h1.get("x-replica-id")} / {h2.get("x-replica-id")}, cached {cached} of '
            f'turn 1\'s {n1} prompt tokens (elsewhere {cached_elsewhere}), same answer as uncached: {same}')
    else:
        ok(f'affinity {sid}: both turns on {h2.get("x-replica-id")}, turn 2 cached_tokens {cached} '
           f'(turn 1 prompt {n1}, on another replica {cached_elsewhere}), answer as without the cache')
check(len(homes) > 1, f'sessions spread over replicas: {sorted(homes)}')
cleanup()
finish()
