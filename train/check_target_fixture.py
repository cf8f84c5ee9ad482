"""Check train/model.py's forward (the training graph, chunked DeltaNet) against llama.cpp: load
$BS_FIXTURES/tiny-f32.gguf into the PyTorch module (the inverse of export_gguf.py's mapping,
ssm_a -> A_log = log(-ssm_a)) and compare the prompt rows of tiny-f32.logits.f32 (relative L2
per row; the fixtures' f32 bound is 1e-3). Also the taps [1, 4, 6] against tiny-f32.taps.f32."""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests'))
from gguf_reader import GGUF                      # noqa: E402
from model import Config, Qwen35                 # noqa: E402


def load_gguf_target(path, qat=False):
    g = GGUF(path)
    m = g.meta
    k = lambda s: m['qwen35.' + s]
    emb = g.get('token_embd.weight')
    c = Config(n_vocab=emb.shape[0], n_embd=int(k('embedding_length')), n_layer=int(k('block_count')),
               n_ff=int(k('feed_forward_length')), n_head=int(k('attention.head_count')),
               n_head_kv=int(k('attention.head_count_kv')), head_dim=int(k('attention.key_length')),
               rope_dim=int(k('rope.dimension_count')), rope_sections=list(k('rope.dimension_sections')),
               rope_theta=float(k('rope.freq_base')), ssm_k_heads=int(k('ssm.group_count')),
               ssm_v_heads=int(k('ssm.time_step_rank')), ssm_head_dim=int(k('ssm.state_size')),
               conv_kernel=int(k('ssm.conv_kernel')), attn_interval=int(k('full_attention_interval')),
               eps=float(k('attention.layer_norm_rms_epsilon')), qat=qat)
    model = Qwen35(c)
    t = lambda n: torch.tensor(g.get(n), dtype=torch.float32)
    with torch.no_grad():
        model.token_embd.copy_(t('token_embd.weight'))
        model.output.copy_(t('output.weight'))
        model.output_norm.copy_(t('output_norm.weight'))
        for il, b in enumerate(model.blocks):
            p = 'blk.%d.' % il
            for a in ['attn_norm', 'post_attention_norm', 'ffn_gate', 'ffn_up', 'ffn_down']:
                getattr(b, a).copy_(t(p + a + '.weight'))
            x = b.mixer
            if c.is_attn(il):
                for a in ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_q_norm', 'attn_k_norm']:
                    getattr(x, a).copy_(t(p + a + '.weight'))
            else:
                for a in ['attn_qkv', 'attn_gate', 'ssm_beta', 'ssm_alpha', 'ssm_norm', 'ssm_out']:
                    getattr(x, a).copy_(t(p + a + '.weight'))
                x.ssm_conv1d.copy_(t(p + 'ssm_conv1d.weight'))
                x.ssm_dt_bias.copy_(t(p + 'ssm_dt.bias'))
                x.A_log.copy_(torch.log(-t(p + 'ssm_a')))
    model.eval()
    return model, c


def main():
    fix = os.environ.get('BS_FIXTURES', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'fixtures'))
    torch.set_num_threads(1)
    model, c = load_gguf_target(os.path.join(fix, 'tiny-f32.gguf'))
    j = json.load(open(os.path.join(fix, 'tiny-f32.json')))
    toks = j['prompt_tokens']
    ref = np.fromfile(os.path.join(fix, 'tiny-f32.logits.f32'), '<f4').reshape(-1, c.n_vocab)[:len(toks)]
    with torch.no_grad():
        lg, taps = model(torch.tensor([toks]), taps=j['taps_layers'])
    rel = np.linalg.norm(lg[0].numpy() - ref, axis=1) / np.linalg.norm(ref, axis=1)
    tref = np.fromfile(os.path.join(fix, j['taps_file']), '<f4').reshape(len(toks), -1)
    trel = np.linalg.norm(taps[0].numpy() - tref, axis=1) / np.linalg.norm(tref, axis=1)
    print('logits rows %d: worst rel-L2 %.2e median %.2e; taps worst %.2e' % (
        len(toks), rel.max(), np.median(rel), trel.max()))
    sys.exit(0 if rel.max() <= 1e-3 and trel.max() <= 1e-4 else 1)


if __name__ == '__main__':
    main()
