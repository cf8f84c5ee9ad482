"""replica_lib.py: what tests/test_server_lifecycle.py and tests/test_server_replicas.py share:
start `bitspark serve` replicas on loopback (log in a file, the port read from it), plain HTTP
requests with their headers, a Server-Sent Events reader that reports how a stream ended, and
ok / bad reporting. Needs BITSPARK (ctest sets it, with BS_TMP and BS_SRC)."""
import http.client, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

B = os.environ.get('BITSPARK')
SRC = os.environ.get('BS_SRC') or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TMP = os.environ.get('BS_TMP') or '/tmp'
TINY = os.path.join(SRC, 'models', 'bonsai-tiny-q1_0.gguf')
SKIP = 77
H = {'Content-Type': 'application/json'}
failures = []
workdirs = []   # removed by finish() when every check passed (kept to read the logs otherwise)


def ok(msg):
    print('ok   ' + msg, flush=True)


def bad(msg):
    print('FAIL ' + msg, flush=True)
    failures.append(msg)


def check(cond, msg, detail=''):
    (ok if cond else bad)(msg if cond or not detail else f'{msg}: {detail}')
    return cond


def finish():
    if not failures:
        for d in workdirs:
            shutil.rmtree(d, ignore_errors=True)
    print('all passed' if not failures else f'{len(failures)} checks failed', flush=True)
    sys.exit(1 if failures else 0)


def sanitized():
    """An ASan build runs the same checks on less traffic (it is several times slower)."""
    try:
        return b'__asan_init' in open(B, 'rb').read()
    except OSError:
        return False


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Replica:
    """One `bitspark serve` process. start() returns once its log names the port (the listener is
    open, the model maybe still loading); wait_ready() once it says 'listening on'."""

    def __init__(self, workdir, name, args, port=0):
        self.name, self.args, self.port = name, list(args), port
        self.log_path = os.path.join(workdir, f'{name}.log')
        self.proc = None
        self.starts = 0

    def start(self, timeout=60):
        self.starts += 1
        self.logf = open(self.log_path, 'a')
        self.logf.write(f'--- start {self.starts}\n')
        self.logf.flush()
        self.log_from = os.path.getsize(self.log_path)
        self.proc = subprocess.Popen([B, 'serve', '--port', str(self.port)] + self.args, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < timeout:
            m = re.search(r'health: http://[^:]+:(\d+)/health', self.log())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.002)
        raise RuntimeError(f'{self.name} did not start: {self.log()}')

    def log(self):
        with open(self.log_path) as f:
            f.seek(self.log_from)
            return f.read()

    def ready(self):
        return 'listening on' in self.log()

    def wait_ready(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.ready():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise RuntimeError(f'{self.name} did not become ready: {self.log()}')

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(5) is None:
                self.proc.send_signal(signal.SIGTERM)   # the second one cancels what still runs
                if self.wait(5) is None:
                    self.proc.kill()
                    self.proc.wait()
        if self.proc:
            self.logf.close()


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers as a dict with lower-case names, body bytes); status 0 on a failed
    connection (body: the error)."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        c.request(method, path, body=data, headers=dict(H, **(headers or {})))
        r = c.getresponse()
        d = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, d
    except (OSError, http.client.HTTPException) as e:
        return 0, {}, str(e).encode()
    finally:
        c.close()


def raw_post(port, path, body, rcvbuf=0):
    """POST body (JSON) on a socket of the caller's own, returned unread: the caller decides when
    to read (the server closes it after the answer) or to go away. rcvbuf: a receive buffer that
    small (the server's writes then stall)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(('127.0.0.1', port))
    data = json.dumps(body).encode()
    s.sendall(b'POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n'
              b'Content-Length: %d\r\n\r\n%s' % (path.encode(), len(data), data))
    return s


def jbody(d):
    try:
        return json.loads(d)
    except ValueError:
        return None


def stream(port, path, body, headers=None, timeout=60, on_open=None):
    """POST a streaming request and read its events. Returns a dict: status, headers, events (the
    JSON of each data: line), done (saw data: [DONE]), cut (the connection ended without it:
    a replica killed mid-stream), error (a socket error or timeout), text (content deltas)."""
    out = {'status': 0, 'headers': {}, 'events': [], 'done': False, 'cut': False, 'error': None, 'text': ''}
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        c.request('POST', path, body=json.dumps(dict(body, stream=True)).encode(), headers=dict(H, **(headers or {})))
        r = c.getresponse()
        out['status'], out['headers'] = r.status, {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            out['body'] = r.read()
            return out
        if on_open:
            on_open()
        while True:
            line = r.readline()
            if not line:
                out['cut'] = True
                break
            line = line.strip()
            if not line.startswith(b'data: '):
                continue
            if line == b'data: [DONE]':
                out['done'] = True
                break
            ev = jbody(line[6:])
            if ev is None:
                out['cut'] = True
                break
            out['events'].append(ev)
            for ch in ev.get('choices') or []:
                out['text'] += (ch.get('delta') or {}).get('content') or ch.get('text') or ''
    except (OSError, http.client.HTTPException) as e:
        out['error'] = str(e) or type(e).__name__
        out['cut'] = True
    finally:
        c.close()
    return out


def finish_reason(st):
    """The finish_reason of a stream's last choice that has one (None: none came)."""
    for ev in reversed(st['events']):
        for ch in ev.get('choices') or []:
            if ch.get('finish_reason'):
                return ch['finish_reason']
    return None


def metrics(port):
    """/metrics as {name (with labels): value}."""
    st, _, d = request(port, 'GET', '/metrics')
    m = {}
    for line in d.decode(errors='replace').splitlines():
        if line and not line.startswith('#'):
            k, _, v = line.rpartition(' ')
            m[k] = float(v)
    return m


def workdir(tag):
    os.makedirs(TMP, exist_ok=True)
    d = tempfile.mkdtemp(prefix=f'{tag}.', dir=TMP)
    workdirs.append(d)
    return d
