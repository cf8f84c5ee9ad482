"""server_limits.py: the server's limits against hostile requests (loopback only, bounded loops),
for tests/test_server_limits.sh. Each mode prints one JSON line; exit status 0 when its checks hold.

  framing URL           raw sockets: two different Content-Lengths and two Hosts are 400, an
                        unknown Transfer-Encoding is 501 at once, equal Content-Lengths and
                        chunked bodies are served
  leave URL             a chat request whose client leaves (without and with streaming) is counted
                        in requests_client_closed_total
  budget URL            two idle sockets declaring 8 MiB + 1 MiB block no POST (chat and tokenize
                        answer within BOUND s) and leave /ready at 200; bodies that really hold
                        the budget make /ready 503 until they go
  stall URL             (a server with --body-budget 1000000) a client that sends half of a
                        600 KB body and stops, holding budget, is cut while three whole 600 KB
                        bodies wait: they are answered in well under BODY_S (60 s; at 64 KB/s
                        past 5 s of grace the holder is cut after some 13 s), and its socket
                        closed
  npredict URL CAP      max_tokens -1 + ignore_eos (context shift on) stops at CAP tokens with
                        finish_reason length; /props reports CAP
  embed URL             6 big embedding requests run while /health answers within BOUND s and a
                        chat request within max(BOUND, 30 x its idle time); a client that leaves
                        cancels its embedding (the next request does not wait for it)
  image URL PID         an 8192 x 8192 PNG (a few hundred KB) is refused as too large for the
                        context within BOUND / 2 s and without decoding (peak RSS grows < 64 MiB); /health
                        answers within BOUND s while 4 clients loop such requests
  rss URL PID           (a server with --context-shift) n 16 x top_logprobs 20 x max_tokens 100000
                        is a 400 (past the logprob limit); two such requests of 200 tokens and a
                        7 MB /tokenize with_pieces leave RSS within 48 MiB of idle (glibc's arenas
                        kept ~50 MB per request and 1.4 GB per tokenize before)
"""
import http.client, json, os, socket, struct, sys, threading, time, zlib
from urllib.parse import urlparse

# seconds a plain request may take while the hostile one runs (a sanitizer build is ~3x slower)
BOUND = 6.0 if os.environ.get('BS_SANITIZED') == '1' else 2.0


def hp(url):
    u = urlparse(url)
    return u.hostname, u.port


def request(url, method, path, body=None, timeout=30):
    h, p = hp(url)
    c = http.client.HTTPConnection(h, p, timeout=timeout)
    t0 = time.time()
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    c.request(method, path, body=data, headers={'Content-Type': 'application/json'} if data is not None else {})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out, time.time() - t0


def raw(url, data, wait=5.0):
    """Send data on a fresh socket; the status line and seconds until the answer."""
    h, p = hp(url)
    s = socket.create_connection((h, p), timeout=wait)
    t0 = time.time()
    s.sendall(data)
    try:
        got = s.recv(65536)
    except socket.timeout:
        got = b'TIMEOUT'
    s.close()
    return got.split(b'\r\n')[0].decode(errors='replace'), round(time.time() - t0, 2)


def status_kb(pid, field):
    for line in open(f'/proc/{pid}/status'):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def metric(url, name):
    _, body, _ = request(url, 'GET', '/metrics')
    for line in body.decode().splitlines():
        if line.startswith('llamacpp:' + name + ' '):
            return float(line.split()[1])
    return None


CHAT = {'messages': [{'role': 'user', 'content': 'Hello there.'}], 'max_tokens': 4}


def framing(url):
    h, p = hp(url)
    body = json.dumps(CHAT).encode()
    head = f'POST /v1/chat/completions HTTP/1.1\r\nHost: {h}:{p}\r\nContent-Type: application/json\r\n'.encode()
    r = {
        'two_lengths': raw(url, head + b'Content-Length: %d\r\nContent-Length: 5\r\n\r\n' % len(body) + body),
        'same_lengths': raw(url, head + b'Content-Length: %d\r\nContent-Length: %d\r\n\r\n' % (len(body), len(body)) + body),
        'two_hosts': raw(url, f'GET /health HTTP/1.1\r\nHost: {h}:{p}\r\nHost: evil.example\r\n\r\n'.encode()),
        'gzip': raw(url, head + b'Transfer-Encoding: gzip\r\n\r\n'),
        'chunked_gzip': raw(url, head + b'Transfer-Encoding: gzip, chunked\r\n\r\n'),
        'length_and_chunked': raw(url, head + b'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'),
        'chunked': raw(url, head + b'Transfer-Encoding: chunked\r\n\r\n%x\r\n' % len(body) + body + b'\r\n0\r\n\r\n'),
    }
    code = {k: v[0].split(' ')[1] if ' ' in v[0] else v[0] for k, v in r.items()}
    ok = (code['two_lengths'] == '400' and code['same_lengths'] == '200' and code['two_hosts'] == '400' and
          code['gzip'] == '501' and code['chunked_gzip'] == '501' and code['length_and_chunked'] == '400' and
          code['chunked'] == '200' and all(v[1] < BOUND for v in r.values()))
    print(json.dumps({'ok': ok, 'answers': r}))
    return ok


