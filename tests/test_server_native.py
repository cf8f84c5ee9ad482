"""test_server_native.py: llama-server's own fields and endpoints on `bitspark serve` (issue 37,
items 3, 6-8, 10-13), against a synthetic tiny model (its vocabulary has the FIM tokens) and the
fixture tiny model (it has none):
- native /completion and /completions: tokens (stream events, return_tokens), n_probs ->
  completion_probabilities (logprobs, and probabilities with post_sampling_probs: the same
  numbers), has_new_line, generation_settings, response_fields, timings, return_progress ->
  prompt_progress events (one when the slot takes the prompt, one per prompt chunk); prompt as a string, ids, ids mixed with strings, a list (one result each);
- POST /infill: the FIM prompt in llama-server's order, the cut of a long prefix (truncated),
  its 400s, and 501 on a model without FIM tokens;
- logit_bias by text (object and list forms) bans or forces that text's tokens;
- chat streams: usage (with timings) only with stream_options.include_usage;
- embeddings: --pooling none (a vector per token on /embeddings, 400 on /v1/embeddings),
  base64 (the same floats), the empty string, a too long input;
- JSON schemas without "type" constrain by their keywords; a bad type is a 400;
- truncated after a context shift; /apply-template with add_generation_prompt false;
- a last assistant message is a prefill to continue, with llama-server's 400s;
- sampler fields: a negative temperature is greedy, integers written as 6.0, `samplers` (its order followed) turns
  stages off, Mirostat 1 and 2 run (reproducible by seed, reported, greedy at temperature 0, bad
  versions 400); logprobs as n_probs; n_indent and t_max_predict_ms end answers as llama-server's
  do; timings_per_token puts the timings in every streamed chunk; min_keep and
  dry_sequence_breakers per request; n_cmpl; response_format's
  schema beside its type."""
import base64, json, math, os, struct, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, TINY, TMP, Replica, check, finish, jbody, request, stream, workdir

if not B:
    print('BITSPARK is not set')
    sys.exit(1)
FIX = os.environ.get('BS_FIXTURES') or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures')
NO_FIM = os.path.join(FIX, 'tiny-q1_0.gguf')
if not os.path.exists(NO_FIM):
    print('SKIP: the fixture tiny-q1_0.gguf is missing')
    sys.exit(77)
W = workdir('native')


