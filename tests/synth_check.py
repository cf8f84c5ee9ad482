"""synth_check.py: checks of `bitspark synth` output, driven by test_synth.sh.

Reads files with tests/gguf_reader.py (independent of the C reader) and compares them with the
fixtures (which mirror the real converters' key names and tensor tables) and with tables written
here from the reference notes (qwen35-arch.md §5.2, prism-fork.md §3.1).

    synth_check.py tiny DIR          files DIR/tiny-*.gguf written by test_synth.sh
    synth_check.py dry PRESET FILE   FILE = output of `synth --preset PRESET --dry-run`
    synth_check.py dryfile DRY GGUF  the --dry-run table DRY is the table of GGUF
    synth_check.py inspect DRY JSON KIND   `inspect --json` output JSON shows DRY and KIND
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUF  # noqa: E402
from ref_qwen35 import Qwen35Ref  # noqa: E402

FIX = os.environ.get('BS_FIXTURES', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures'))
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print('FAIL: ' + msg)


def table(g):
    return {n: (list(t.ne), t.fmt[0].lower()) for n, t in g.tensors.items()}


def same_table(a, b, what):
    ta, tb = table(a), table(b)
    check(set(ta) == set(tb), '%s: tensor names differ: %s' % (what, sorted(set(ta) ^ set(tb))[:8]))
    for n in set(ta) & set(tb):
        check(ta[n] == tb[n], '%s: %s is %s, expected %s' % (what, n, ta[n], tb[n]))


def same_keys(a, b, prefix, what):
    ka = {k: v for k, v in a.meta.items() if k.startswith(prefix)}
    kb = {k: v for k, v in b.meta.items() if k.startswith(prefix)}
    check(set(ka) == set(kb), '%s: %s* keys differ: %s' % (what, prefix, sorted(set(ka) ^ set(kb))))
    for k in set(ka) & set(kb):
        va, vb = ka[k], kb[k]
        ok = math.isclose(va, vb, rel_tol=1e-6) if isinstance(va, float) else va == vb
        check(ok, '%s: %s = %r, expected %r' % (what, k, va, vb))


def check_tokenizer(g, n_vocab):
    m = g.meta
    check(m.get('tokenizer.ggml.model') == 'gpt2', 'tokenizer.ggml.model')
    check(m.get('tokenizer.ggml.pre') == 'qwen35', 'tokenizer.ggml.pre')
    tok, typ, merges = m['tokenizer.ggml.tokens'], m['tokenizer.ggml.token_type'], m['tokenizer.ggml.merges']
    check(len(tok) == n_vocab and len(typ) == n_vocab, 'vocabulary size %d' % len(tok))
    check(len(set(tok)) == len(tok), 'duplicate token strings')
    check(len(merges) >= 300, 'only %d merges' % len(merges))
    ids = {t: i for i, t in enumerate(tok)}
    # GPT-2 byte tokens in byte order
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_cp = dict(zip(bs, cs))
    check(all(tok[b] == chr(byte_cp[b]) and typ[b] == 1 for b in range(256)), 'byte tokens 0..255')
    for r, mg in enumerate(merges):
        parts = mg.split(' ')
        ok = len(parts) == 2 and parts[0] in ids and parts[1] in ids and parts[0] + parts[1] in ids
        check(ok, 'merge %d %r does not join two tokens into a token' % (r, mg))
        if not ok:
            break
    for s in ('<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>',
              '</tool_call>', '<tool_response>', '</tool_response>'):
        check(s in ids and typ[ids[s]] == 3, 'special %s missing or not CONTROL' % s)
    check(m.get('tokenizer.ggml.eos_token_id') == ids.get('<|im_end|>'), 'eos is not <|im_end|>')
    check(all(typ[i] == 5 and tok[i] == '[PAD%d]' % i for i in range(n_vocab) if tok[i].startswith('[PAD')),
          'PAD tokens must be [PAD{id}] with type UNUSED')
    check(all(t in (1, 3, 5) for t in typ), 'token types other than 1/3/5')
    tmpl = m.get('tokenizer.chat_template', '')
    check('<|im_start|>' in tmpl and '<think>' in tmpl and 'add_generation_prompt' in tmpl
          and '<tool_call>' in tmpl, 'chat template is not ChatML + thinking + tools')


def check_qat_structure(g):
    """Q1_0 matrices: one magnitude per 128-group, values +-s; ternary ones {-s,0,+s}."""
    for n, t in g.tensors.items():
        w = g.get(n)
        if t.fmt[0] in ('Q1_0', 'Q2_0', 'Q2_0_G64') and len(t.ne) == 2:
            grp = np.abs(w.reshape(-1, 128))   # one magnitude per 128 elements in every layout
            s = grp.max(axis=1, keepdims=True)
            ok = np.all((grp == s) | (grp == 0)) and np.all(s > 0)
            if t.fmt[0] == 'Q1_0':
                ok = ok and np.all(grp == s)
            check(ok, '%s: not one magnitude per group' % n)
        if n.endswith('norm.weight'):
            check(np.all(np.abs(w - 1) < 0.35), '%s: norm weights not near 1' % n)
        if n.endswith('ssm_a'):
            check(np.all(w < 0) and np.all(w > -2), '%s: ssm_a must be in (-2, 0)' % n)
        if n.endswith('ssm_dt.bias') or n.endswith('ssm_conv1d.weight'):
            check(np.all(np.abs(w) <= 0.5), '%s: not small' % n)


def check_tiny(d):
    opened = {}

    def f(name):
        if name not in opened:
            opened[name] = GGUF(os.path.join(d, 'tiny-%s.gguf' % name))
        return opened[name]
    fx_q1, fx_q2, fx_d = (GGUF(os.path.join(FIX, n)) for n in ('tiny-q1_0.gguf', 'tiny-q2_0.gguf', 'tiny-dspark-f32.gguf'))
    q1, f32, f32t = f('q1_0'), f('f32'), f('f32-ternary')
    # The same tensor table and hyperparameter keys as the fixtures (made by llama.cpp's tools).
    same_table(q1, fx_q1, 'tiny q1_0 vs fixture')
    q2ab = f('q2_0-abbf16')
    same_table(q2ab, fx_q2, 'tiny q2_0 (bf16 alpha/beta) vs fixture')
    same_keys(q1, fx_q1, 'qwen35.', 'tiny q1_0')
    check(q1.meta['general.architecture'] == 'qwen35', 'architecture')
    check(q1.meta['general.file_type'] == 40 and f32.meta['general.file_type'] == 0, 'file_type')
    check(q2ab.meta['general.file_type'] == 41, 'q2_0 file_type')
    check_tokenizer(q1, 1024)
    check(q1.meta['tokenizer.ggml.tokens'] == f32.meta['tokenizer.ggml.tokens'], 'vocabulary differs between types')
    check_qat_structure(q1)
    check_qat_structure(f('q2_0'))
    # One seed, the same logical weights in every type.
    for n in f32.tensors:
        a = f32.get(n)
        for other in ('q1_0', 'bf16', 'f16'):
            check(np.array_equal(f(other).get(n), a), '%s: %s differs from f32' % (n, other))
        for other in ('q2_0', 'q2_0_g64'):
            check(np.array_equal(f(other).get(n), f32t.get(n)), '%s: %s differs from ternary f32' % (n, other))
        for other, tol in (('q4_1', 0.01), ('q8_0', 0.01)):
            err = np.abs(f(other).get(n) - a).max() / max(np.abs(a).max(), 1e-12)
            check(err <= tol, '%s: %s off by %.3g of max |w| (tolerance %g)' % (n, other, err, tol))
    # Numerically sane: float64 reference forward of the q1_0 and q2_0 models.
    for name in ('q1_0', 'q2_0'):
        m = Qwen35Ref(os.path.join(d, 'tiny-%s.gguf' % name))
        outs, logits = m.forward([9, 300, 17, 500, 956, 42, 7, 700, 1, 2, 3, 600, 33, 80, 200, 958])
        rms = np.sqrt((outs ** 2).mean(axis=(1, 2)))
        check(np.all(np.isfinite(logits)), '%s: non-finite logits' % name)
        check(np.all((rms > 0.3) & (rms < 5)), '%s: residual RMS per layer %s not O(1)' % (name, rms))
        sd = logits.std(axis=1)
        check(np.all((sd > 0.5) & (sd < 6)), '%s: logit std %s' % (name, sd))
        print('%s: residual RMS %s, logit std %.2f..%.2f' % (name, np.round(rms, 2), sd.min(), sd.max()))
    # Shape overrides reach the metadata and the tensors.
    s = f('small')
    check(s.meta['qwen35.block_count'] == 4 and s.meta['qwen35.embedding_length'] == 128, 'small: keys')
    check(s.meta['qwen35.rope.dimension_sections'] == [3, 3, 2, 0], 'small: rope sections')
    check(len(s.meta['tokenizer.ggml.tokens']) == 512, 'small: n_vocab')
    check(list(s.tensors['blk.1.attn_q.weight'].ne) == [128, 2 * 4 * 32], 'small: attn_q shape')
    check('blk.0.attn_qkv.weight' in s.tensors and 'blk.3.attn_q.weight' in s.tensors, 'small: interval 2')
    check(len(s.tensors) == 2 * 14 + 2 * 11 + 3, 'small: tensor count %d' % len(s.tensors))
    # Drafter: the fixture's table and keys; shares token_embd/output with the target of its seed.
    dr = f('drafter')
    same_table(dr, fx_d, 'drafter-tiny vs fixture')
    same_keys(dr, fx_d, 'dspark.', 'drafter-tiny')
    check(dr.meta['general.architecture'] == 'dspark' and dr.meta['tokenizer.ggml.model'] == 'none', 'drafter arch')
    for n in ('token_embd.weight', 'output.weight'):
        check(np.array_equal(dr.get(n), f32.get(n)), 'drafter %s differs from the target\'s' % n)
    dq = f('drafter-q4_1')
    types = {n: t.fmt[0] for n, t in dq.tensors.items()}
    check(types['token_embd.weight'] == 'Q1_0' and types['dspark.markov_head_a.weight'] == 'BF16'
          and types['dspark.log_snr_fc2.weight'] == 'BF16' and types['blk.0.attn_q.weight'] == 'Q4_1'
          and types['dspark.confidence_head.bias'] == 'F32', 'drafter q4_1 pack types %s' % types)


def expected_qwen35(L, E, F, H, Hkv, D, Kh, Vh, Ds, conv, V, interval, mt, ab):
    """The Bonsai-27B tensor table from qwen35-arch.md §5.2."""
    t = {'token_embd.weight': ([E, V], mt), 'output_norm.weight': ([E], 'f32'), 'output.weight': ([E, V], mt)}
    for i in range(L):
        p = 'blk.%d.' % i
        t.update({p + 'attn_norm.weight': ([E], 'f32'), p + 'post_attention_norm.weight': ([E], 'f32'),
                  p + 'ffn_gate.weight': ([E, F], mt), p + 'ffn_up.weight': ([E, F], mt),
                  p + 'ffn_down.weight': ([F, E], mt)})
        if (i + 1) % interval:
            t.update({p + 'attn_qkv.weight': ([E, 2 * Kh * Ds + Vh * Ds], mt), p + 'attn_gate.weight': ([E, Vh * Ds], mt),
                      p + 'ssm_beta.weight': ([E, Vh], ab), p + 'ssm_alpha.weight': ([E, Vh], ab),
                      p + 'ssm_conv1d.weight': ([conv, 2 * Kh * Ds + Vh * Ds], 'f32'), p + 'ssm_dt.bias': ([Vh], 'f32'),
                      p + 'ssm_a': ([Vh], 'f32'), p + 'ssm_norm.weight': ([Ds], 'f32'),
                      p + 'ssm_out.weight': ([Vh * Ds, E], mt)})
        else:
            t.update({p + 'attn_q.weight': ([E, 2 * H * D], mt), p + 'attn_k.weight': ([E, Hkv * D], mt),
                      p + 'attn_v.weight': ([E, Hkv * D], mt), p + 'attn_output.weight': ([H * D, E], mt),
                      p + 'attn_q_norm.weight': ([D], 'f32'), p + 'attn_k_norm.weight': ([D], 'f32')})
    return t


def expected_dspark(L, E, F, H, Hkv, D, V, R, ntap, embd, mt, ma, ls):
    """The Bonsai drafter table from prism-fork.md §3.1."""
    t = {'token_embd.weight': ([E, V], embd), 'output.weight': ([E, V], mt), 'output_norm.weight': ([E], 'f32'),
         'dspark.fc.weight': ([ntap * E, E], mt), 'dspark.hidden_norm.weight': ([E], 'f32'),
         'dspark.markov_head_a.weight': ([R, V], ma), 'dspark.markov_head_b.weight': ([R, V], mt),
         'dspark.confidence_head.weight': ([E + R, 1], mt), 'dspark.confidence_head.bias': ([1], 'f32'),
         'dspark.log_snr_fc1.weight': ([128, E], ls), 'dspark.log_snr_fc1.bias': ([E], 'f32'),
         'dspark.log_snr_fc2.weight': ([E, E], ls), 'dspark.log_snr_fc2.bias': ([E], 'f32')}
    for i in range(L):
        p = 'blk.%d.' % i
        t.update({p + 'attn_norm.weight': ([E], 'f32'), p + 'ffn_norm.weight': ([E], 'f32'),
                  p + 'attn_q.weight': ([E, H * D], mt), p + 'attn_k.weight': ([E, Hkv * D], mt),
                  p + 'attn_v.weight': ([E, Hkv * D], mt), p + 'attn_output.weight': ([H * D, E], mt),
                  p + 'attn_q_norm.weight': ([D], 'f32'), p + 'attn_k_norm.weight': ([D], 'f32'),
                  p + 'ffn_gate.weight': ([E, F], mt), p + 'ffn_up.weight': ([E, F], mt),
                  p + 'ffn_down.weight': ([F, E], mt)})
    return t


BLOCK = {'f32': (1, 4), 'bf16': (1, 2), 'q1_0': (128, 18), 'q2_0': (128, 34), 'q4_1': (32, 20)}


def check_dry(preset, path):
    rows, total = {}, None
    for line in open(path):
        if line.startswith('# tensors'):
            total = line.split()
            continue
        name, typ, shape, nbytes = line.rstrip('\n').split('\t')
        check(name not in rows, 'duplicate %s' % name)
        rows[name] = ([int(x) for x in shape.split(',')], typ, int(nbytes))
    exp = {
        'bonsai-27b': lambda: expected_qwen35(64, 5120, 17408, 24, 4, 256, 16, 48, 128, 4, 248320, 4, 'q1_0', 'q1_0'),
        'ternary-bonsai-27b': lambda: expected_qwen35(64, 5120, 17408, 24, 4, 256, 16, 48, 128, 4, 248320, 4, 'q2_0', 'bf16'),
        'drafter-bonsai-27b': lambda: expected_dspark(6, 5120, 5120, 40, 4, 128, 248320, 256, 5, 'q1_0', 'q4_1', 'bf16', 'bf16'),
        'drafter-ternary-bonsai-27b': lambda: expected_dspark(6, 5120, 5120, 40, 4, 128, 248320, 256, 5, 'q2_0', 'q4_1', 'bf16', 'bf16'),
        'drafter-bonsai-27b-bf16': lambda: expected_dspark(6, 5120, 5120, 40, 4, 128, 248320, 256, 5, 'bf16', 'bf16', 'bf16', 'bf16'),
    }[preset]()
    check(len(rows) == len(exp), '%s: %d tensors, expected %d' % (preset, len(rows), len(exp)))
    check(set(rows) == set(exp), '%s: names differ: %s' % (preset, sorted(set(rows) ^ set(exp))[:8]))
    size = 0
    for n in set(rows) & set(exp):
        shape, typ, nb = rows[n]
        check((shape, typ) == exp[n], '%s: %s is %s %s, expected %s' % (preset, n, typ, shape, exp[n]))
        be, bb = BLOCK[exp[n][1]]
        want = int(np.prod(exp[n][0])) // be * bb
        check(nb == want, '%s: %s has %d bytes, expected %d' % (preset, n, nb, want))
        size += want
    check(total is not None and int(total[2]) == len(rows) and int(total[4]) == size, '%s: totals line %s' % (preset, total))
    counts = {}
    for shape, typ, nb in rows.values():
        counts[typ] = counts.get(typ, 0) + 1
    # Published facts (reference notes): header scans and file sizes of the real files.
    if preset == 'bonsai-27b':
        check(counts == {'q1_0': 498, 'f32': 353}, 'bonsai-27b type counts %s (real file: 498 q1_0 + 353 f32)' % counts)
        check(3_780_000_000 < size < 3_803_452_480, 'bonsai-27b tensor bytes %d vs the 3,803,452,480-byte file' % size)
    if preset == 'ternary-bonsai-27b':
        check(counts == {'q2_0': 402, 'bf16': 96, 'f32': 353}, 'ternary type counts %s (real: 402 + 96 bf16 + 353 f32)' % counts)
    # Both published drafter packs are their tensor bytes plus the same 5,820-byte header.
    if preset == 'drafter-bonsai-27b':
        check(size + 5820 == 1_787_468_768, 'drafter bytes %d + 5820 != Bonsai-27B-dspark-Q4_1 size' % size)
    if preset == 'drafter-ternary-bonsai-27b':
        check(size + 5820 == 1_946_393_568, 'drafter bytes %d + 5820 != Ternary-Bonsai-27B-dspark-Q4_1 size' % size)
    print('%s: %d tensors, %s, %d bytes' % (preset, len(rows), counts, size))


def check_dry_matches_file(dry, path):
    g = GGUF(path)
    names = []
    for line in open(dry):
        if not line.startswith('#'):
            name, typ, shape, nbytes = line.rstrip('\n').split('\t')
            names.append(name)
            t = g.tensors.get(name)
            check(t is not None and [int(x) for x in shape.split(',')] == list(t.ne) and typ == t.fmt[0].lower()
                  and int(nbytes) == t.nbytes, '--dry-run row %s does not match the written file' % name)
    check(names == list(g.tensors), '--dry-run order differs from the file')


def check_inspect(dry, js, kind):
    """`bitspark inspect --json` of the written file reports the --dry-run table and the kind."""
    import json
    j = json.load(open(js))
    rows = [l.rstrip('\n').split('\t') for l in open(dry) if not l.startswith('#')]
    got = [[t['name'], t['type'], ','.join(str(x) for x in t['shape']), str(t['bytes'])] for t in j['tensors']]
    check(got == rows, 'inspect --json tensor table differs from --dry-run')
    check(j['model']['kind'] == kind, 'inspect says %r, expected %r' % (j['model'].get('kind'), kind))


if __name__ == '__main__':
    if sys.argv[1] == 'tiny':
        check_tiny(sys.argv[2])
    elif sys.argv[1] == 'dry':
        check_dry(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == 'dryfile':
        check_dry_matches_file(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == 'inspect':
        check_inspect(sys.argv[2], sys.argv[3], sys.argv[4])
    if failures:
        print('%d failures' % failures)
        sys.exit(1)
    print('ok')
