"""test_server_stream_chunks.py: a stream with logprobs read late (the whole answer generated
before the client reads, past what the sockets buffer) comes as events of at most 256 tokens'
logprobs each, never one event of everything (server_reply.c: each read is built under the
task's lock and in memory); the events together carry every token's logprob once, the text of
the answer, and the same logprobs as the answer without streaming, for /v1/completions and
/v1/chat/completions."""
import json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, TINY, Replica, check, finish, jbody, raw_post, request, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
W = workdir('chunks')
N = 3000   # with the top 20 of each: about 3 KB a token, more than the sockets' buffers hold


def late_stream(port, path, body, wait):
    """POST a stream, read nothing for `wait` seconds, then everything: the data events."""
    s = raw_post(port, path, dict(body, stream=True), rcvbuf=4096)   # a small window: the server's writes stall
    time.sleep(wait)
    raw = b''
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        raw += chunk
    s.close()
    body = raw.split(b'\r\n\r\n', 1)[1]
    # chunked transfer: the event lines survive the chunk framing except where a chunk boundary
    # cuts one; join the chunks first
    out, rest = b'', body
    while rest:
        size_line, _, rest = rest.partition(b'\r\n')
        size = int(size_line.split(b';')[0], 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2:]
    return [json.loads(line[6:]) for line in out.split(b'\n') if line.startswith(b'data: {')]


srv = Replica(W, 'chunks', ['-m', TINY, '-t', '1', '--ctx', '4096', '-np', '1']).start().wait_ready()
P = srv.port
try:
    base = {'max_tokens': N, 'ignore_eos': True, 'temperature': 0, 'logprobs': True}
    for path, body, entries in [
            ('/v1/completions', dict(base, prompt='Once upon a time', logprobs=5),
             lambda e: (e['choices'][0].get('logprobs') or {}).get('tokens') or []),
            ('/v1/chat/completions', dict(base, messages=[{'role': 'user', 'content': 'Tell me a story.'}], top_logprobs=20),
             lambda e: ((e['choices'][0].get('logprobs') or {}).get('content') or []) if e.get('choices') else [])]:
        events = late_stream(P, path, body, 1.5)
        sizes = [len(entries(e)) for e in events]
        check(sum(sizes) == N and max(sizes) <= 256 and sum(1 for n in sizes if n) >= 3,
              f'{path}: a stream read late comes in events of at most 256 tokens', f'{sizes[:12]} sum {sum(sizes)}')
        st, _, d = request(P, 'POST', path, body, timeout=120)
        whole = jbody(d)
        if path == '/v1/completions':
            want_text, want_lp = whole['choices'][0]['text'], whole['choices'][0]['logprobs']['token_logprobs']
            got_text = ''.join(e['choices'][0].get('text') or '' for e in events)
            got_lp = [x for e in events for x in ((e['choices'][0].get('logprobs') or {}).get('token_logprobs') or [])]
        else:
            msg = whole['choices'][0]['message']
            want_text = (msg.get('reasoning_content') or '') + (msg.get('content') or '')
            want_lp = [x['logprob'] for x in whole['choices'][0]['logprobs']['content']]
            got_text = ''.join((e['choices'][0]['delta'].get('reasoning_content') or '') +
                               (e['choices'][0]['delta'].get('content') or '') for e in events if e.get('choices'))
            got_lp = [x['logprob'] for e in events for x in entries(e)]
        check(st == 200 and got_text == want_text and got_lp == want_lp,
              f'{path}: the same text and logprobs as without streaming', f'{len(got_text)} / {len(want_text)} chars')
finally:
    srv.stop()
finish()