def synth():
    out = os.path.join(TMP, 'srv-tiny-q1_0.gguf')   # the model tests/server_lib.sh caches too
    if not os.path.exists(out):
        subprocess.run([B, 'synth', '--preset', 'tiny', '--type', 'q1_0', '-o', out + '.tmp.native'], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(out + '.tmp.native', out)
    return out


M = synth()
servers = []


def serve(name, model, *args):
    r = Replica(W, name, ['-m', model, '-t', '1'] + list(args)).start()
    servers.append(r)
    return r.wait_ready().port


def post(port, path, body):
    st, _, d = request(port, 'POST', path, body, timeout=120)
    return st, jbody(d)


def tokenize(port, text):
    return post(port, '/tokenize', {'content': text})[1]['tokens']


def detok(port, ids):
    return post(port, '/detokenize', {'tokens': ids})[1]['content']


def native_events(port, path, body):
    """A native stream's events (it ends without [DONE]) and whether [DONE] came."""
    st = stream(port, path, body)
    return st['events'], st['done'], st['status']


P = serve('main', M, '-np', '2', '--ctx', '256', '--embeddings')
GREEDY = {'temperature': 0, 'ignore_eos': True}

# ---- 6: native completion ----------------------------------------------------------------------
q = dict(GREEDY, prompt='Once upon a time', n_predict=8)
st, a = post(P, '/completion', dict(q, return_tokens=True, n_probs=3))
check(st == 200 and a.get('stop') is True and a.get('stop_type') == 'limit' and a.get('tokens_predicted') == 8,
      '/completion answers in llama-server\'s shape', str(a)[:300])
toks = a.get('tokens', [])
check(len(toks) == 8 and detok(P, toks) == a['content'], 'return_tokens: the 8 generated ids, they detokenize to the content',
      f'{toks} {a.get("content")!r}')
probs = a.get('completion_probabilities', [])
ok_probs = len(probs) == 8 and all(p['id'] == t for p, t in zip(probs, toks))
for p in probs:
    top = [e['logprob'] for e in p['top_logprobs']]
    ok_probs &= len(top) == 3 and top == sorted(top, reverse=True) and sum(math.exp(x) for x in top) <= 1 + 1e-6
    ok_probs &= abs(p['logprob'] - top[0]) < 1e-6 and p['top_logprobs'][0]['id'] == p['id']   # greedy: the top token
    ok_probs &= bytes(p['bytes']).decode(errors='replace') == p['token'] or '\ufffd' in p['token']
check(ok_probs, 'n_probs 3: completion_probabilities per token (its id, the top 3 sorted, sum <= 1, greedy = top)',
      json.dumps(probs)[:400])
# stopping_word: the stop string that ended the answer (a piece of the greedy text itself)
if len(a.get('content', '')) >= 6:
    word = a['content'][3:6]
    st, sw = post(P, '/completion', dict(q, stop=['zzqxj', word]))
    check(st == 200 and sw.get('stop_type') == 'word' and sw.get('stopping_word') == word
          and sw.get('content') == a['content'][:a['content'].find(word)],
          'stopping_word: the stop string that matched, the content cut before it', str(sw)[:300])
# post_sampling_probs: the distribution after the sampler chain (llama-server's
# populate_token_probs over the chain's candidates): greedy is one token at probability 1
st, b = post(P, '/completion', dict(q, n_probs=3, post_sampling_probs=True))
same = b.get('content') == a['content'] and len(b.get('completion_probabilities', [])) == 8
for p, r in zip(b.get('completion_probabilities', []), probs):
    same &= p['prob'] == 1.0 and 'logprob' not in p and [(x['id'], x['prob']) for x in p['top_probs']] == [(r['id'], 1.0)]
check(same, 'post_sampling_probs, greedy: the drawn token at prob 1, nothing else', json.dumps(b)[:300])
# sampled with top_k 3 at temperature 0.7: each position's top_probs are the raw top 3 tempered
# and renormalised (at most 3 though n_probs is 5), the drawn token's prob among them
samp = dict(q, temperature=0.7, top_k=3, top_p=1, min_p=0, seed=11, n_probs=5)
st, raw = post(P, '/completion', samp)
st2, pst = post(P, '/completion', dict(samp, post_sampling_probs=True))
same = st == st2 == 200 and pst.get('content') == raw.get('content') and len(pst.get('completion_probabilities', [])) == 8
for p, r in zip(pst.get('completion_probabilities', []), raw.get('completion_probabilities', [])):
    w = [math.exp(x['logprob'] / 0.7) for x in r['top_logprobs'][:3]]
    want = [(x['id'], v / sum(w)) for x, v in zip(r['top_logprobs'][:3], w)]
    got = [(x['id'], x['prob']) for x in p['top_probs']]
    same &= len(got) == 3 and all(i == j and abs(u - v) < 1e-4 for (i, u), (j, v) in zip(got, want))
    same &= p['id'] == r['id'] and abs(p['prob'] - dict(got).get(p['id'], -1)) < 1e-6
check(same, 'post_sampling_probs, top_k 3: the chain\'s truncated, tempered, renormalised probabilities',
      json.dumps(pst.get('completion_probabilities', []))[:400])
check(b.get('tokens') == [], 'without return_tokens: tokens is empty', str(b.get('tokens')))
check(a.get('has_new_line') == ('\n' in a['content']), 'has_new_line says whether the content has a newline')
gs = a.get('generation_settings', {})
check(gs.get('n_predict') == 8 and gs.get('temperature') == 0 and gs.get('n_probs') == 3 and gs.get('ignore_eos') is True,
      'generation_settings: the request\'s settings', str(gs)[:300])
check(a.get('timings', {}).get('predicted_n') == 8 and a.get('tokens_evaluated') == len(tokenize(P, q['prompt'])),
      'timings and tokens_evaluated', str(a.get('timings')))
check(a.get('truncated') is False and a.get('prompt') == q['prompt'], 'truncated false, prompt echoed')
st, c = post(P, '/completion', dict(q, response_fields=['content', 'generation_settings/n_predict', 'nope']))
check(st == 200 and c == {'content': a['content'], 'generation_settings/n_predict': 8},
      'response_fields: only the named fields, nested by path', str(c))
# llama.vim's cache warm-up: n_predict 0, samplers [], response_fields [""]: an empty answer, 200
st, c = post(P, '/completion', {'prompt': 'Hello there', 'n_predict': 0, 'samplers': [], 'response_fields': [''],
                                'cache_prompt': True})
check(st == 200 and c == {}, 'response_fields [""]: an empty answer (llama.vim\'s warm-up)', f'{st} {c}')
st, c = post(P, '/completions', q)
check(st == 200 and c.get('content') == a['content'] and 'choices' not in c, '/completions is the native endpoint (as llama-server)', str(c)[:200])
st, c = post(P, '/v1/completions', dict(GREEDY, prompt=q['prompt'], max_tokens=8))
check(st == 200 and c['choices'][0]['text'] == a['content'], '/v1/completions keeps OpenAI\'s shape', str(c)[:200])
# OpenAI's prompt list: a choice per prompt, in order, each as its prompt alone gives it; usage
# counts every prompt
two = ['Hello there', 'Once upon a time']
st, c = post(P, '/v1/completions', dict(GREEDY, prompt=two, max_tokens=5))
alone = [post(P, '/v1/completions', dict(GREEDY, prompt=x, max_tokens=5))[1] for x in two]
check(st == 200 and [x['index'] for x in c['choices']] == [0, 1]
      and [x['text'] for x in c['choices']] == [x['choices'][0]['text'] for x in alone]
      and c['usage']['prompt_tokens'] == sum(x['usage']['prompt_tokens'] for x in alone) and c['usage']['completion_tokens'] == 10,
      '/v1/completions with a list of prompts: a choice each, usage of them all', str(c)[:400])
st, c = post(P, '/v1/completions', dict(GREEDY, prompt=two, max_tokens=2, echo=True))
check(st == 400 and 'echo' in c['error']['message'], '/v1/completions: echo with a list of prompts is a 400', f'{st} {c}')

# the stream: each event's tokens are its content's; the last one stops; no [DONE]
ev, done, status = native_events(P, '/completion', dict(q, n_probs=2, return_progress=True))
prog = [e for e in ev if 'prompt_progress' in e]
text = ''.join(e.get('content', '') for e in ev)
stoks = [t for e in ev for t in e.get('tokens', [])]
cp = sum(len(e.get('completion_probabilities', [])) for e in ev)
check(status == 200 and not done and ev and ev[-1].get('stop') is True and all(not e['stop'] for e in ev[:-1]),
      'native stream: stop only on the last event, no [DONE]')
check(text == a['content'] and stoks == toks and cp == 8, 'stream events carry their tokens and probabilities',
      f'{text!r} {stoks} {cp}')
check(ev[-1].get('content') == '' and ev[-1].get('tokens') == [] and 'completion_probabilities' not in ev[-1]
      and ev[-1].get('tokens_predicted') == 8 and 'timings' in ev[-1],
      'native stream: the last event carries no text or tokens of its own (llama-server: they came before), its fields do',
      str(ev[-1])[:300])
check(prog and ev[:len(prog)] == prog and prog[-1]['prompt_progress']['total'] == a['tokens_evaluated']
      and prog[-1]['prompt_progress']['processed'] == prog[-1]['prompt_progress']['total'],
      'return_progress: prompt_progress events first, the last with the whole prompt', str(prog)[:300])
ev, _, _ = native_events(P, '/completion', q)
check(not any('prompt_progress' in e for e in ev), 'no prompt_progress unless asked for')
# a long prompt: an event when the slot takes it (processed = cache = 0) and one per prompt chunk
# evaluated (the scheduler's passes take 256 prompt rows), as llama-server's per batch
PP = serve('progress', M, '-np', '1', '--ctx', '2048')
long_ids = tokenize(PP, ' '.join(f'w{i}' for i in range(300)))[:900]
ev, _, _ = native_events(PP, '/completion', dict(GREEDY, prompt=long_ids, n_predict=2, cache_prompt=False,
                                                 return_progress=True))
prog = [e['prompt_progress'] for e in ev if 'prompt_progress' in e]
done = [p['processed'] for p in prog]
check(len(long_ids) == 900 and len(prog) >= 5 and done[0] == 0 and done[-1] == 900 and done == sorted(set(done)) and
      all(p['total'] == 900 and p['cache'] == 0 for p in prog) and
      all(b['time_ms'] >= a_['time_ms'] for a_, b in zip(prog, prog[1:])) and
      all('prompt_progress' in e for e in ev[:len(prog)]),
      f'return_progress on a 900-token prompt: an event per chunk ({done})', str(prog)[:400])
# ... and on OpenAI's chat stream (llama-server sends it there too): chunks with prompt_progress
# beside an empty delta, before the text
ev = stream(PP, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': ' '.join(f'w{i}' for i in range(300))}],
                                          'max_tokens': 2, 'stream': True, 'return_progress': True, 'cache_prompt': False,
                                          **GREEDY})['events']
