"""Check train/drafter.py's forward against the fixtures' DSpark references: load
$BS_FIXTURES/tiny-dspark-f32.gguf into the PyTorch module and compare the base block logits
(relative L2 per slot), greedy Markov drafts and confidences of every dspark/*.json case."""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests'))
from gguf_reader import GGUF                       # noqa: E402
from drafter import DConfig, DSpark               # noqa: E402


def load_gguf_drafter(path):
    g = GGUF(path)
    m = g.meta
    k = lambda s: m['dspark.' + s]
    emb = g.get('token_embd.weight')
    c = DConfig(n_vocab=emb.shape[0], n_embd=int(k('embedding_length')), n_layer=int(k('block_count')),
                n_ff=int(k('feed_forward_length')), n_head=int(k('attention.head_count')),
                n_head_kv=int(k('attention.head_count_kv')), head_dim=int(k('attention.key_length')),
                rope_theta=float(k('rope.freq_base')), eps=float(k('attention.layer_norm_rms_epsilon')),
                block_size=int(k('dspark.block_size')), mask_id=int(k('dspark.mask_token_id')),
                markov_rank=int(k('dspark.markov_rank')), taps=list(k('dspark.target_layers')),
                min_log_snr=float(k('dspark.min_log_snr')), max_log_snr=float(k('dspark.max_log_snr')))
    d = DSpark(c)
    t = lambda n: torch.tensor(g.get(n), dtype=torch.float32)
    names = {'token_embd': 'token_embd.weight', 'output': 'output.weight', 'output_norm': 'output_norm.weight',
             'fc': 'dspark.fc.weight', 'hidden_norm': 'dspark.hidden_norm.weight',
             'markov_head_a': 'dspark.markov_head_a.weight', 'markov_head_b': 'dspark.markov_head_b.weight',
             'confidence_head': 'dspark.confidence_head.weight', 'confidence_bias': 'dspark.confidence_head.bias',
             'log_snr_fc1': 'dspark.log_snr_fc1.weight', 'log_snr_fc1_b': 'dspark.log_snr_fc1.bias',
             'log_snr_fc2': 'dspark.log_snr_fc2.weight', 'log_snr_fc2_b': 'dspark.log_snr_fc2.bias'}
    with torch.no_grad():
        for a, n in names.items():
            getattr(d, a).copy_(t(n).reshape(getattr(d, a).shape))
        for i, L in enumerate(d.layers):
            for a in ['attn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_q_norm',
                      'attn_k_norm', 'ffn_norm', 'ffn_gate', 'ffn_up', 'ffn_down']:
                getattr(L, a).copy_(t('blk.%d.%s.weight' % (i, a)).reshape(getattr(L, a).shape))
    return d


def main():
    fix = os.environ.get('BS_FIXTURES', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'fixtures'))
    d = load_gguf_drafter(os.path.join(fix, 'tiny-dspark-f32.gguf'))
    ok = True
    for case in ['round1', 'random7', 'random120']:
        j = json.load(open(os.path.join(fix, 'dspark', case + '.json')))
        feat = torch.from_numpy(np.fromfile(os.path.join(fix, 'dspark', case + '.ctx_feat.f32'), '<f4')
                                .reshape(j['n_ctx_rows'], j['n_embd_cap']).copy())
        ref = np.fromfile(os.path.join(fix, 'dspark', case + '.block_logits.f32'), '<f4').reshape(j['block_size'], -1)
        assert j['ctx_pos_first'] == 0 and j['block_pos_first'] == j['n_ctx_rows']
        drafts, confs, U = d.draft_greedy(feat, j['block_tokens'][0], j['block_pos_first'])
        rel = np.linalg.norm(U.numpy() - ref, axis=1) / np.linalg.norm(ref, axis=1)
        cerr = np.max(np.abs(np.array(confs) - np.array(j['confidence'])))
        good = rel.max() <= 1e-4 and drafts == j['drafts_greedy_markov'] and cerr <= 1e-4
        ok &= good
        print('%-10s rel-L2 per slot %s drafts %s (ref %s) conf err %.1e %s' % (
            case, np.array2string(rel, precision=2), drafts, j['drafts_greedy_markov'], cerr, 'ok' if good else 'FAIL'))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
