"""test_server_slots.py: llama-server's slot persistence on `bitspark serve` (server_slots.c):
- POST /slots/{id}?action=save|restore|erase with {"filename"} under --slot-save-path: the
  answers' shapes (id_slot, filename, n_saved / n_restored, n_written / n_read, timings,
  n_erased), the file in the directory and no temporary left beside it;
- restored bit-exactly: a slot saved, erased, used for another prompt and restored continues a
  conversation with the same tokens and the same logprobs (to the last bit of the printed
  numbers) as a slot that was never interrupted, and it serves the saved prefix from its cache;
- "id_slot" in requests: that slot takes the request (its cache shows it);
- bad input: names with '/', "..", a leading '.', no name, a missing file, a damaged file, a
  header that lies about sizes, a FIFO or a link, a file of another model of the same shapes,
  an unknown action or slot: 400 (a refused restore leaves the slot as it was); without
  --slot-save-path 501; --no-slots: GET /slots 501;
- GET /slots: id_task, speculative, and the running or last task's params and next_token
  (n_decoded, n_remain, has_next_token, has_new_line) as the slot runs it (--n-predict, --keep);
  ?fail_on_no_slot=1 (any value) is 503 while no slot is idle."""
import os, struct, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, TINY, Replica, check, finish, jbody, request, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
W = workdir('slots')
SAVE = os.path.join(W, 'saved')
os.makedirs(SAVE)


def post(port, path, body):
    st, _, d = request(port, 'POST', path, body)
    return st, jbody(d)


def slots(port):
    """/slots once no slot is processing (a slot publishes its state just after the answer)."""
    for _ in range(200):
        j = jbody(request(port, 'GET', '/slots')[2])
        if not any(x['is_processing'] for x in j):
            return j
        time.sleep(0.01)
    return j


def complete(port, prompt, slot, n=6):
    """Greedy completion with the top-5 logprobs of every token, on slot `slot`."""
    st, j = post(port, '/v1/completions', {'prompt': prompt, 'max_tokens': n, 'temperature': 0, 'logprobs': 5,
                                           'id_slot': slot})
    if st != 200:
        return None, None, st, j
    c = j['choices'][0]
    return c['text'], c['logprobs'], j['timings']['cache_n'], j