cp = [e['prompt_progress'] for e in ev if 'prompt_progress' in e]
check(len(cp) >= 2 and cp[-1]['processed'] == cp[-1]['total'] and
      all(e['choices'][0]['delta'].get('content') is None for e in ev if 'prompt_progress' in e),
      'return_progress on a chat stream: prompt_progress chunks', str(cp)[:300])

# prompt forms
ids = tokenize(P, q['prompt'])
st, c = post(P, '/completion', dict(q, prompt=ids))
check(st == 200 and c['content'] == a['content'], 'prompt as token ids: the same answer')
half = tokenize(P, 'Once upon')
st, c = post(P, '/completion', dict(q, prompt=half + [' a time']))
want = post(P, '/completion', dict(q, prompt=half + tokenize(P, ' a time')))[1]
check(st == 200 and c['content'] == want['content'] and c['tokens_evaluated'] == len(half) + len(tokenize(P, ' a time')),
      'prompt as ids mixed with strings', str(c)[:200])
st, c = post(P, '/completion', dict(q, prompt=[q['prompt'], 'The little dog']))
other = post(P, '/completion', dict(q, prompt='The little dog'))[1]
check(st == 200 and isinstance(c, list) and [x['index'] for x in c] == [0, 1]
      and [x['content'] for x in c] == [a['content'], other['content']] and [x['prompt'] for x in c] == [q['prompt'], 'The little dog'],
      'a list of prompts: one result each, in order, with its prompt',
      str(c)[:300])
st, c = post(P, '/completion', dict(q, prompt=[q['prompt']]))
check(st == 200 and isinstance(c, dict) and c['content'] == a['content'], 'a list of one prompt: one result')
for name, body in [('a prompt object', dict(q, prompt={'a': 1})), ('an id out of the vocabulary', dict(q, prompt=[1, 10 ** 7])),
                   ('n_probs -1', dict(q, n_probs=-1)), ('response_fields 5', dict(q, response_fields=5)),
                   ('return_tokens "yes"', dict(q, return_tokens='yes')), ('an empty prompt list', dict(q, prompt=[])),
                   ('a list of prompts streamed', dict(q, prompt=['a', 'b'], stream=True))]:
    st, c = post(P, '/completion', body)
    check(st == 400 and c and c.get('error', {}).get('message'), f'400 for {name}', f'{st} {c}')

# ---- 3: infill ----------------------------------------------------------------------------------
pre, suf = 'def add(a, b):\n    ', '\n    return c\n'
body = dict(GREEDY, input_prefix=pre, input_suffix=suf, prompt='c =', n_predict=4,
            input_extra=[{'filename': 'util.py', 'text': 'import os\n'}])
st, c = post(P, '/infill', body)
want = ('<|repo_name|>myproject\n<|file_sep|>util.py\nimport os\n<|file_sep|>filename\n<|fim_prefix|>' + pre + 'c ='
        + '<|fim_suffix|>' + suf + '<|fim_middle|>')
check(st == 200 and c.get('stop') is True and c.get('tokens_predicted') == 4 and c.get('prompt') == want,
      '/infill: the FIM prompt in llama-server\'s order, a native answer', f'{st} {str(c)[:400]}')
check(c.get('tokens_evaluated') == len(tokenize(P, want)) and c.get('truncated') is False,
      '/infill: its tokens are the FIM tokens and the texts', f'{c.get("tokens_evaluated")} {len(tokenize(P, want))}')
st, c2 = post(P, '/infill', dict(body, input_prefix='x = 1\n' * 300))
check(st == 200 and c2.get('truncated') is True and c2['prompt'].endswith('x = 1\n' + 'c =<|fim_suffix|>' + suf + '<|fim_middle|>')
      and c2['tokens_evaluated'] < 256, '/infill: a long prefix keeps its end and says truncated', str(c2)[:300])
# input_extra: the prompt keeps the extra context's last tokens; megabytes of it are tokenized
# only as far as they fit, and give the same prompt as a text a little longer than what fits
def extra_part(c):
    return c['prompt'][:c['prompt'].index('<|fim_prefix|>')]
line = 'y = 2\n'
st, e1 = post(P, '/infill', dict(body, input_extra=[{'filename': 'b.py', 'text': line * 400}]))
st2, e2 = post(P, '/infill', dict(body, input_extra=[{'filename': 'a.py', 'text': 'import os\n'},
                                                     {'filename': 'b.py', 'text': line * 400000}]))
check(st == 200 and st2 == 200 and e1.get('truncated') is True and e2.get('truncated') is True
      and extra_part(e1).endswith(line + '<|file_sep|>filename\n') and '<|repo_name|>' not in e1['prompt']
      and 'a.py' not in e2['prompt'] and e1['prompt'] == e2['prompt'] and e1['tokens_evaluated'] == e2['tokens_evaluated'],
      '/infill: a 2.4 MB input_extra keeps its last tokens, as a short one that does not fit',
      f'{st} {st2} {str(e1)[:300]} {str(e2)[:300]}')
