"""Write a Hugging Face Qwen3.5 checkpoint (config.json with text_config, sharded safetensors,
tokenizer.json, tokenizer_config.json) holding the same model as a qwen35 GGUF, by undoing every
transform of llama.cpp's converter (qwen35-arch.md §2.7, §4.4, §5, §6):
  norms (not ssm_norm) -1, ssm_a -> A_log = log(-ssm_a), GGUF tiled V-head order -> HF grouped
  order (HF head g*R + r <- GGUF head r*K + g), conv1d ne {K, C} -> [C, 1, K], GGUF names -> HF.
Written from the notes, independently of src/convert_hf.c. Used by test_convert_hf.py.

    make_hf(gguf_path, out_dir, dtype='f32'|'bf16', shards=2, extras=True, normalizer={'type': 'NFC'})
"""
import json
import os
import struct

import numpy as np

from gguf_reader import GGUF

LAYER = {
    'attn_norm.weight': 'input_layernorm.weight',
    'post_attention_norm.weight': 'post_attention_layernorm.weight',
    'ffn_gate.weight': 'mlp.gate_proj.weight', 'ffn_up.weight': 'mlp.up_proj.weight',
    'ffn_down.weight': 'mlp.down_proj.weight',
    'attn_q.weight': 'self_attn.q_proj.weight', 'attn_k.weight': 'self_attn.k_proj.weight',
    'attn_v.weight': 'self_attn.v_proj.weight', 'attn_output.weight': 'self_attn.o_proj.weight',
    'attn_q_norm.weight': 'self_attn.q_norm.weight', 'attn_k_norm.weight': 'self_attn.k_norm.weight',
    'attn_qkv.weight': 'linear_attn.in_proj_qkv.weight', 'attn_gate.weight': 'linear_attn.in_proj_z.weight',
    'ssm_beta.weight': 'linear_attn.in_proj_b.weight', 'ssm_alpha.weight': 'linear_attn.in_proj_a.weight',
    'ssm_a': 'linear_attn.A_log', 'ssm_dt.bias': 'linear_attn.dt_bias',
    'ssm_conv1d.weight': 'linear_attn.conv1d.weight', 'ssm_norm.weight': 'linear_attn.norm.weight',
    'ssm_out.weight': 'linear_attn.out_proj.weight',
}
GLOBAL = {'token_embd.weight': 'model.language_model.embed_tokens.weight',
          'output_norm.weight': 'model.language_model.norm.weight', 'output.weight': 'lm_head.weight'}
PLUS1 = {'attn_norm.weight', 'post_attention_norm.weight', 'attn_q_norm.weight', 'attn_k_norm.weight',
         'output_norm.weight'}


