"""test_server_queue.py: the queue of `bitspark serve` never lets one waiting request hold up the
others (server_sched.c, take_queued):
- a request pinned to a busy slot ("id_slot") waits for it, while a request behind it runs at
  once on the idle slot (llama-server defers the first one the same way);
- requests whose clients went away while queued leave the queue: they no longer count against
  --queue, so /ready and new requests are served while the running request still runs;
- the pinned request runs once its slot frees.
Order, not time, is checked: each "while" is that the long request is still in its slot when the
other answer comes (it generates thousands of tokens; the others one)."""
import os, socket, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, Replica, check, finish, jbody, metrics, raw_post, request, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
W = workdir('queue')
LONG = {'prompt': 'Count: one two three', 'max_tokens': 8000, 'ignore_eos': True, 'temperature': 0, 'id_slot': 0,
        'stream': True}


def post(port, body):
    st, _, d = request(port, 'POST', '/v1/completions', body, timeout=300)
    return st, jbody(d)


def busy(port, i):
    return jbody(request(port, 'GET', '/slots')[2])[i]['is_processing']


def wait_for(pred, secs=30):
    t = time.time() + secs
    while time.time() < t:
        if pred():
            return True
        time.sleep(0.01)
    return False


def open_stream(port, body):
    """The long request on a connection of our own: its first event read (it runs), the rest read
    and dropped by a thread (the stream never waits on us) until the caller closes the socket (its
    client goes away: the server cancels it)."""
    s = raw_post(port, '/v1/completions', body)
    head = b''
    while b'data: ' not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk

    def drain():
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    return s, int(head.split(b' ')[1]) if head.startswith(b'HTTP/1.1 ') else 0


# a model wide enough that the long request takes seconds (about 1 ms a token on one thread)
MED = os.path.join(W, 'med.gguf')
subprocess.run([B, 'synth', '--preset', 'tiny', '--type', 'q1_0', '--n-layer', '8', '--n-embd', '1024', '--n-ff', '4096',
                '--n-head', '8', '--n-head-kv', '2', '--head-dim', '128', '--n-vocab', '8192', '-o', MED],
               check=True, capture_output=True)
srv = Replica(W, 'queue', ['-m', MED, '-t', '1', '--ctx', '8192', '-np', '2', '--queue', '2']).start().wait_ready()
P = srv.port
try:
    a, st = open_stream(P, LONG)
    check(st == 200 and busy(P, 0), 'a long request runs in slot 0')
    res = {}
    pinned = threading.Thread(target=lambda: res.update(b=post(P, {'prompt': 'pinned', 'max_tokens': 1, 'id_slot': 0})))
    pinned.start()
    check(wait_for(lambda: metrics(P).get('llamacpp:requests_deferred', 0) >= 1), 'a request pinned to slot 0 waits')
    st, j = post(P, {'prompt': 'free', 'max_tokens': 1})
    check(st == 200 and busy(P, 0) and pinned.is_alive(),
          'a request behind it runs on the idle slot while the pinned one waits', f'{st} {busy(P, 0)}')

    # fill the queue (--queue 2 past the idle slot), then let those clients go; slot 1 counts as
    # idle once its answer is published, a moment after the answer reached us
    wait_for(lambda: not busy(P, 1))
    gone = [raw_post(P, '/v1/completions', {'prompt': f'gone {i}', 'max_tokens': 1, 'id_slot': 0}) for i in range(2)]
    check(wait_for(lambda: metrics(P).get('llamacpp:requests_deferred', 0) == 3), 'two more pinned requests wait')
    check(wait_for(lambda: request(P, 'GET', '/ready')[0] == 503), 'the full queue: /ready is 503')
    st, j = post(P, {'prompt': 'refused', 'max_tokens': 1})
    check(st == 503, 'the full queue: a new request is 503', f'{st} {j}')
    for s in gone:
        s.close()
    check(wait_for(lambda: request(P, 'GET', '/ready')[0] == 200, 10) and busy(P, 0),
          'clients gone from the queue: /ready is 200 while the long request still runs')
    st, j = post(P, {'prompt': 'after', 'max_tokens': 1})
    check(st == 200 and busy(P, 0), 'and a new request is served meanwhile', f'{st} {j}')

    a.shutdown(socket.SHUT_RDWR)
    a.close()   # the long request's client goes: its slot frees and the pinned request runs
    pinned.join(120)
    b = res.get('b', (0, None))
    check(b[0] == 200, 'the pinned request runs once slot 0 frees', str(b))
    check(wait_for(lambda: not busy(P, 0) and not busy(P, 1)), 'every slot idle afterwards')
finally:
    srv.stop()
finish()
