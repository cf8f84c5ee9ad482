"""test_server_lifecycle.py: `bitspark serve` as a load balancer sees it (server_life.c), on
loopback:
- loading: from the moment the listener is open until the model is loaded, GET /health and
  /ready answer 503 {"status":"loading"} and a chat request 503 with Retry-After; then /health
  200 {"status":"ok"} (a 60 MB synthetic model read with --no-mmap makes the window long
  enough to watch);
- readiness: /ready 503 {"status":"busy"} while the queue is full, /health still 200;
- --replica-id: X-Replica-Id on answers (chat, streams, health);
- graceful drain: after SIGTERM /health stays 200, /ready and new generation requests answer
  503 with Retry-After, other endpoints still answer, in-flight requests (a stream and a plain
  one) finish normally, and the process exits 0;
- the drain timeout and a second SIGTERM cancel what still runs: the stream ends with
  finish_reason "shutdown" and [DONE], the waiting answer is a 503; exit 0, promptly;
- /metrics: the time-to-first-token and per-token histograms count every request (cumulative
  buckets, +Inf = count), requests_in_flight / requests_waiting back at 0."""
import os, signal, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, TINY, TMP, Replica, check, finish, finish_reason, jbody, metrics, request, stream, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
W = workdir('life')
CHAT = '/v1/chat/completions'
ENDLESS = {'messages': [{'role': 'user', 'content': 'go on forever'}], 'max_tokens': 1 << 20, 'ignore_eos': True}


def msg(text, n=8):
    return {'messages': [{'role': 'user', 'content': text}], 'max_tokens': n, 'temperature': 0}


def mid_model():
    """A synthetic model big enough that reading it takes a while (cached in BS_TMP)."""
    out = os.path.join(TMP, 'life-mid-q1_0.gguf')
    if not os.path.exists(out):
        subprocess.run([B, 'synth', '--preset', 'tiny', '--n-embd', '2048', '--n-ff', '6144', '--n-layer', '8',
                        '--n-head', '16', '--n-head-kv', '4', '--head-dim', '128', '-o', out + '.tmp'],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(out + '.tmp', out)
    return out


def in_thread(fn, *a, **k):
    res = {}
    t = threading.Thread(target=lambda: res.update(r=fn(*a, **k)), daemon=True)
    t.start()
    return t, res


def until(pred, timeout=10):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.01)
    return False


# ---- loading ---------------------------------------------------------------------------------
r = Replica(W, 'loading', ['-m', mid_model(), '--no-mmap', '-t', '1', '--replica-id', 'r-load'])
r.start()
seen = {'health': [], 'ready': [], 'chat': []}
while not r.ready() and r.proc.poll() is None:
    hs, hh, hb = request(r.port, 'GET', '/health')
    if r.ready():   # the state may have changed while the answer was on its way
        break
    rs, _, rb = request(r.port, 'GET', '/ready')
    cs, ch, cb = request(r.port, 'POST', CHAT, msg('hi'))
    if not r.ready():
        hj = jbody(hb) or {}
        seen['health'].append((hs, hj.get('status') if hj.get('error', {}).get('message') == 'Loading model' else hj,
                               hh.get('x-replica-id')))
        seen['ready'].append((rs, (jbody(rb) or {}).get('status')))
        seen['chat'].append((cs, ch.get('retry-after')))
n = len(seen['health'])
check(n > 0, f'loading: {n} rounds of requests answered while the model loaded')
check(n > 0 and all(h == (503, 'loading', 'r-load') for h in seen['health']),
      'loading: /health 503 {"status":"loading"} (and llama-server\'s error object) with X-Replica-Id',
      str(set(map(str, seen['health']))))
check(n > 0 and all(x == (503, 'loading') for x in seen['ready']), 'loading: /ready 503 loading', str(set(seen['ready'])))
check(n > 0 and all(c[0] == 503 and c[1] for c in seen['chat']), 'loading: chat 503 with Retry-After',
      str(set(seen['chat'])))
