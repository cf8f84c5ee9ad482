"""server_hostile.py: hostile clients against a running bitspark serve (loopback only), for
tests/test_server_hostile.sh. Prints one JSON line; exit status 0 when the checks hold.

  memory URL PID N      N concurrent 8 MB chat bodies ("hello world " x 690k): every answer
                        must be a 400 and the server's peak RSS (VmHWM) stay under
                        2 x its idle RSS + 64 MiB
  slowloris URL N SECS  N connections dripping one header line every 2 s for SECS seconds
                        (reconnecting when the server drops them); meanwhile /health every
                        0.25 s must answer 200 in < 1 s and chat requests must complete
"""
import http.client, json, socket, subprocess, sys, threading, time
from urllib.parse import urlparse


def status_kb(pid, field):
    for line in open(f'/proc/{pid}/status'):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def post(host, port, path, body, timeout=60):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    c.request('POST', path, body=body, headers={'Content-Type': 'application/json'})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def memory(url, pid, n):
    u = urlparse(url)
    body = json.dumps({'messages': [{'role': 'user', 'content': 'hello world ' * 690000}]}).encode()
    idle = status_kb(pid, 'VmRSS:')
    codes, lock = [], threading.Lock()

    def one():
        try:
            st, data = post(u.hostname, u.port, '/v1/chat/completions', body)
        except Exception as e:
            st, data = str(e), b''
        with lock:
            codes.append((st, data.decode(errors='replace')))

    t0 = time.time()
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    peak = status_kb(pid, 'VmHWM:')
    bound = 2 * idle + 64 * 1024
    ok = all(c[0] == 400 and 'exceed_context_size_error' in c[1] for c in codes) and len(codes) == n and peak < bound
    print(json.dumps({'ok': ok, 'requests': n, 'body_mb': round(len(body) / 2**20, 1), 'idle_rss_mb': round(idle / 1024, 1),
                      'peak_rss_mb': round(peak / 1024, 1), 'bound_mb': round(bound / 1024, 1),
                      'seconds': round(time.time() - t0, 2), 'statuses': sorted(set(str(c[0]) for c in codes)),
                      'first': codes[0][1][:160] if codes else ''}))
    return ok


def slowloris(url, n, secs):
    u = urlparse(url)
    stop = time.time() + secs
    socks, dropped, refused = [], [0], [0]

    def connect():
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((u.hostname, u.port))
            s.sendall(f'GET /health HTTP/1.1\r\nHost: 127.0.0.1:{u.port}\r\n'.encode())
            s.setblocking(False)
            return s
        except OSError:
            refused[0] += 1
            s.close()
            return None

    for _ in range(n):
        s = connect()
        if s: socks.append(s)
    opened = len(socks)
    lat, errors, chats = [], [], []

    def prober():
        # curl in its own process measures the server, not this script's threads (GIL)
        while time.time() < stop:
            p = subprocess.run(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code} %{time_total}', '--max-time', '5',
                                f'{url}/health'], capture_output=True, text=True)
            code, _, secs_ = p.stdout.partition(' ')
            if code != '200': errors.append(code or p.returncode)
            lat.append(float(secs_) if secs_ else 5.0)
            time.sleep(0.25)

    def chatter():
        while time.time() < stop:
            try:
                st, data = post(u.hostname, u.port, '/v1/chat/completions',
                                json.dumps({'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}).encode(), 30)
                chats.append(st == 200 and b'"completion_tokens":' in data)
            except Exception as e:
                chats.append(False)
            time.sleep(1)

    th = [threading.Thread(target=prober), threading.Thread(target=chatter)]
    for t in th: t.start()
    k = 0
    while time.time() < stop:
        time.sleep(2)
        k += 1
        for i, s in enumerate(socks):
            alive = s is not None
            if alive:
                try:
                    if s.recv(4096) == b'': alive = False   # closed by the server
                except BlockingIOError:
                    pass
                except OSError:
                    alive = False
            if alive:
                try:
                    s.send(f'X-Drip-{k}: {"a" * 20}\r\n'.encode())
                except OSError:
                    alive = False
            if not alive:
                if s is not None:
                    dropped[0] += 1
                    s.close()
                socks[i] = connect()          # a real attacker reconnects at once
    for t in th: t.join()
    for s in socks:
        if s: s.close()
    mx = max(lat) if lat else 99
    ok = opened == n and not errors and mx < 1.0 and chats and all(chats) and dropped[0] >= n
    print(json.dumps({'ok': ok, 'slow_connections': n, 'opened': opened, 'refused': refused[0], 'seconds': secs,
                      'health_probes': len(lat), 'health_max_ms': round(mx * 1000, 1),
                      'health_median_ms': round(sorted(lat)[len(lat) // 2] * 1000, 1) if lat else None,
                      'health_errors': errors[:3], 'chats': len(chats), 'chats_ok': sum(chats),
                      'dropped_by_deadline': dropped[0]}))
    return ok


if __name__ == '__main__':
    mode = sys.argv[1]
    if mode == 'memory':
        ok = memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        ok = slowloris(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    sys.exit(0 if ok else 1)
