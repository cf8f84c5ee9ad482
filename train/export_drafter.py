"""Export the trained DSpark drafter as a `dspark` GGUF (the keys and tensor names that
`bitspark synth --preset drafter-tiny` writes, prism-fork.md §3.1) and as safetensors +
config.json with the DeepSpec (HF) names.

token_embd / output are the target's frozen 1-bit tables, so they are stored as Q1_0 (exact);
the trained matrices as BF16 (the rounding is applied to the PyTorch module too, so the
acceptance measured afterwards is that of the exported weights); norms, biases F32.

    python3 train/export_drafter.py DRAFTER.pt OUT.gguf OUT_DIR   (OUT_DIR gets model.safetensors, config.json)
"""
import json
import os
import struct
import sys

import numpy as np
import torch

from drafter import DConfig, DSpark
from gguf_writer import GGUFWriter, to_bf16_bits, from_bf16_bits


def load_drafter(path, bf16_round=True):
    st = torch.load(path)
    c = DConfig(**st['config'])
    d = DSpark(c)
    d.load_state_dict(st['model'])
    if bf16_round:
        with torch.no_grad():
            for n, p in d.named_parameters():
                if p.dim() == 2 and n not in ('token_embd', 'output'):
                    p.copy_(torch.from_numpy(from_bf16_bits(to_bf16_bits(p.numpy())).reshape(p.shape)))
    d.eval()
    return d, c


def gguf_tensors(d):
    """(gguf name, array, kind) in the order of bitspark synth's drafter plan."""
    a = lambda t: t.detach().float().numpy()
    out = [('token_embd.weight', a(d.token_embd), 'q1_0'),
           ('output_norm.weight', a(d.output_norm), 'f32'),
           ('output.weight', a(d.output), 'q1_0'),
           ('dspark.fc.weight', a(d.fc), 'bf16'),
           ('dspark.hidden_norm.weight', a(d.hidden_norm), 'f32'),
           ('dspark.markov_head_a.weight', a(d.markov_head_a), 'bf16'),
           ('dspark.markov_head_b.weight', a(d.markov_head_b), 'bf16'),
           ('dspark.confidence_head.weight', a(d.confidence_head), 'bf16'),
           ('dspark.confidence_head.bias', a(d.confidence_bias), 'f32'),
           ('dspark.log_snr_fc1.weight', a(d.log_snr_fc1), 'bf16'),
           ('dspark.log_snr_fc1.bias', a(d.log_snr_fc1_b), 'f32'),
           ('dspark.log_snr_fc2.weight', a(d.log_snr_fc2), 'bf16'),
           ('dspark.log_snr_fc2.bias', a(d.log_snr_fc2_b), 'f32')]
    for i, L in enumerate(d.layers):
        p = 'blk.%d.' % i
        out += [(p + 'attn_norm.weight', a(L.attn_norm), 'f32'), (p + 'ffn_norm.weight', a(L.ffn_norm), 'f32')]
        out += [(p + n + '.weight', a(getattr(L, n)), 'bf16')
                for n in ['attn_q', 'attn_k', 'attn_v', 'attn_output']]
        out += [(p + 'attn_q_norm.weight', a(L.attn_q_norm), 'f32'), (p + 'attn_k_norm.weight', a(L.attn_k_norm), 'f32')]
        out += [(p + n + '.weight', a(getattr(L, n)), 'bf16') for n in ['ffn_gate', 'ffn_up', 'ffn_down']]
    return out


HF_NAMES = {'token_embd.weight': 'embed_tokens.weight', 'output.weight': 'lm_head.weight',
            'output_norm.weight': 'norm.weight', 'dspark.fc.weight': 'fc.weight',
            'dspark.hidden_norm.weight': 'hidden_norm.weight',
            'dspark.markov_head_a.weight': 'markov_head.markov_w1.weight',
            'dspark.markov_head_b.weight': 'markov_head.markov_w2.weight',
            'dspark.confidence_head.weight': 'confidence_head.proj.weight',
            'dspark.confidence_head.bias': 'confidence_head.proj.bias',
            'dspark.log_snr_fc1.weight': 'log_snr_embed.fc1.weight', 'dspark.log_snr_fc1.bias': 'log_snr_embed.fc1.bias',
            'dspark.log_snr_fc2.weight': 'log_snr_embed.fc2.weight', 'dspark.log_snr_fc2.bias': 'log_snr_embed.fc2.bias'}