r.wait_ready()
hs, _, hb = request(r.port, 'GET', '/health')
check(hs == 200 and jbody(hb).get('status') == 'ok', 'loaded: /health 200 ok', f'{hs} {hb}')
rs, _, rb = request(r.port, 'GET', '/health?ready')
check(rs == 200 and jbody(rb).get('status') == 'ready', 'loaded: /health?ready 200 ready', f'{rs} {rb}')
r.stop()

# ---- readiness under a full queue ----------------------------------------------------------------
r = Replica(W, 'busy', ['-m', TINY, '-t', '1', '-np', '1', '--queue', '1', '--ctx', '8192', '--context-shift'])
r.start().wait_ready()
ths = [in_thread(request, r.port, 'POST', CHAT, ENDLESS, timeout=30) for _ in range(2)]
full = until(lambda: metrics(r.port).get('llamacpp:requests_deferred') == 1)
rs, _, rb = request(r.port, 'GET', '/ready')
hs, _, _ = request(r.port, 'GET', '/health')
check(full and rs == 503 and jbody(rb).get('status') == 'busy' and hs == 200,
      'queue full: /ready 503 busy, /health 200', f'{full} {rs} {rb} {hs}')
# the slot's request counts as waiting until its first token; under a sanitizer that takes a while
until(lambda: metrics(r.port).get('llamacpp:requests_waiting') == 1)
m = metrics(r.port)
check(m.get('llamacpp:requests_waiting') == 1 and m.get('llamacpp:requests_in_flight') == 2,
      'metrics: 1 request waiting, 2 in flight', str({k: v for k, v in m.items() if 'requests_' in k}))
r.signal(signal.SIGTERM)
r.signal(signal.SIGTERM)
r.wait(10)
r.stop()

# ---- graceful drain: in-flight work finishes --------------------------------------------------------
r = Replica(W, 'drain', ['-m', TINY, '-t', '1', '-np', '2', '--replica-id', 'r-drain', '--drain-timeout', '30'])
r.start().wait_ready()
opened = threading.Event()
long_req = dict(msg('tell a long story', 2500), ignore_eos=True)
ts, sres = in_thread(stream, r.port, CHAT, long_req, on_open=opened.set)
tp, pres = in_thread(request, r.port, 'POST', CHAT, long_req)
opened.wait(10)
until(lambda: metrics(r.port).get('llamacpp:requests_processing') == 2, 5)
t_sig = time.time()
r.signal(signal.SIGTERM)
until(lambda: 'draining' in r.log(), 5)
hs, hh, hb = request(r.port, 'GET', '/health')
rs, _, rb = request(r.port, 'GET', '/ready')
cs, ch, cb = request(r.port, 'POST', CHAT, msg('new work'))
es, eh, _ = request(r.port, 'POST', '/v1/completions', {'prompt': 'x', 'max_tokens': 2})
ms, _, _ = request(r.port, 'GET', '/v1/models')
check(hs == 200 and jbody(hb).get('status') == 'draining', 'draining: /health 200 (alive)', f'{hs} {hb}')
check(rs == 503 and jbody(rb).get('status') == 'draining', 'draining: /ready 503', f'{rs} {rb}')
check(cs == 503 and ch.get('retry-after') and es == 503 and eh.get('retry-after'),
      'draining: new chat and completion requests 503 with Retry-After', f'{cs} {ch} {es}')
check(ch.get('x-replica-id') == 'r-drain' and ch.get('connection', '').lower() == 'close',
      'draining: answers name the replica and close the connection', str(ch))
check(ms == 200, 'draining: non-generation endpoints still answer', str(ms))
ts.join(60)
tp.join(60)
st, pr = sres.get('r'), pres.get('r')
check(st and st['done'] and finish_reason(st) == 'length' and st['headers'].get('x-replica-id') == 'r-drain',
      'draining: the in-flight stream finished (finish_reason length, [DONE], X-Replica-Id)',
      str(st and (st['done'], finish_reason(st), st['error'])))