srv = Replica(W, 'slots', ['-m', TINY, '-np', '2', '-t', '2', '--ctx', '512', '--slot-save-path', SAVE]).start().wait_ready()
P = srv.port
try:
    # the conversation's first turn, on both slots: 0 will be saved and interrupted, 1 not
    first = 'The quick brown fox jumps over the lazy dog. Once upon a time'
    t0, lp0, _, _ = complete(P, first, 0)
    t1, lp1, _, _ = complete(P, first, 1)
    check(t0 is not None and t0 == t1 and lp0 == lp1, 'the same first turn on slots 0 and 1', f'{t0!r} {t1!r}')
    n0 = slots(P)[0]['n_cached']

    st, j = post(P, '/slots/0?action=save', {'filename': 'conv.bin'})
    check(st == 200 and j.get('id_slot') == 0 and j.get('filename') == 'conv.bin' and j.get('n_saved') == n0 and
          j.get('n_written', 0) > 0 and 'save_ms' in j.get('timings', {}), 'save: llama-server\'s answer', f'{st} {j}')
    path = os.path.join(SAVE, 'conv.bin')
    check(os.path.isfile(path) and os.path.getsize(path) == j.get('n_written'), 'save: the file holds n_written bytes')
    check(sorted(os.listdir(SAVE)) == ['conv.bin'], 'save: no temporary file left', str(os.listdir(SAVE)))

    st, j = post(P, '/slots/0?action=erase', {})
    check(st == 200 and j == {'id_slot': 0, 'n_erased': n0}, 'erase: n_erased', f'{st} {j}')
    check(slots(P)[0]['n_cached'] == 0, 'erase: the slot holds nothing')

    other, _, _, _ = complete(P, 'A completely different text about numbers: 1 2 3', 0)
    check(other is not None, 'slot 0 serves another prompt in between')

    st, j = post(P, '/slots/0?action=restore', {'filename': 'conv.bin'})
    check(st == 200 and j.get('id_slot') == 0 and j.get('n_restored') == n0 and
          j.get('n_read') == os.path.getsize(path) and 'restore_ms' in j.get('timings', {}),
          'restore: llama-server\'s answer', f'{st} {j}')
    check(slots(P)[0]['n_cached'] == n0, 'restore: the slot holds the saved tokens again', str(slots(P)))

    # the second turn: restored slot 0 and never-interrupted slot 1 must agree bit for bit
    second = first + t0 + ' and then'
    a, lpa, cache_a, _ = complete(P, second, 0, 8)
    b, lpb, cache_b, _ = complete(P, second, 1, 8)
    check(a is not None and a == b, 'the continuation after restore is the uninterrupted one', f'{a!r} vs {b!r}')
    check(lpa is not None and lpa == lpb, 'its logprobs are identical (the state was restored bit-exactly)')
    check(cache_a == cache_b and cache_a >= n0 - 1, 'the restored prefix came from the cache',
          f'cache_n {cache_a} vs {cache_b}, saved {n0}')

    # restore into the other slot: the same again (a slot file is not tied to its slot)
    st, j = post(P, '/slots/1?action=restore', {'filename': 'conv.bin'})
    check(st == 200 and j.get('id_slot') == 1, 'restore into another slot')

    # bad input
    for name in ['../conv.bin', 'a/b', '..', '.hidden', '', 'x\ny', 7, None]:
        st, j = post(P, '/slots/0?action=save', {'filename': name} if name is not None else {})
        check(st == 400 and 'filename' in j['error']['message'].lower(), f'filename {name!r}: 400', f'{st} {j}')
    check(not os.path.exists(os.path.join(W, 'conv.bin')), 'nothing was written outside the directory')
    held = slots(P)[0]['n_cached']
    st, j = post(P, '/slots/0?action=restore', {'filename': 'missing.bin'})
    check(st == 400, 'restore of a missing file: 400', f'{st} {j}')
    with open(os.path.join(SAVE, 'junk.bin'), 'wb') as f:
        f.write(b'BSSLOT1\n' + b'\xff' * 100)
    st, j = post(P, '/slots/0?action=restore', {'filename': 'junk.bin'})
    check(st == 400, 'restore of a damaged file: 400', f'{st} {j}')
    with open(path, 'rb') as f:
        data = f.read()
    with open(os.path.join(SAVE, 'cut.bin'), 'wb') as f:
        f.write(data[:len(data) // 2])
    st, j = post(P, '/slots/0?action=restore', {'filename': 'cut.bin'})
    check(st == 400, 'restore of a truncated file: 400', f'{st} {j}')
    check(slots(P)[0]['n_cached'] == held, 'a refused restore leaves the slot as it was', f'{slots(P)} vs {held}')
    # a header that lies about its sizes (more tokens than the file holds, a state length that
    # wraps): refused before anything past it is read (it used to read past its buffer)
    n_lora = struct.unpack_from('<I', data, 16)[0]
    hs = 24 + 4 * n_lora + 8
    lie = bytearray(data[:hs])
    struct.pack_into('<I', lie, 12, 500)
    struct.pack_into('<Q', lie, hs - 8, (1 << 64) - 2000)
    with open(os.path.join(SAVE, 'lie.bin'), 'wb') as f:
        f.write(bytes(lie))
    st, j = post(P, '/slots/0?action=restore', {'filename': 'lie.bin'})
    check(st == 400 and 'damaged' in j['error']['message'], 'restore of a file whose header lies about sizes: 400', f'{st} {j}')
    # a FIFO or a link in the directory is no slot file (a FIFO would block the scheduler)
    os.mkfifo(os.path.join(SAVE, 'fifo'))
    os.symlink(path, os.path.join(SAVE, 'link.bin'))
    for name in ['fifo', 'link.bin']:
        st, _, d = request(P, 'POST', '/slots/0?action=restore', {'filename': name}, timeout=10)
        check(st == 400, f'restore of {name}: 400 at once', f'{st} {d[:200]}')
    check(slots(P)[0]['n_cached'] == held, 'the refused restores left the slot as it was', f'{slots(P)} vs {held}')
    st, j = post(P, '/slots/0?action=fly', {'filename': 'x'})
    check(st == 400 and 'action' in j['error']['message'].lower(), 'unknown action: 400', f'{st} {j}')
    st, j = post(P, '/slots/7?action=save', {'filename': 'x'})
    check(st == 400 and 'slot' in j['error']['message'].lower(), 'unknown slot: 400', f'{st} {j}')
    st, j = post(P, '/slots/x?action=save', {'filename': 'x'})
    check(st == 400, 'a slot id that is no number: 400', f'{st} {j}')
    st, j = post(P, '/v1/completions', {'prompt': 'hi', 'max_tokens': 1, 'id_slot': 2})
    check(st == 400 and 'id_slot' in j['error']['message'], 'id_slot past the slots: 400', f'{st} {j}')
    st, j = post(P, '/v1/completions', {'prompt': 'hi', 'max_tokens': 1, 'id_slot': 'a'})
    check(st == 400, 'id_slot not a number: 400', f'{st} {j}')

    # an action on a busy slot waits for its generation to end (it never races it)
    res = {}
    gen = threading.Thread(target=lambda: res.update(g=post(P, '/v1/completions', {
        'prompt': 'Count: one two three', 'max_tokens': 400, 'ignore_eos': True, 'temperature': 0, 'id_slot': 0})))
    gen.start()
    for _ in range(500):
        if jbody(request(P, 'GET', '/slots')[2])[0]['is_processing']:
            break
        time.sleep(0.002)
    st, j = post(P, '/slots/0?action=save', {'filename': 'busy.bin'})
    gen.join(120)
    g = res.get('g', (0, None))
    check(st == 200 and g[0] == 200 and j['n_saved'] >= g[1]['usage']['prompt_tokens'] + 400 - 1,
          'a save on a busy slot waits and saves the finished generation', f'{st} {j} {g[0]}')

    # id_slot: the request goes to the named slot
    post(P, '/slots/1?action=erase', {})
    post(P, '/slots/0?action=erase', {})
    complete(P, 'Slot one only, please.', 1)
    sl = slots(P)
    check(sl[0]['n_cached'] == 0 and sl[1]['n_cached'] > 0, 'id_slot 1 is served by slot 1', str(sl))
    st, _ = post(P, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 2,
                                             'id_slot': 0})
    check(st == 200 and slots(P)[0]['n_cached'] > 0, 'id_slot in chat requests too')
finally:
    srv.stop()

# a file saved by another model of the same shapes (the ternary twin) is refused, and the slot
# keeps what it held: states name their model by a fingerprint of its file
Q2 = os.path.join(os.path.dirname(TINY), 'bonsai-tiny-q2_0.gguf')
other = Replica(W, 'other', ['-m', Q2, '-np', '1', '-t', '1', '--ctx', '512', '--slot-save-path', SAVE,
                              '--n-predict', '450', '--keep', '4']).start().wait_ready()
try:
    fresh = slots(other.port)[0]
    check(fresh['id_task'] == -1 and 'params' not in fresh and fresh['speculative'] is False,
          'GET /slots before any task: id_task -1, no params', str(fresh))
    # GET /slots?fail_on_no_slot=1: 503 while the only slot is busy, 200 once idle; the busy slot
    # shows its task's params and progress (next_token), and keeps them once done
    res = {}
    gen = threading.Thread(target=lambda: res.update(g=post(other.port, '/v1/completions', {
        'prompt': 'Count: one two three', 'max_tokens': 400, 'ignore_eos': True, 'temperature': 0})))
    gen.start()
    busy_st, seen = None, None
    for k in range(20000):   # any value asks (llama-server's rule)
        if request(other.port, 'GET', '/slots?fail_on_no_slot=' + ('1' if k % 2 else 'true'))[0] == 503:
            busy_st = 503
        j = jbody(request(other.port, 'GET', '/slots')[2])[0]
        if j['is_processing'] and j.get('next_token', [{}])[0].get('n_decoded', 0) > 0:
            seen = j
        if (busy_st and seen) or not gen.is_alive():
            break
    gen.join(120)
    done = slots(other.port)[0]
    st_idle = request(other.port, 'GET', '/slots?fail_on_no_slot=1')[0]
    check(busy_st == 503 and st_idle == 200, 'fail_on_no_slot=1: 503 while the slot is busy, 200 when idle',
          f'{busy_st} {st_idle}')
    check(seen is not None and seen['params']['n_predict'] == 400 and seen['params']['temperature'] == 0 and
          seen['next_token'][0]['has_next_token'] and 0 < seen['next_token'][0]['n_remain'] < 400,
          'a busy slot: its task\'s params and next_token', str(seen))
    nt = done.get('next_token', [{}])[0]
    check(seen is not None and done['id_task'] == seen['id_task'] and nt.get('n_decoded') == 400 and
          nt.get('n_remain') == 0 and nt.get('has_next_token') is False and done['params']['ignore_eos'] is True,
          'the slot keeps its last task\'s params and progress', str(done))
    text = res.get('g', (0, {}))[1]['choices'][0]['text'] if res.get('g', (0,))[0] == 200 else None
    check(done['params']['n_keep'] == 4 and text is not None and
          done.get('next_token', [{}])[0].get('has_new_line') is ('\n' in text),
          'params.n_keep is --keep; has_new_line says whether the text has a newline', str(done))
    # what the slot runs with: max_tokens past --n-predict shows the cap; a newline anywhere in
    # the answer is has_new_line
    st, j = post(other.port, '/completion', {'prompt': 'x', 'n_predict': 1000, 'grammar': 'root ::= "one\\ntwo three"',
                                             'temperature': 0})
    capped = slots(other.port)[0]
    check(st == 200 and capped['params']['n_predict'] == 450 and capped['id_task'] > done['id_task'] and
          capped['next_token'][0]['has_new_line'] is True and capped['next_token'][0]['n_remain'] == 450 - j['tokens_predicted'],
          'n_predict as capped by --n-predict, has_new_line once a newline came', str(capped))
    complete(other.port, 'Something held before.', 0)
    held = slots(other.port)[0]['n_cached']
    st, j = post(other.port, '/slots/0?action=restore', {'filename': 'conv.bin'})
    check(st == 400 and 'different model' in j['error']['message'], 'a file of another model (same shapes): 400', f'{st} {j}')
    check(held > 0 and slots(other.port)[0]['n_cached'] == held, 'the refused restore left the slot as it was',
          f'{slots(other.port)} vs {held}')
finally:
    other.stop()

# without --slot-save-path: 501 (llama-server's answer); --no-slots: /slots 501
plain = Replica(W, 'plain', ['-m', TINY, '-t', '1', '--ctx', '256']).start().wait_ready()
try:
    st, j = post(plain.port, '/slots/0?action=save', {'filename': 'x.bin'})
    check(st == 501 and '--slot-save-path' in j['error']['message'], 'no --slot-save-path: 501', f'{st} {j}')
    check(request(plain.port, 'GET', '/slots')[0] == 200, 'GET /slots answers by default')
finally:
    plain.stop()
off = Replica(W, 'noslots', ['-m', TINY, '-t', '1', '--ctx', '256', '--no-slots', '--slot-save-path', SAVE]).start().wait_ready()
try:
    st, _, d = request(off.port, 'GET', '/slots')
    check(st == 501 and jbody(d)['error']['type'] == 'not_supported_error', '--no-slots: GET /slots 501', f'{st}')
    st, j = post(off.port, '/slots/0?action=save', {'filename': 'x.bin'})
    check(st == 501, '--no-slots: slot actions 501', f'{st} {j}')
finally:
    off.stop()
finish()