def hf_heads(nk, nv):
    """perm[h_hf] = GGUF head holding HF head h_hf (HF g*R + r <- GGUF r*K + g)."""
    r_per = nv // nk
    return [(h % r_per) * nk + h // r_per for h in range(nv)]


def untile_rows(a, off, blk, nk, nv):
    """Rows [off, off + nv*blk) of a: GGUF tiled head blocks -> HF grouped order."""
    out = a.copy()
    for h, g in enumerate(hf_heads(nk, nv)):
        out[off + h * blk: off + (h + 1) * blk] = a[off + g * blk: off + (g + 1) * blk]
    return out


def to_hf(name, w, m):
    """GGUF tensor (numpy, shape reversed from ne) -> (HF name, HF array)."""
    nk, nv = m['qwen35.ssm.group_count'], m['qwen35.ssm.time_step_rank']
    dv = m['qwen35.ssm.inner_size'] // nv
    kd = nk * m['qwen35.ssm.state_size']
    if name in GLOBAL:
        return GLOBAL[name], (w - 1.0 if name in PLUS1 else w)
    _, il, kind = name.split('.', 2)
    hf = 'model.language_model.layers.%s.%s' % (il, LAYER[kind])
    if kind in PLUS1:
        w = w - 1.0
    if kind == 'ssm_a':
        w = np.log(-w)
    if kind in ('attn_qkv.weight', 'ssm_conv1d.weight'):
        w = untile_rows(w, 2 * kd, dv, nk, nv)
    if kind == 'attn_gate.weight':
        w = untile_rows(w, 0, dv, nk, nv)
    if kind in ('ssm_beta.weight', 'ssm_alpha.weight', 'ssm_a', 'ssm_dt.bias'):
        w = untile_rows(w, 0, 1, nk, nv)
    if kind == 'ssm_out.weight':
        w = untile_rows(w.T, 0, dv, nk, nv).T
    if kind == 'ssm_conv1d.weight':
        w = w.reshape(w.shape[0], 1, w.shape[1])
    return hf, w


def encode(w, dtype):
    w32 = np.ascontiguousarray(w, dtype=np.float32)
    if dtype == 'BF16':
        return (w32.view(np.uint32) >> 16).astype(np.uint16).tobytes()   # values are bf16 already
    return w32.tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off = {'__metadata__': {'format': 'pt'}}, 0
    for name, dt, shape, data in tensors:
        header[name] = {'dtype': dt, 'shape': list(shape), 'data_offsets': [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h)
        for t in tensors:
            f.write(t[3])


QWEN_NFC = {'type': 'NFC'}   # the normalizer every Qwen2/Qwen3/Qwen3.5 tokenizer.json declares


def write_tokenizer(g, out, normalizer=QWEN_NFC):
    m = g.meta
    toks, types = m['tokenizer.ggml.tokens'], m['tokenizer.ggml.token_type']
    vocab = {t: i for i, (t, ty) in enumerate(zip(toks, types)) if ty == 1}
    added = [{'id': i, 'content': t, 'single_word': False, 'lstrip': False, 'rstrip': False,
              'normalized': False, 'special': ty == 3}
             for i, (t, ty) in enumerate(zip(toks, types)) if ty in (3, 4)]
    merges = [mg.split(' ', 1) for mg in m['tokenizer.ggml.merges']]   # newer [a, b] form
    tj = {'version': '1.0', 'added_tokens': added, 'normalizer': normalizer,
          'model': {'type': 'BPE', 'vocab': vocab, 'merges': merges}}
    with open(os.path.join(out, 'tokenizer.json'), 'w') as f:
        json.dump(tj, f, ensure_ascii=False)
    tc = {'add_bos_token': False, 'bos_token': None,
          'eos_token': toks[m['tokenizer.ggml.eos_token_id']],
          'pad_token': toks[m['tokenizer.ggml.padding_token_id']],
          'chat_template': m['tokenizer.chat_template']}
    with open(os.path.join(out, 'tokenizer_config.json'), 'w') as f:
        json.dump(tc, f, ensure_ascii=False)


def write_config(g, out):
    m = g.meta
    L, iv = m['qwen35.block_count'], m['qwen35.full_attention_interval']
    nv = m['qwen35.ssm.time_step_rank']
    text = {
        'model_type': 'qwen3_5_text', 'num_hidden_layers': L,
        'hidden_size': m['qwen35.embedding_length'], 'intermediate_size': m['qwen35.feed_forward_length'],
        'num_attention_heads': m['qwen35.attention.head_count'],
        'num_key_value_heads': m['qwen35.attention.head_count_kv'],
        'head_dim': m['qwen35.attention.key_length'], 'vocab_size': g.tensors['token_embd.weight'].ne[1],
        'max_position_embeddings': m['qwen35.context_length'],
        'rms_norm_eps': 1e-6, 'hidden_act': 'silu', 'attn_output_gate': True,
        'linear_num_key_heads': m['qwen35.ssm.group_count'], 'linear_num_value_heads': nv,
        'linear_key_head_dim': m['qwen35.ssm.state_size'],
        'linear_value_head_dim': m['qwen35.ssm.inner_size'] // nv,
        'linear_conv_kernel_dim': m['qwen35.ssm.conv_kernel'], 'full_attention_interval': iv,
        'layer_types': ['full_attention' if (i + 1) % iv == 0 else 'linear_attention' for i in range(L)],
        'rope_parameters': {'rope_type': 'default', 'rope_theta': m['qwen35.rope.freq_base'],
                            'partial_rotary_factor': m['qwen35.rope.dimension_count'] / m['qwen35.attention.key_length'],
                            'mrope_section': list(m['qwen35.rope.dimension_sections'][:3]),
                            'mrope_interleaved': True},
        'tie_word_embeddings': False, 'eos_token_id': m['tokenizer.ggml.eos_token_id'],
    }
    cfg = {'architectures': ['Qwen3_5ForConditionalGeneration'], 'model_type': 'qwen3_5',
           '_name_or_path': m['general.name'], 'text_config': text, 'tie_word_embeddings': False,
           'vision_config': {'depth': 1, 'hidden_size': 16}}
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(cfg, f, indent=1)


def make_hf(gguf_path, out, dtype='f32', shards=2, extras=True, normalizer=QWEN_NFC):
    g = GGUF(gguf_path)
    os.makedirs(out, exist_ok=True)
    tensors = []
    for name, t in g.tensors.items():
        hf, w = to_hf(name, g.get(name), g.meta)
        dt = 'BF16' if dtype == 'bf16' and len(t.ne) > 1 and 'conv1d' not in hf else 'F32'
        tensors.append((hf, dt, w.shape, encode(w, dt)))
    if extras:   # skipped by the converter: a vision tensor and an MTP tensor
        tensors.append(('model.visual.patch_embed.proj.weight', 'F32', (4, 4), np.ones(16, np.float32).tobytes()))
        tensors.append(('mtp.fc.weight', 'F32', (2, 4), np.zeros(8, np.float32).tobytes()))
    tensors.sort(key=lambda t: t[0])
    per = (len(tensors) + shards - 1) // shards
    weight_map = {}
    for s in range(shards):
        fn = 'model-%05d-of-%05d.safetensors' % (s + 1, shards)
        part = tensors[s * per:(s + 1) * per]
        write_safetensors(os.path.join(out, fn), part)
        weight_map.update({t[0]: fn for t in part})
    with open(os.path.join(out, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {}, 'weight_map': weight_map}, f)
    write_config(g, out)
    write_tokenizer(g, out, normalizer)