st, e3 = post(P, '/infill', dict(body, input_extra=[{'filename': 'a.py', 'text': line * 400000},
                                                    {'filename': 'c.py', 'text': 'z\n'}]))
check(st == 200 and e3.get('truncated') is True and extra_part(e3).endswith(line + '<|file_sep|>c.py\nz\n<|file_sep|>filename\n')
      and '<|file_sep|>a.py' not in e3['prompt'] and e3['tokens_evaluated'] == e1['tokens_evaluated'],
      '/infill: the last file whole, the one before it cut to its end', f'{st} {str(e3)[:300]} {e1["tokens_evaluated"]}')
for name, b2, want_msg in [('no input_prefix', {'input_suffix': ''}, '"input_prefix" is required'),
                           ('input_extra not a list', dict(body, input_extra='x'), '"input_extra" must be an array'),
                           ('an extra chunk without text', dict(body, input_extra=[{'filename': 'a'}]), 'must contain a "text"'),
                           ('a prompt number', dict(body, prompt=3), '"prompt" must be a string')]:
    st, c = post(P, '/infill', b2)
    check(st == 400 and want_msg in c.get('error', {}).get('message', ''), f'/infill 400: {name}', f'{st} {c}')
P0 = serve('nofim', NO_FIM, '-np', '1', '--ctx', '128')
st, c = post(P0, '/infill', body)
check(st == 501 and c['error']['type'] == 'not_supported_error' and
      c['error']['message'].startswith('Infill is not supported by this model: prefix token is missing.'),
      '/infill on a model without FIM tokens: 501, llama-server\'s message', f'{st} {c}')

# ---- 7: logit_bias by text ----------------------------------------------------------------------
first = toks[0] if toks else tokenize(P, a['content'])[0]   # (the old server had no return_tokens)
piece = detok(P, [first])
banned_ids = tokenize(P, piece)
for form, bias in [('object', {piece: False}), ('list', [[piece, False]]), ('object -100', {piece: -100})]:
    st, c = post(P, '/completion', dict(q, n_predict=16, return_tokens=True, logit_bias=bias))
    check(st == 200 and not set(c['tokens']) & set(banned_ids), f'logit_bias by text ({form}) bans {piece!r}',
          f'{st} {c.get("tokens")} {banned_ids}')
word = ' dog'
wids = tokenize(P, word)
for form, bias in [('object', {word: 100}), ('list', [[word, 100]])]:
    st, c = post(P, '/completion', dict(q, n_predict=6, return_tokens=True, logit_bias=bias))
    check(st == 200 and set(c['tokens']) <= set(wids), f'logit_bias by text ({form}) forces {word!r}', f'{c.get("tokens")} {wids}')
st, c = post(P, '/completion', dict(q, n_predict=4, return_tokens=True, logit_bias={str(first): False}))
check(st == 200 and first not in c['tokens'], 'logit_bias: a numeric key is a token id')
st, c = post(P, '/completion', dict(q, logit_bias=[[piece, 'x']]))
check(st == 400, 'logit_bias: a bias that is not a number or false is a 400', f'{st} {c}')

# ---- 8: chat stream usage -----------------------------------------------------------------------
chat = {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4, 'temperature': 0}
s1 = stream(P, '/v1/chat/completions', dict(chat, stream_options={'include_usage': True}))
last = s1['events'][-1] if s1['events'] else {}
check(s1['done'] and last.get('choices') == [] and last.get('usage', {}).get('completion_tokens') == 4
      and last.get('timings', {}).get('predicted_n') == 4, 'include_usage: a usage chunk with timings, last', str(last)[:300])
s2 = stream(P, '/v1/chat/completions', chat)
check(s2['done'] and not any('usage' in e for e in s2['events']) and 'timings' in s2['events'][-1],
      'without include_usage no usage chunk (timings on the finish chunk)')