def leave(url):
    return leave_one(url, False) and leave_one(url, True) and stay(url)


def stay(url):
    """A stream read to its end is not a client that left."""
    before = metric(url, 'requests_client_closed_total') or 0
    status, body, _ = request(url, 'POST', '/v1/chat/completions', dict(CHAT, stream=True))
    after = metric(url, 'requests_client_closed_total') or 0
    ok = status == 200 and body.rstrip().endswith(b'[DONE]') and after == before
    print(json.dumps({'ok': ok, 'complete_stream': status, 'client_closed_before': before, 'after': after}))
    return ok


def leave_one(url, stream):
    before = metric(url, 'requests_client_closed_total') or 0
    h, p = hp(url)
    body = json.dumps({'messages': [{'role': 'user', 'content': 'Go on.'}], 'max_tokens': 100000,
                       'ignore_eos': True, 'stream': stream}).encode()
    s = socket.create_connection((h, p), timeout=5)
    s.sendall(f'POST /v1/chat/completions HTTP/1.1\r\nHost: {h}:{p}\r\nContent-Type: application/json\r\n'
              f'Content-Length: {len(body)}\r\n\r\n'.encode() + body)
    time.sleep(0.5)
    s.close()
    after, t0 = before, time.time()
    while time.time() - t0 < 10 and after == before:
        time.sleep(0.2)
        after = metric(url, 'requests_client_closed_total') or 0
    idle, t1 = False, time.time()   # the slot is freed too (its own 10 s)
    while time.time() - t1 < 10 and not idle:
        _, sl, _ = request(url, 'GET', '/slots')
        idle = not any(x.get('is_processing') for x in json.loads(sl))
        time.sleep(0.1)
    ok = after == before + 1 and idle
    print(json.dumps({'ok': ok, 'stream': stream, 'client_closed_before': before, 'after': after, 'slot_freed': idle,
                      'seconds': round(time.time() - t0, 2)}))
    return ok


def idle_socket(url, declared):
    h, p = hp(url)
    s = socket.create_connection((h, p), timeout=5)
    s.sendall(f'POST /v1/chat/completions HTTP/1.1\r\nHost: {h}:{p}\r\nContent-Type: application/json\r\n'
              f'Content-Length: {declared}\r\n\r\n'.encode())
    return s


def ready(url):
    return request(url, 'GET', '/ready')[0]


def budget(url):
    idle = [idle_socket(url, 8 << 20), idle_socket(url, 1 << 20)]
    time.sleep(0.3)
    try:
        chat = request(url, 'POST', '/v1/chat/completions', CHAT, timeout=20)
        tok = request(url, 'POST', '/tokenize', {'content': 'hello world'}, timeout=20)
    except OSError as e:   # blocked behind the idle sockets
        print(json.dumps({'ok': False, 'error': 'a POST got no answer while two sockets sat idle: ' + str(e)}))
        return False
    ready_idle = ready(url)
    # bodies that really take the budget (9 MiB with the default 8 MiB limit)
    full = [idle_socket(url, 8 << 20), idle_socket(url, 1 << 20)]
    full[0].sendall(b' ' * ((8 << 20) - 100))
    full[1].sendall(b' ' * ((1 << 20) - 100))
    ready_full, t0 = 200, time.time()
    while time.time() - t0 < 10 and ready_full == 200:
        time.sleep(0.1)
        ready_full = ready(url)
    for s in full + idle:
        s.close()
    ready_after, t0 = 503, time.time()
    while time.time() - t0 < 10 and ready_after != 200:
        time.sleep(0.1)
        ready_after = ready(url)
    ok = (chat[0] == 200 and tok[0] == 200 and chat[2] < BOUND and tok[2] < BOUND and ready_idle == 200 and
          ready_full == 503 and ready_after == 200)
    print(json.dumps({'ok': ok, 'chat': [chat[0], round(chat[2], 2)], 'tokenize': [tok[0], round(tok[2], 2)],
                      'ready_idle_sockets': ready_idle, 'ready_budget_spent': ready_full, 'ready_after': ready_after}))
    return ok