HF_LAYER = {'attn_norm': 'input_layernorm', 'ffn_norm': 'post_attention_layernorm',
            'attn_q': 'self_attn.q_proj', 'attn_k': 'self_attn.k_proj', 'attn_v': 'self_attn.v_proj',
            'attn_output': 'self_attn.o_proj', 'attn_q_norm': 'self_attn.q_norm', 'attn_k_norm': 'self_attn.k_norm',
            'ffn_gate': 'mlp.gate_proj', 'ffn_up': 'mlp.up_proj', 'ffn_down': 'mlp.down_proj'}


def hf_name(n):
    if n in HF_NAMES:
        return HF_NAMES[n]
    _, i, rest = n.split('.', 2)
    return 'layers.%s.%s.weight' % (i, HF_LAYER[rest[:-len('.weight')]])


def write_safetensors(path, tensors):
    """tensors: [(name, float32 array)] -> BF16 safetensors (norms and biases too, as HF does)."""
    header, blobs, off = {}, [], 0
    for n, arr in tensors:
        b = to_bf16_bits(arr).tobytes()
        header[n] = {'dtype': 'BF16', 'shape': list(arr.shape), 'data_offsets': [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header['__metadata__'] = {'format': 'pt'}
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    ckpt, out_gguf, out_dir = sys.argv[1:4]
    d, c = load_drafter(ckpt)
    w = GGUFWriter()
    w.add('general.architecture', 'dspark')
    w.add('general.name', 'bitspark-bonsai-tiny-dspark')
    p = 'dspark.'
    for k, v in [('block_count', c.n_layer), ('context_length', 8192), ('embedding_length', c.n_embd),
                 ('feed_forward_length', c.n_ff), ('attention.head_count', c.n_head),
                 ('attention.head_count_kv', c.n_head_kv), ('attention.key_length', c.head_dim),
                 ('attention.value_length', c.head_dim)]:
        w.add(p + k, v, 'u32')
    w.add(p + 'attention.layer_norm_rms_epsilon', c.eps, 'f32')
    w.add(p + 'rope.freq_base', c.rope_theta, 'f32')
    w.add(p + 'vocab_size', c.n_vocab, 'u32')
    w.add(p + 'dspark.block_size', c.block_size, 'u32')
    w.add(p + 'dspark.mask_token_id', c.mask_id, 'u32')
    w.add(p + 'dspark.target_layers', c.taps, 'arr_i32')
    w.add(p + 'dspark.markov_rank', c.markov_rank, 'u32')
    w.add(p + 'dspark.confidence_head', True)
    w.add(p + 'dspark.confidence_head_with_markov', True)
    w.add(p + 'dspark.log_snr_conditioning', True)
    w.add(p + 'dspark.min_log_snr', c.min_log_snr, 'f32')
    w.add(p + 'dspark.max_log_snr', c.max_log_snr, 'f32')
    w.add('tokenizer.ggml.model', 'none')
    w.add('general.quantization_version', 2, 'u32')
    w.add('general.file_type', 32, 'u32')                     # mostly BF16
    ts = gguf_tensors(d)
    for n, arr, kind in ts:
        w.tensor(n, arr, kind)
    w.write(out_gguf)
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, 'model.safetensors'), [(hf_name(n), arr) for n, arr, _ in ts])
    cfg = {'architectures': ['Qwen3DSparkModel'], 'model_type': 'qwen3', 'hidden_size': c.n_embd,
           'intermediate_size': c.n_ff, 'num_hidden_layers': c.n_layer, 'num_attention_heads': c.n_head,
           'num_key_value_heads': c.n_head_kv, 'head_dim': c.head_dim, 'rms_norm_eps': c.eps,
           'rope_theta': c.rope_theta, 'vocab_size': c.n_vocab, 'hidden_act': 'silu',
           'tie_word_embeddings': False, 'attention_bias': False, 'torch_dtype': 'bfloat16',
           'block_size': c.block_size, 'mask_token_id': c.mask_id, 'target_layer_ids': c.taps,
           'markov_rank': c.markov_rank, 'markov_head_type': 'vanilla', 'enable_confidence_head': True,
           'confidence_head_with_markov': True, 'log_snr_conditioning': True,
           'min_log_snr': c.min_log_snr, 'max_log_snr': c.max_log_snr}
    json.dump(cfg, open(os.path.join(out_dir, 'config.json'), 'w'), indent=1)
    print('wrote', out_gguf, os.path.getsize(out_gguf), 'bytes and', out_dir)


if __name__ == '__main__':
    main()