# ---- 10: embeddings -----------------------------------------------------------------------------
st, f1 = post(P, '/v1/embeddings', {'input': 'hello world'})
st2, f2 = post(P, '/v1/embeddings', {'input': 'hello world', 'encoding_format': 'base64'})
vec = f1['data'][0]['embedding'] if st == 200 else []
raw = base64.b64decode(f2['data'][0]['embedding']) if st2 == 200 else b''
dec = list(struct.unpack('<%df' % (len(raw) // 4), raw))
check(st2 == 200 and len(dec) == len(vec) > 0 and all(struct.pack('<f', x) == struct.pack('<f', y) for x, y in zip(dec, vec)),
      'encoding_format base64: the same float32 values', f'{st2} {len(dec)} {len(vec)}')
st, c = post(P, '/v1/embeddings', {'input': 'x', 'encoding_format': 'hex'})
check(st == 400, 'encoding_format other than float / base64: 400')
st, c = post(P, '/v1/embeddings', {'input': ''})
check(st == 200 and len(c['data'][0]['embedding']) == len(vec) and c['usage']['prompt_tokens'] == 1,
      'an empty input string embeds the empty prompt', f'{st} {str(c)[:200]}')
for path, key in [('/embedding', 'content'), ('/embeddings', 'input')]:
    st, c = post(P, path, {key: ['hello world', 'a']})
    check(st == 200 and isinstance(c, list) and [x['index'] for x in c] == [0, 1] and len(c[0]['embedding']) == 1
          and c[0]['embedding'][0] == vec, f'{path}: llama-server\'s shape, [{{"index", "embedding": [the pooled row]}}]',
          f'{st} {str(c)[:200]}')
st, c = post(P, '/v1/embeddings', {'input': [1] * 300})
check(st == 400 and 'too large to process' in c['error']['message'], 'a too long input: "too large to process"', f'{st} {c}')
PN = serve('none', M, '-np', '1', '--ctx', '128', '--embeddings', '--pooling', 'none')
st, c = post(PN, '/embeddings', {'input': ['hello world', 'a']})
n_tok = [len(tokenize(PN, 'hello world')), len(tokenize(PN, 'a'))]
check(st == 200 and isinstance(c, list) and [len(x['embedding']) for x in c] == n_tok
      and all(len(row) == len(vec) for x in c for row in x['embedding']), '--pooling none: a vector per token on /embeddings',
      f'{st} {str(c)[:200]}')
st, c = post(PN, '/v1/embeddings', {'input': 'hello'})
check(st == 400 and "Pooling type 'none' is not OAI compatible" in c['error']['message'], '--pooling none: 400 on /v1/embeddings', f'{st} {c}')

# ---- 11: JSON schemas without type, bad types ---------------------------------------------------
for schema, opener in [({'items': {'type': 'integer'}}, '['), ({'properties': {'a': {'type': 'integer'}}}, '{'),
                       ({'minLength': 2, 'maxLength': 4}, '"')]:
    st, c = post(P, '/v1/chat/completions', dict(chat, max_tokens=12, json_schema=schema))
    content = c['choices'][0]['message']['content'] if st == 200 else ''
    check(st == 200 and content.startswith(opener), f'a schema without type ({list(schema)[0]}) constrains to {opener}',
          f'{st} {str(c)[:200]}')
for bad in [123, 'hiccup', [1]]:
    st, c = post(P, '/v1/chat/completions', dict(chat, json_schema={'type': bad}))
    check(st == 400 and 'type' in c['error']['message'], f'schema type {bad!r}: 400', f'{st} {c}')
    st, c = post(P, '/v1/chat/completions', dict(chat, response_format={'type': 'json_schema', 'json_schema': {'schema': {'type': bad}}}))
    check(st == 400, f'response_format schema type {bad!r}: 400', f'{st} {c}')

# ---- 12: truncated after a context shift --------------------------------------------------------
PS = serve('shift', M, '-np', '1', '--ctx', '64', '--context-shift', '--keep', '4')
st, c = post(PS, '/completion', dict(q, n_predict=100))
check(st == 200 and c.get('tokens_predicted') == 100 and c.get('truncated') is True, 'truncated after a context shift',
      str(c)[:300])
st, c = post(PS, '/completion', dict(q, n_predict=4))
check(st == 200 and c.get('truncated') is False, 'not truncated without one')

# ---- 13: /apply-template add_generation_prompt ------------------------------------------------
msgs = {'messages': [{'role': 'user', 'content': 'hi'}]}
st, on = post(P, '/apply-template', msgs)
st2, off = post(P, '/apply-template', dict(msgs, add_generation_prompt=False))
check(st == st2 == 200 and off['prompt'].endswith('<|im_end|>\n') and '<|im_start|>assistant' not in off['prompt']
      and on['prompt'].startswith(off['prompt'] + '<|im_start|>assistant\n'), 'apply-template: add_generation_prompt false renders no opener',
      f'{on} {off}')
st, c = post(P, '/apply-template', dict(msgs, add_generation_prompt='no'))
check(st == 400, 'apply-template: add_generation_prompt must be a boolean')

# ---- 14: a last assistant message is a prefill (llama-server) ---------------------------------
pre = {'messages': [{'role': 'user', 'content': 'Tell me a story'}, {'role': 'assistant', 'content': 'Once upon a '}],
       'enable_thinking': False}
st, shown = post(P, '/apply-template', pre)
st2, opener = post(P, '/apply-template', {'messages': pre['messages'][:1], 'enable_thinking': False})
check(st == st2 == 200 and shown['prompt'] == opener['prompt'] + 'Once upon a ',
      'prefill: the turns before it with the generation prompt, then its content as typed', f'{shown} {opener}')
st, ch = post(P, '/v1/chat/completions', dict(pre, max_tokens=6, **GREEDY))
st2, co = post(P, '/completion', {'prompt': shown['prompt'], 'n_predict': 6, **GREEDY})
check(st == st2 == 200 and ch['choices'][0]['message']['content'] == co['content'] and co['tokens_predicted'] == 6,
      'prefill: chat continues it as /completion continues the rendered prompt', f'{st} {ch} {co}')
for name, body, msg in [('thinking on', dict(pre, enable_thinking=True), 'incompatible with enable_thinking'),
                        ('two at the end', dict(pre, messages=pre['messages'] + [{'role': 'assistant', 'content': 'x'}]),
                         '2 or more assistant messages'),
                        ('tool calls', dict(pre, messages=pre['messages'][:1] + [{'role': 'assistant', 'content': None,
                         'tool_calls': [{'id': 'c', 'type': 'function', 'function': {'name': 'f', 'arguments': '{}'}}]}]),
                         'cannot be continued')]:
    st, c = post(P, '/v1/chat/completions', dict(body, max_tokens=2))
    check(st == 400 and msg in c.get('error', {}).get('message', ''), f'prefill 400: {name}', f'{st} {c}')

# ---- 15: llama-server's sampler fields and number forms -----------------------------------------
q = {'prompt': 'Hello there', 'n_predict': 6, 'ignore_eos': True}
st, g0 = post(P, '/completion', dict(q, temperature=0))
st2, gneg = post(P, '/completion', dict(q, temperature=-1, n_predict=6.0, top_k=40.0))
check(st == st2 == 200 and gneg['content'] == g0['content'] and gneg['tokens_predicted'] == 6,
      'a negative temperature is greedy; 6.0 and 40.0 are integers', f'{st} {st2} {gneg} {g0}')
st, c = post(P, '/completion', dict(q, n_predict=2.5))
check(st == 400 and "'n_predict' must be an integer" in c['error']['message'], '2.5 is not an integer', f'{st} {c}')
off = {'mirostat': 0, 'typical_p': 1.0, 'xtc_probability': 0, 'xtc_threshold': 0.1, 'dynatemp_range': 0,
       'dynatemp_exponent': 1, 'top_n_sigma': -1, 'samplers': 'edkypmxt'}
st, c = post(P, '/completion', dict(q, temperature=0, **off))
check(st == 200 and c['content'] == g0['content'], 'the stages sent off (as llama.cpp\'s page sends them): served', f'{st} {c}')
on = {'typical_p': 0.9, 'xtc_probability': 0.5, 'xtc_threshold': 0.05, 'dynatemp_range': 0.3, 'dynatemp_exponent': 1.5,
      'top_n_sigma': 2.0}
st, c = post(P, '/completion', dict(q, seed=4, **on))
gs = c.get('generation_settings', {})
check(st == 200 and c['tokens_predicted'] == 6 and all(abs(gs.get(k, -9) - v) < 1e-6 for k, v in on.items()),
      'typical_p, XTC, dynamic temperature, top_n_sigma: run and reported in generation_settings', f'{st} {gs}')
st2, c2 = post(P, '/completion', dict(q, seed=4, **on))
check(st2 == 200 and c2['content'] == c['content'], 'with the stages, one seed gives one answer', f'{c2} {c}')
miro = {'mirostat': 2, 'mirostat_tau': 3.0, 'mirostat_eta': 0.2}
st, c = post(P, '/completion', dict(q, seed=9, **miro))
st2, c2 = post(P, '/completion', dict(q, seed=9, **miro))
gs = c.get('generation_settings', {})
check(st == st2 == 200 and c['tokens_predicted'] == 6 and c2['content'] == c['content'] and
      all(abs(gs.get(k, -9) - v) < 1e-6 for k, v in miro.items()),
      'mirostat 2: runs, one seed one answer, reported in generation_settings', f'{st} {gs} {c2}')
# Mirostat 2 with a bound of 0.02 bits and no learning keeps only the best token: greedy at a hot
# temperature, where the plain chain samples other text
tight = {'mirostat': 2, 'mirostat_tau': 0.01, 'mirostat_eta': 0, 'temperature': 3, 'seed': 5}
st, c = post(P, '/completion', dict(q, **tight))
st2, c2 = post(P, '/completion', dict(q, temperature=3, top_k=0, top_p=1, min_p=0, seed=5))
check(st == st2 == 200 and c['content'] == g0['content'] and c2['content'] != g0['content'],
      'mirostat 2 with a tight bound: the best token only (the plain chain at that temperature is not greedy)',
      f"{c.get('content')!r} {c2.get('content')!r} {g0['content']!r}")
st, c = post(P, '/completion', dict(q, temperature=0, mirostat=1))
check(st == 200 and c['content'] == g0['content'], 'mirostat 1 at temperature 0: greedy', f'{st} {c}')
for bad in (3, 1.5, -1):
    st, c = post(P, '/completion', dict(q, mirostat=bad))
    check(st == 400 and 'mirostat' in c['error']['message'], f'mirostat {bad}: 400', f'{st} {c}')
st, c = post(P, '/completion', dict(q, xtc_probability=1.5))
check(st == 400 and 'xtc_probability' in c['error']['message'], 'xtc_probability 1.5: 400', f'{st} {c}')
st, c = post(P, '/completion', dict(q, typical_p=0.5, samplers=['top_k', 'temperature']))
check(st == 200 and c['generation_settings']['typical_p'] == 1, 'typical_p with typ_p not among the samplers: off', f'{st} {c}')
# a stage left out of `samplers` is off: top_k alone with temperature left out is plain sampling
# of the 1 best at temperature 1 = greedy; with only temperature, top_k 1 does not apply
st, c1 = post(P, '/completion', dict(q, temperature=5, top_k=1, samplers=['top_k'], seed=3))
check(st == 200 and c1['content'] == g0['content'], 'samplers [top_k] with top_k 1: greedy whatever the temperature', f'{st} {c1}')
st, c2 = post(P, '/completion', dict(q, temperature=100, top_k=1, samplers='t', seed=3))
st3, c3 = post(P, '/completion', dict(q, temperature=100, top_k=0, top_p=1, min_p=0, seed=3))
check(st == st3 == 200 and c2['content'] == c3['content'], 'samplers "t": top-k, top-p and min-p off', f'{c2} {c3}')
st, c = post(P, '/completion', dict(q, samplers=5))
check(st == 400 and 'samplers' in c['error']['message'], 'samplers 5: 400', f'{st} {c}')
# the order of `samplers` is followed: min-p 0.5 before a temperature of 50 keeps the few tokens
# near the best; after it, the flattened distribution passes nearly every token
hot = dict(q, n_predict=1, temperature=50, min_p=0.5, top_k=0, top_p=1, n_probs=10, post_sampling_probs=True, seed=1)
st, mt = post(P, '/completion', dict(hot, samplers=['min_p', 'temperature']))
st2, tm = post(P, '/completion', dict(hot, samplers='tm'))
n_mt, n_tm = (len(c['completion_probabilities'][0]['top_probs']) for c in (mt, tm))
check(st == st2 == 200 and n_mt < 10 and n_tm == 10 and mt['generation_settings']['samplers'] == ['min_p', 'temperature'] and
      tm['generation_settings']['samplers'] == ['temperature', 'min_p'],
      'samplers in another order: followed (temperature before min_p passes more tokens) and reported', f'{n_mt} {n_tm}')
st, c = post(P, '/completion', dict(q, samplers=['foo']))
st2, c2 = post(P, '/completion', q)
check(st == st2 == 200 and c['generation_settings']['samplers'] == [] and len(c2['generation_settings']['samplers']) == 9,
      'samplers naming no stage: none reported; without samplers: the whole chain', f"{c['generation_settings']['samplers']}")
st, c = post(P, '/completion', dict(q, n_predict=2, logprobs=3))
check(st == 200 and len(c.get('completion_probabilities', [])) == 2 and len(c['completion_probabilities'][0]['top_logprobs']) == 3,
      '/completion logprobs 3: n_probs 3, as llama-server falls back to it', f'{st} {str(c)[:300]}')
# n_indent (code completion): a line after the first newline indented less ends the answer, cut
# at its first character; the grammar fixes the text whatever the model, so the cut is known
lines = 'root ::= "ab\\n" "    cd\\n" "  ef\\n" "gh"'
st, full = post(P, '/completion', {'prompt': 'x', 'n_predict': 40, 'grammar': lines, **GREEDY})
st2, ind = post(P, '/completion', {'prompt': 'x', 'n_predict': 40, 'grammar': lines, 'n_indent': 3, **GREEDY})
st3, ind4 = post(P, '/completion', {'prompt': 'x', 'n_predict': 40, 'grammar': lines, 'n_indent': 2, **GREEDY})
st4, blank = post(P, '/completion', {'prompt': 'x', 'n_predict': 40, 'n_indent': 4, **GREEDY,
                                     'grammar': 'root ::= "ab\\n" "    cd\\n" "\\n" "    ef"'})
check(st4 == 200 and blank['content'] == 'ab\n    cd\n', 'n_indent: an empty line ends the answer (llama-server)', str(blank)[:200])
check(st == st2 == st3 == 200 and full['content'] == 'ab\n    cd\n  ef\ngh' and ind['content'] == 'ab\n    cd\n  ' and
      ind['stop_type'] == 'limit' and ind4['content'] == 'ab\n    cd\n  ef\n' and
      ind['generation_settings']['n_indent'] == 3,
      'n_indent 3 cuts at the line indented 2, n_indent 2 at the one indented 0', f'{full} {ind} {ind4}')
ev = stream(P, '/completion', {'prompt': 'x', 'n_predict': 40, 'grammar': lines, 'n_indent': 3, 'stream': True, **GREEDY})['events']
check(''.join(e.get('content', '') for e in ev) == 'ab\n    cd\n  ', 'n_indent streamed: the cut text never sent',
      str(ev)[:300])
# t_max_predict_ms: past it, once a newline is out, the answer ends (stop_type limit)
free = 'root ::= "ab\\n" ([a-z ]{1,20} "\\n")*'
st, long_ = post(P, '/completion', {'prompt': 'x', 'n_predict': 200, 'grammar': free, **GREEDY})
st2, cut = post(P, '/completion', {'prompt': 'x', 'n_predict': 200, 'grammar': free, 't_max_predict_ms': 1, **GREEDY})
check(st == st2 == 200 and long_['tokens_predicted'] == 200 and cut['content'].startswith('ab\n') and
      cut['content'].endswith('\n') and
      cut['tokens_predicted'] < 200 and cut['stop_type'] == 'limit',
      't_max_predict_ms 1: ends soon after the newline', f"{long_['tokens_predicted']} {cut.get('tokens_predicted')} {cut.get('stop_type')}")
# timings_per_token: every streamed chunk carries the timings so far (predicted_n growing), native
# and OpenAI; without it only the last ones do
tq = {'prompt': 'Hello there', 'n_predict': 6, 'stream': True, **GREEDY}
ev = stream(P, '/completion', dict(tq, timings_per_token=True))['events']
ev0 = stream(P, '/completion', tq)['events']
pn = [e['timings']['predicted_n'] for e in ev if 'timings' in e]
check(len(pn) == len(ev) and pn == sorted(pn) and pn[-1] == 6 and
      all(e['timings']['predicted_n'] >= e['tokens_predicted'] for e in ev[:-1]) and
      all(e['timings']['prompt_n'] + e['timings']['cache_n'] > 0 for e in ev) and
      not any('timings' in e for e in ev0[:-1]),
      'timings_per_token: every native chunk has the timings so far', f'{pn} {len(ev)} {ev0[:1]}')
ev = stream(P, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 6, 'stream': True,
                                        'timings_per_token': True, **GREEDY})['events']
tk = [e['timings']['predicted_n'] for e in ev if 'timings' in e]
check(len(tk) >= len(ev) - 1 and tk == sorted(tk) and tk[-1] == 6, 'timings_per_token: OpenAI chunks too', f'{tk} {len(ev)}')
# min_keep as llama.cpp's: top-p 0.01 at a hot temperature keeps the best only (greedy), with
# min_keep 20 it samples among 20; top-k is not widened by it (top_k 1 stays greedy);
# dry_sequence_breakers per request: breakers on every space end DRY's matches
mk = {'prompt': 'Once upon a time', 'n_predict': 8, 'temperature': 5, 'top_k': 0, 'top_p': 0.01, 'min_p': 0, 'seed': 3}
st, k0 = post(P, '/completion', mk)
st2, k20 = post(P, '/completion', dict(mk, min_keep=20))
st3, kg = post(P, '/completion', dict(mk, temperature=0))
st4, k1 = post(P, '/completion', dict(mk, top_k=1, top_p=1, min_keep=20))
check(st == st2 == st3 == st4 == 200 and k0['content'] == kg['content'] and k20['content'] != kg['content'] and
      k1['content'] == kg['content'] and k20['generation_settings']['min_keep'] == 20,
      'min_keep 20 widens top-p, not top-k (llama.cpp)', f"{k0.get('content')!r} {k20.get('content')!r} {k1.get('content')!r}")
PT = serve('trained', TINY, '-np', '1', '--ctx', '256')   # the trained tiny model repeats itself
dq = {'prompt': 'Once upon a time', 'n_predict': 60, **GREEDY}
dry = dict(dq, dry_multiplier=3, dry_allowed_length=1)
st, d0 = post(PT, '/completion', dq)
st2, dn = post(PT, '/completion', dict(dry, dry_sequence_breakers=['\u0001']))   # one that never comes: none
st3, ds = post(PT, '/completion', dict(dry, dry_sequence_breakers=[' ', 'e', 'a', 't', 'o', 'n']))
check(st == st2 == st3 == 200 and dn['content'] != d0['content'] and ds['content'] != dn['content'],
      'dry_sequence_breakers per request: none and many give other text', f"{d0['content'][:60]!r} {dn['content'][:60]!r} {ds['content'][:60]!r}")
for bad in (['a'] * 17, 'x', [1], ['a' * 300], []):
    st, c = post(P, '/completion', dict(dry, dry_sequence_breakers=bad))
    check(st == 400 and 'dry_sequence_breakers' in c['error']['message'], f'dry_sequence_breakers {str(bad)[:20]}: 400', f'{st} {c}')
# n_cmpl (alias n): completions per prompt, answered as an array in llama-server's order (prompt i's
# completion j at i * n_cmpl + j), each prompt evaluated once; streamed: 400
nq = {'n_predict': 5, 'seed': 3, 'temperature': 1.0}
st, one = post(P, '/completion', dict(nq, prompt='Once upon a time', n_cmpl=2))
st2, two = post(P, '/completion', dict(nq, prompt=['Once upon a time', 'Hello'], n_cmpl=2))
st3, alone = post(P, '/completion', dict(nq, prompt='Hello'))
st4, via_n = post(P, '/completion', dict(nq, prompt='Once upon a time', n=2))
check(st == st2 == st3 == st4 == 200 and isinstance(one, list) and [x['index'] for x in one] == [0, 1] and
      [x['content'] for x in two[:2]] == [x['content'] for x in one] and two[2]['content'] == alone['content'] and
      [x['index'] for x in two] == [0, 1, 2, 3] and [x['content'] for x in via_n] == [x['content'] for x in one],
      'n_cmpl 2: an array per prompt in order, the first of each as alone, n its alias', f'{str(one)[:200]} {str(two)[:200]}')
st, c = post(P, '/completion', dict(nq, prompt='x', n_cmpl=2, stream=True))
st2, c2 = post(P, '/completion', dict(nq, prompt=['a'] * 9, n_cmpl=2))
check(st == 400 and st2 == 400 and 'at most 16' in c2['error']['message'], 'n_cmpl streamed, or past 16 answers: 400', f'{c} {c2}')
# logprobs entries carry the token id (llama-server's), on chat and, beside OpenAI's legacy shape,
# on /v1/completions as "content"
st, c = post(P, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 3,
                                          'logprobs': True, 'top_logprobs': 2, **GREEDY})
ent = c['choices'][0]['logprobs']['content'] if st == 200 else []
st3, c3 = post(P, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 3, 'n_probs': 2,
                                            **GREEDY})