pj = jbody(pr[2]) if pr else None
check(pr and pr[0] == 200 and pj['choices'][0]['finish_reason'] == 'length' and pj['usage']['completion_tokens'] == 2500,
      'draining: the in-flight plain request finished with all its 2500 tokens', str(pr and pr[:2]))
rc = r.wait(30)
check(rc == 0, f'drained: exit 0 after {time.time() - t_sig:.1f} s', f'exit status {rc}')
r.stop()

# ---- the drain timeout and a second signal cancel what is left -------------------------------------
for how in ('timeout', 'second SIGTERM'):
    r = Replica(W, 'cut', ['-m', TINY, '-t', '1', '-np', '2', '--ctx', '8192', '--context-shift',
                           '--drain-timeout', '0.5' if how == 'timeout' else '60'])
    r.start().wait_ready()
    opened = threading.Event()
    ts, sres = in_thread(stream, r.port, CHAT, dict(ENDLESS, stream_options={'include_usage': True}),
                         on_open=opened.set)
    tp, pres = in_thread(request, r.port, 'POST', CHAT, ENDLESS)
    opened.wait(10)
    until(lambda: metrics(r.port).get('llamacpp:requests_processing') == 2, 5)
    t_sig = time.time()
    r.signal(signal.SIGTERM)
    if how != 'timeout':
        until(lambda: 'draining' in r.log(), 5)
        time.sleep(0.2)
        r.signal(signal.SIGTERM)
    rc = r.wait(20)
    dt = time.time() - t_sig
    ts.join(10)
    tp.join(10)
    st, pr = sres.get('r'), pres.get('r')
    check(rc == 0 and dt < 5, f'{how}: exit 0 after {dt:.1f} s', f'exit status {rc}')
    check(st and st['done'] and finish_reason(st) == 'shutdown' and any('usage' in e for e in st['events']),
          f'{how}: the stream ended with finish_reason "shutdown", its usage and [DONE]',
          str(st and (st['done'], finish_reason(st), st['error'], st['events'][-1:] if st['events'] else None)))
    check(pr and pr[0] == 503 and pr[1].get('retry-after'), f'{how}: the waiting answer is 503 with Retry-After',
          str(pr and pr[:2]))
    r.stop()

# ---- the histograms: 5 plain requests and 5 streams of 6 tokens, one of a single token --------------
r = Replica(W, 'hist', ['-m', TINY, '-t', '1', '-np', '2'])
r.start().wait_ready()
N = 10
for i in range(N):
    if i % 2:
        stream(r.port, CHAT, msg(f'hist {i}', 6))
    else:
        request(r.port, 'POST', CHAT, msg(f'hist {i}', 6))
request(r.port, 'POST', CHAT, msg('one token', 1))
m = metrics(r.port)
for name, count in (('time_to_first_token_seconds', N + 1), ('time_per_output_token_seconds', N)):
    b = sorted(((float(k.split('"')[1]) if '+Inf' not in k else float('inf')), v) for k, v in m.items()
               if k.startswith(f'llamacpp:{name}_bucket'))
    mono = all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1))
    check(len(b) > 5 and mono and b[-1][1] == m.get(f'llamacpp:{name}_count') == count and m.get(f'llamacpp:{name}_sum', 0) > 0,
          f'/metrics {name}: {len(b)} cumulative buckets, count {count}', str(b))
# a request leaves requests_in_flight once its connection is done with it, which may be a moment
# after the client has read the last byte; the scheduler's gauges (processing, waiting) are
# published after the pass that delivered the answer, also a moment later (seen under ASan)
def settled():
    g = metrics(r.port)
    return all(g.get('llamacpp:' + k) == 0 for k in ('requests_in_flight', 'requests_processing', 'requests_waiting'))
idle = until(settled, 5)
m = metrics(r.port)
check(idle and m.get('llamacpp:requests_waiting') == 0 and m.get('llamacpp:ready') == 1,
      '/metrics: nothing in flight or waiting, ready 1', str({k: v for k, v in m.items() if 'requests_' in k}))
r.stop()
finish()