def stall(url):
    u = urlparse(url)
    body = json.dumps({'content': 'a' * 600000}).encode()
    hdr = (b'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
           b'Content-Length: %d\r\n\r\n' % len(body))
    holder = socket.create_connection((u.hostname, u.port))
    holder.sendall(hdr + body[:len(body) // 2])   # then nothing
    time.sleep(0.3)
    out = []

    def whole():
        t0 = time.time()
        try:
            st, _, _ = request(url, 'POST', '/tokenize', {'content': 'a' * 600000}, timeout=55)
        except OSError as e:
            st = repr(e)
        out.append((st, round(time.time() - t0, 1)))
    ts = [threading.Thread(target=whole) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    holder.settimeout(5)
    try:
        cut = holder.recv(100) == b''
    except OSError:
        cut = True
    holder.close()
    ok = len(out) == 3 and all(st == 200 and dt < 40 for st, dt in out) and cut
    print(json.dumps({'ok': ok, 'answers': sorted(out, key=lambda x: x[1]), 'holder_cut': cut}))
    return ok


def npredict(url, cap):
    st, body, _ = request(url, 'POST', '/v1/chat/completions',
                          {'messages': [{'role': 'user', 'content': 'Count.'}], 'max_tokens': -1, 'ignore_eos': True},
                          timeout=120)
    j = json.loads(body)
    big = json.loads(request(url, 'POST', '/v1/completions', {'prompt': 'a', 'max_tokens': 100000,
                                                                'ignore_eos': True}, timeout=120)[1])
    props = json.loads(request(url, 'GET', '/props')[1])
    got = j['usage']['completion_tokens'] if st == 200 else None
    ok = (st == 200 and got == cap and j['choices'][0]['finish_reason'] == 'length' and
          big['usage']['completion_tokens'] == cap and props['default_generation_settings']['n_predict'] == cap)
    print(json.dumps({'ok': ok, 'status': st, 'completion_tokens': got, 'completions_tokens':
                      big['usage']['completion_tokens'], 'props_n_predict': props['default_generation_settings']['n_predict']}))
    return ok


def worst_latency(url, stop, out):
    """/health and a chat request in turn until stop is set; the slowest of each into out."""
    while not stop.is_set():
        for name, (m, p, b) in (('health', ('GET', '/health', None)), ('chat', ('POST', '/v1/chat/completions', CHAT))):
            try:
                st, _, t = request(url, m, p, b, timeout=60)
            except Exception:
                st, t = 'error', 60
            out[name] = max(out.get(name, 0), t)
            if st != 200:
                out[name + '_bad'] = st
        time.sleep(0.1)


EMB = {'input': [[(i * 7 + j) % 200 + 10 for j in range(500)] for i in range(4)]}


def baseline(url):
    """The best of 3 plain chat requests on the idle server: the machine's speed now."""
    return min(request(url, 'POST', '/v1/chat/completions', CHAT)[2] for _ in range(3))


def embed(url):
    # a chat request runs a few passes, each waiting for the embedding rows beside it: on a
    # loaded machine (other builds) those take longer, so the chat bound is BOUND or 30 x an idle
    # chat request, whichever is more; /health is held to BOUND as it is
    chat_bound = max(BOUND, 30 * baseline(url))
    t0 = time.time()
    alone = request(url, 'POST', '/v1/embeddings', EMB, timeout=120)
    t_alone = time.time() - t0
    stop, lat = threading.Event(), {}
    mon = threading.Thread(target=worst_latency, args=(url, stop, lat))
    res = []
    big = [threading.Thread(target=lambda: res.append(request(url, 'POST', '/v1/embeddings', EMB, timeout=300)[0]))
           for _ in range(6)]
    for t in big: t.start()
    time.sleep(0.3)
    mon.start()
    for t in big: t.join()
    stop.set()
    mon.join()
    # a client that leaves: its work is cancelled, so a small request right after does not wait
    h, p = hp(url)
    body = json.dumps(EMB).encode()
    s = socket.create_connection((h, p), timeout=5)
    s.sendall(f'POST /v1/embeddings HTTP/1.1\r\nHost: {h}:{p}\r\nContent-Type: application/json\r\n'
              f'Content-Length: {len(body)}\r\n\r\n'.encode() + body)
    time.sleep(0.5)
    s.close()
    time.sleep(0.2)
    small = request(url, 'POST', '/v1/embeddings', {'input': 'hello'}, timeout=120)
    ok = (alone[0] == 200 and res == [200] * 6 and 'health_bad' not in lat and 'chat_bad' not in lat and
          lat.get('health', 99) < BOUND and lat.get('chat', 99) < chat_bound and small[0] == 200 and
          small[2] < t_alone / 2)
    print(json.dumps({'ok': ok, 'one_request_s': round(t_alone, 2), 'worst_health_s': round(lat.get('health', -1), 2),
                      'worst_chat_s': round(lat.get('chat', -1), 2), 'statuses': res,
                      'after_leaving_s': round(small[2], 2), 'bound_s': BOUND, 'chat_bound_s': round(chat_bound, 2)}))
    return ok


def png(w, h):
    """A w x h RGB PNG of black pixels: a few hundred KB for 8192 x 8192."""
    def chunk(kind, data):
        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)
    z = zlib.compressobj(9)
    row = b'\0' * (1 + 3 * w)
    idat = b''.join(z.compress(row) for _ in range(h)) + z.flush()
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', idat) +
            chunk(b'IEND', b''))


def image(url, pid):
    import base64
    data = png(8192, 8192)
    msg = {'max_tokens': 2, 'messages': [{'role': 'user', 'content': [
        {'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,' + base64.b64encode(data).decode()}},
        {'type': 'text', 'text': 'What is it?'}]}]}
    hwm0 = status_kb(pid, 'VmHWM:')
    st, body, t = request(url, 'POST', '/v1/chat/completions', msg)
    hwm1 = status_kb(pid, 'VmHWM:')
    stop, lat = threading.Event(), {}

    def loop():
        while not stop.is_set():
            request(url, 'POST', '/v1/chat/completions', msg, timeout=60)
    clients = [threading.Thread(target=loop) for _ in range(4)]
    for c in clients: c.start()
    worst, t0 = 0.0, time.time()
    while time.time() - t0 < 6:
        worst = max(worst, request(url, 'GET', '/health', timeout=60)[2])
        time.sleep(0.1)
    stop.set()
    for c in clients: c.join()
    ok = (st == 400 and b'exceed_context_size_error' in body and t < BOUND / 2 and hwm1 - hwm0 < 64 * 1024 and worst < BOUND)
    print(json.dumps({'ok': ok, 'png_kb': len(data) // 1024, 'status': st, 'seconds': round(t, 3),
                      'peak_rss_growth_mb': round((hwm1 - hwm0) / 1024, 1), 'worst_health_s': round(worst, 3),
                      'answer': body.decode()[:160]}))
    return ok