check(st3 == 200 and c3['choices'][0]['logprobs']['content'] == ent, "n_probs on chat: logprobs as top_logprobs 2 gives them",
      str(c3['choices'][0].get('logprobs'))[:200])
st2, c2 = post(P, '/v1/completions', {'prompt': 'Hello', 'max_tokens': 3, 'logprobs': 2, **GREEDY})
lp = c2['choices'][0]['logprobs'] if st2 == 200 else {}
check(len(ent) == 3 and all(isinstance(e['id'], int) and all(isinstance(x['id'], int) for x in e['top_logprobs']) for e in ent)
      and len(lp.get('content', [])) == 3 and [e['token'] for e in lp['content']] == lp['tokens'] and
      [e['logprob'] for e in lp['content']] == lp['token_logprobs'],
      'logprobs: ids on chat entries; /v1/completions has content beside tokens / token_logprobs', f'{str(ent)[:150]} {str(lp)[:200]}')
st, c = post(P, '/completion', {'prompt': 'x', 'n_indent': -1})
check(st == 400 and 'n_indent' in c['error']['message'], 'n_indent -1: 400', f'{st} {c}')
sch = {'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'required': ['a']}
st, c = post(P, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 40, 'temperature': 0,
                                          'response_format': {'type': 'json_schema', 'schema': sch}})
