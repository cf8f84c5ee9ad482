"""Export the trained target as a Q1_0 qwen35 GGUF (every matrix Q1_0, like Bonsai-27B; norms,
conv, ssm_a, ssm_dt F32; a checkpoint trained with the ternary quantizer gives a legacy Q2_0 file), with the tokenizer and a ChatML + thinking chat template, plus a
reference: PyTorch's float forward of the quantized weights on a fixed held-out token sequence.

    python3 train/export_gguf.py CKPT.pt VOCAB.json OUT.gguf [--ref-tokens N --ref-out PREFIX]

The reference writes PREFIX.json (text, token ids) and PREFIX.logits.f32 (float32 rows of n_vocab).
"""
import argparse
import json
import os

import numpy as np
import torch

from gguf_writer import GGUFWriter
from model import Config, Qwen35, binarize
from tokenizer import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))


def load_target(ckpt):
    st = torch.load(ckpt)
    c = Config(**st['config'])
    m = Qwen35(c)
    m.load_state_dict(st['model'])
    m.eval()
    return m, c


def f32(t):
    return t.detach().float().numpy()


def add_tokenizer(w, tok):
    w.add('tokenizer.ggml.model', 'gpt2')
    w.add('tokenizer.ggml.pre', 'qwen35')
    w.add('tokenizer.ggml.tokens', tok.tokens, 'arr_str')
    w.add('tokenizer.ggml.token_type', tok.types, 'arr_i32')
    w.add('tokenizer.ggml.merges', tok.merges, 'arr_str')
    w.add('tokenizer.ggml.eos_token_id', tok.eos_id, 'u32')
    w.add('tokenizer.ggml.padding_token_id', tok.id_of['<|endoftext|>'], 'u32')
    w.add('tokenizer.ggml.add_bos_token', False)
    w.add('tokenizer.chat_template', open(os.path.join(HERE, 'chat_template.jinja')).read())


def write_target(m, c, tok, path, name=None):
    name = name or ('bitspark-bonsai-tiny-ternary' if c.quant == 'q2_0' else 'bitspark-bonsai-tiny')
    w = GGUFWriter()
    w.add('general.architecture', 'qwen35')
    w.add('general.name', name)
    p = 'qwen35.'
    for k, v in [('block_count', c.n_layer), ('context_length', 8192), ('embedding_length', c.n_embd),
                 ('feed_forward_length', c.n_ff), ('attention.head_count', c.n_head),
                 ('attention.head_count_kv', c.n_head_kv), ('attention.key_length', c.head_dim),
                 ('attention.value_length', c.head_dim)]:
        w.add(p + k, v, 'u32')
    w.add(p + 'attention.layer_norm_rms_epsilon', c.eps, 'f32')
    w.add(p + 'rope.freq_base', c.rope_theta, 'f32')
    w.add(p + 'rope.dimension_count', c.rope_dim, 'u32')
    w.add(p + 'rope.dimension_sections', c.rope_sections, 'arr_i32')
    for k, v in [('ssm.conv_kernel', c.conv_kernel), ('ssm.state_size', c.ssm_head_dim),
                 ('ssm.group_count', c.ssm_k_heads), ('ssm.time_step_rank', c.ssm_v_heads),
                 ('ssm.inner_size', c.ssm_v_heads * c.ssm_head_dim),
                 ('full_attention_interval', c.attn_interval)]:
        w.add(p + k, v, 'u32')
    w.add('general.quantization_version', 2, 'u32')
    # LLAMA_FTYPE_MOSTLY_Q1_0; the Q2_0 family is 41 (as in the fixtures' ternary files)
    w.add('general.file_type', 41 if c.quant == 'q2_0' else 40, 'u32')
    add_tokenizer(w, tok)
    # the quantizer's values (binarize), not the latent weights: Q2_0's reference quantizer (max|w|
    # scale) differs from the ternary QAT one (mean|w|), and is lossless only on its values
    q = lambda n, t: w.tensor(n, f32(binarize(t.detach(), c.quant)), c.quant)
    v = lambda n, t: w.tensor(n, f32(t), 'f32')
    q('token_embd.weight', m.token_embd)
    v('output_norm.weight', m.output_norm)
    q('output.weight', m.output)
    for il, b in enumerate(m.blocks):
        bp = 'blk.%d.' % il
        v(bp + 'attn_norm.weight', b.attn_norm)
        v(bp + 'post_attention_norm.weight', b.post_attention_norm)
        q(bp + 'ffn_gate.weight', b.ffn_gate)
        q(bp + 'ffn_up.weight', b.ffn_up)
        q(bp + 'ffn_down.weight', b.ffn_down)
        x = b.mixer
        if c.is_attn(il):
            q(bp + 'attn_q.weight', x.attn_q)
            q(bp + 'attn_k.weight', x.attn_k)
            q(bp + 'attn_v.weight', x.attn_v)
            q(bp + 'attn_output.weight', x.attn_output)
            v(bp + 'attn_q_norm.weight', x.attn_q_norm)
            v(bp + 'attn_k_norm.weight', x.attn_k_norm)
        else:
            q(bp + 'attn_qkv.weight', x.attn_qkv)
            q(bp + 'attn_gate.weight', x.attn_gate)
            q(bp + 'ssm_beta.weight', x.ssm_beta)
            q(bp + 'ssm_alpha.weight', x.ssm_alpha)
            v(bp + 'ssm_conv1d.weight', x.ssm_conv1d)
            v(bp + 'ssm_dt.bias', x.ssm_dt_bias)
            v(bp + 'ssm_a', -x.A_log.exp())
            v(bp + 'ssm_norm.weight', x.ssm_norm)
            q(bp + 'ssm_out.weight', x.ssm_out)
    w.write(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('ckpt')
    ap.add_argument('vocab')
    ap.add_argument('out')
    ap.add_argument('--ref-text', help='text whose tokens the reference logits are computed on')
    ap.add_argument('--ref-tokens', type=int, default=64)
    ap.add_argument('--ref-out')
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, c = load_target(a.ckpt)
    tok = Tokenizer.load(a.vocab)
    write_target(m, c, tok, a.out)
    print('wrote', a.out, os.path.getsize(a.out), 'bytes')
    if a.ref_out:
        # the first held-out document long enough
        for text in open(a.ref_text).read().split('<|endoftext|>'):
            all_ids = tok.encode(text, specials=False)
            if len(all_ids) >= a.ref_tokens:
                break
        ids = all_ids[:a.ref_tokens]
        with torch.no_grad():
            logits = m(torch.tensor([ids]))[0].double()     # float32 forward of the 1-bit weights
        logits.float().numpy().astype('<f4').tofile(a.ref_out + '.logits.f32')
        json.dump({'tokens': ids, 'n_vocab': c.n_vocab, 'text': text, 'text_n_tokens': len(all_ids),
                   'note': 'PyTorch float32 forward of the quantized (Q1_0-valued) weights'},
                  open(a.ref_out + '.json', 'w'))
        print('reference over %d tokens' % len(ids))


if __name__ == '__main__':
    main()
