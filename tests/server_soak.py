"""server_soak.py: a bounded soak of a running bitspark serve (loopback), for
tests/test_server_soak.sh:  server_soak.py URL PID SECONDS WORKERS
Each worker loops over a mix for SECONDS: chat non-streaming, chat streaming (SSE framing and a
finish chunk checked), completions, a stream cancelled after its first chunk (socket closed),
a non-streaming request abandoned mid-generation, malformed JSON and a bad field (400 with an
OpenAI error), tokenize. Then: every valid request answered correctly, every bad one a 400, no
slot left processing, /health ok, and the RSS no more than 2 x (RSS after warm-up) + 64 MiB.
Prints one JSON line; exit 0 when all holds."""
import http.client, json, os, random, socket, sys, threading, time
from urllib.parse import urlparse

url, pid, secs, workers = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
u = urlparse(url)
H = {'Content-Type': 'application/json'}


def rss_kb():
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])


def req(method, path, body=None, timeout=60):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    c.request(method, path, body=None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode()),
              headers=H)
    r = c.getresponse()
    d = r.read()
    c.close()
    return r.status, d


def msg(i):
    return [{'role': 'user', 'content': f'soak request {i}: say something'}]


counts, bad, lock = {}, [], threading.Lock()


def note(kind, good, detail=''):
    with lock:
        k = counts.setdefault(kind, [0, 0])
        k[0 if good else 1] += 1
        if not good and len(bad) < 5: bad.append(f'{kind}: {detail[:200]}')


def chat(i):
    n = random.randint(1, 12)
    st, d = req('POST', '/v1/chat/completions', {'messages': msg(i), 'max_tokens': n, 'ignore_eos': True})
    j = json.loads(d) if st == 200 else {}
    good = st == 200 and j['usage']['completion_tokens'] == n and j['choices'][0]['finish_reason'] == 'length'
    note('chat', good, f'{st} {d[:120]}')


def stream(i):
    n = random.randint(1, 12)
    st, d = req('POST', '/v1/chat/completions', {'messages': msg(i), 'max_tokens': n, 'ignore_eos': True, 'stream': True,
                                                 'stream_options': {'include_usage': True}})
    ev = [l[6:] for l in d.decode().split('\n') if l.startswith('data: ')]
    good = st == 200 and ev and ev[-1] == '[DONE]'
    if good:
        js = [json.loads(e) for e in ev[:-1]]
        good = any(c['choices'] and c['choices'][0].get('finish_reason') == 'length' for c in js) and \
            js[-1].get('usage', {}).get('completion_tokens') == n
    note('stream', good, f'{st} {d[-160:]}')


def completion(i):
    st, d = req('POST', '/v1/completions', {'prompt': f'Once upon a time {i}', 'max_tokens': 5, 'ignore_eos': True})
    good = st == 200 and json.loads(d)['usage']['completion_tokens'] == 5
    note('completion', good, f'{st} {d[:120]}')


def cancel_stream(i):
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    body = json.dumps({'messages': msg(i), 'max_tokens': 4000, 'ignore_eos': True, 'stream': True}).encode()
    s.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Content-Length: %d\r\n\r\n' % len(body) + body)
    got = s.recv(4096)
    s.close()
    note('cancelled_stream', got.startswith(b'HTTP/1.1 200'), got[:80].decode(errors='replace'))


def abandon(i):
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    body = json.dumps({'messages': msg(i), 'max_tokens': 4000, 'ignore_eos': True}).encode()
    s.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Content-Length: %d\r\n\r\n' % len(body) + body)
    time.sleep(random.uniform(0.01, 0.2))
    s.close()
    note('abandoned', True)


def malformed(i):
    body = random.choice([b'{"messages": [', b'[1,2]', b'{"messages": [{"role": "user", "content": "x"}], "top_p": 9}',
                          b'{"messages": [{"role": "wizard", "content": "x"}]}', b'\xff\xfe'])
    st, d = req('POST', '/v1/chat/completions', body)
    good = st == 400 and json.loads(d)['error']['code'] == 400
    note('malformed', good, f'{st} {d[:120]}')


def tokenize(i):
    st, d = req('POST', '/tokenize', {'content': f'hello {i}'})
    note('tokenize', st == 200 and len(json.loads(d)['tokens']) > 0, f'{st}')


MIX = [chat, chat, stream, stream, completion, cancel_stream, abandon, malformed, tokenize]


def worker(w):
    rnd = random.Random(w)
    i = 0
    while time.time() < stop:
        f = rnd.choice(MIX)
        try:
            f(w * 100000 + i)
        except Exception as e:
            note(f.__name__, False, repr(e))
        i += 1


for i in range(4): chat(i); stream(i)
rss0 = rss_kb()
stop = time.time() + secs
ts = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
for t in ts: t.start()
for t in ts: t.join()
idle = False
for _ in range(100):   # cancelled / abandoned tasks must free their slots promptly
    slots = json.loads(req('GET', '/slots')[1])
    if not any(s['is_processing'] for s in slots): idle = True; break
    time.sleep(0.05)
health = req('GET', '/health')[0] == 200
rss1 = rss_kb()
bound = 2 * rss0 + 64 * 1024
total_bad = sum(v[1] for v in counts.values())
# ASan keeps freed memory in its quarantine (256 MB): RSS says nothing there, so the bound is
# checked in plain builds only (LeakSanitizer checks the sanitizer build at exit instead)
rss_checked = os.environ.get('BS_SANITIZED') != '1'
ok = total_bad == 0 and idle and health and (rss1 < bound or not rss_checked) and sum(v[0] for v in counts.values()) > 0
print(json.dumps({'ok': ok, 'seconds': secs, 'workers': workers, 'counts': {k: v[0] for k, v in counts.items()},
                  'failures': total_bad, 'first_failures': bad, 'slots_idle': idle, 'healthy': health,
                  'rss_start_mb': round(rss0 / 1024, 1), 'rss_end_mb': round(rss1 / 1024, 1),
                  'rss_bound_mb': round(bound / 1024, 1), 'rss_checked': rss_checked}))
sys.exit(0 if ok else 1)