txt = c['choices'][0]['message']['content'] if st == 200 else ''
check(st == 200 and isinstance(json.loads(txt), dict) and isinstance(json.loads(txt).get('a'), int),
      'response_format json_schema with the schema beside the type (llama-server\'s README form): constrained', f'{st} {str(c)[:300]}')

# reasoning_format: none keeps the think block in content (as generated), deepseek-legacy keeps it
# there and splits it out too, auto (the default) splits it out
conv = {'messages': [{'role': 'user', 'content': 'Why is the sky blue?'}]}
st, shown = post(P, '/apply-template', conv)
st2, raw = post(P, '/completion', {'prompt': shown['prompt'], 'n_predict': 12, **GREEDY})
res = {}
for f in ['auto', 'none', 'deepseek-legacy']:
    st3, c = post(P, '/v1/chat/completions', dict(conv, max_tokens=12, reasoning_format=f, **GREEDY))
    res[f] = c['choices'][0]['message'] if st3 == 200 else {}
check(st == st2 == 200 and res['none'].get('content') == raw['content'] and 'reasoning_content' not in res['none'],
      'reasoning_format none: the text as generated in content, no reasoning_content', f'{res} {raw.get("content")!r}')
check(res['deepseek-legacy'].get('content') == raw['content'] and res['auto'].get('reasoning_content')
      and res['deepseek-legacy'].get('reasoning_content') == res['auto'].get('reasoning_content'),
      'reasoning_format deepseek-legacy: content as generated and reasoning_content as auto splits it', str(res)[:400])