def settled_rss(pid):
    """RSS once the answer's buffers are gone (MHD frees a reply after its last byte): the least
    of 1 s of samples."""
    least, t0 = status_kb(pid, 'VmRSS:'), time.time()
    while time.time() - t0 < 1:
        time.sleep(0.1)
        least = min(least, status_kb(pid, 'VmRSS:'))
    return least


def rss(url, pid):
    idle = settled_rss(pid)
    big = {'messages': [{'role': 'user', 'content': 'Tell me a story.'}], 'n': 16, 'max_tokens': 100000,
           'logprobs': True, 'top_logprobs': 20, 'ignore_eos': True}
    try:   # before the limit this generated 16 x 100000 tokens (with --context-shift)
        refused = request(url, 'POST', '/v1/chat/completions', big, timeout=60)
    except OSError as e:
        print(json.dumps({'ok': False, 'error': 'n 16 x 100000 tokens x top_logprobs 20 was not refused: ' + str(e)}))
        return False
    ok_big = dict(big, max_tokens=200)   # 16 x 200 x 21 = 67k logprob entries: under the limit
    after = []
    for _ in range(2):
        st, body, _ = request(url, 'POST', '/v1/chat/completions', ok_big, timeout=600)
        after.append((st, len(body), settled_rss(pid)))
    text = 'hello world ' * ((7 << 20) // 12 + 1)
    st_t, body_t, _ = request(url, 'POST', '/tokenize', {'content': text[:7 << 20], 'with_pieces': True}, timeout=300)
    after.append((st_t, len(body_t), settled_rss(pid)))
    peak = status_kb(pid, 'VmHWM:')
    bound = idle + 48 * 1024
    ok = (refused[0] == 400 and b'logprobs' in refused[1] and all(a[0] == 200 for a in after) and
          all(a[2] < bound for a in after))
    print(json.dumps({'ok': ok, 'idle_rss_mb': round(idle / 1024, 1), 'refused': refused[0],
                      'after': [{'status': a[0], 'reply_mb': round(a[1] / 2**20, 1), 'rss_mb': round(a[2] / 1024, 1)}
                                for a in after],
                      'peak_rss_mb': round(peak / 1024, 1), 'bound_mb': round(bound / 1024, 1)}))
    return ok


if __name__ == '__main__':
    mode, args = sys.argv[1], sys.argv[2:]
    fn = {'framing': framing, 'leave': leave, 'budget': budget, 'stall': stall, 'npredict': lambda u, c: npredict(u, int(c)),
          'embed': embed, 'image': lambda u, p: image(u, int(p)), 'rss': lambda u, p: rss(u, int(p))}[mode]
    sys.exit(0 if fn(*args) else 1)