ev = stream(P, '/v1/chat/completions', dict(conv, max_tokens=12, reasoning_format='none', stream=True, **GREEDY))['events']
got = ''.join((e['choices'][0]['delta'].get('content') or '') for e in ev if e.get('choices'))
check(got == raw['content'] and not any(e['choices'][0]['delta'].get('reasoning_content') for e in ev if e.get('choices')),
      'reasoning_format none, streamed: the same content, no reasoning deltas', f'{got!r}')
st, c = post(P, '/v1/chat/completions', dict(conv, max_tokens=2, reasoning_format='xml'))
check(st == 400 and 'reasoning_format' in c['error']['message'], 'reasoning_format xml: 400', f'{st} {c}')

# chat logprobs: bytes are the token's UTF-8 bytes as integers (llama-server's; OpenAI allows null)
st, c = post(P, '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 6, 'temperature': 0,
                                          'logprobs': True, 'top_logprobs': 2, 'chat_template_kwargs': {'enable_thinking': False}})
lp = c['choices'][0]['logprobs']['content'] if st == 200 else []
check(st == 200 and lp and all(isinstance(e['bytes'], list) and all(isinstance(x['bytes'], list) for x in e['top_logprobs'])
                               for e in lp), 'chat logprobs: bytes as integer lists', f'{st} {str(lp)[:300]}')
check(all(bytes(e['bytes']).decode('utf-8', 'replace') == e['token'] or '\ufffd' in e['token'] for e in lp),
      'chat logprobs: each entry\'s bytes are its token\'s', str(lp)[:300])

st, _, _ = request(P, 'GET', '/health')
check(st == 200, 'the server still answers')
for r in servers:   # a sanitizer build reports into the log (leaks at exit)
    r.stop()
    log = r.log()
    check(r.proc.returncode == 0 and 'Sanitizer' not in log and 'runtime error' not in log,
          f'server {r.name}: exit 0, no sanitizer report', f'{r.proc.returncode} {log[-2000:]}')
finish()
