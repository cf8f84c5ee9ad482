"""Independent float64 reference of the qwen35 forward pass (Qwen3.5 / Bonsai-27B hybrid).

Follows ../shared/reference/qwen35-arch.md to the letter, in float64 with float activations: it
is an oracle for the maths, deliberately NOT an emulation of llama.cpp's float32 arithmetic or of
its int8 activation quantization. Weights are dequantized exactly (gguf_reader.py).

    m = Qwen35Ref(path)
    layer_out, logits = m.forward(tokens)
        layer_out: (n_layer, T, n_embd)  residual stream after each layer
        logits:    (T, n_vocab)

The sequence is processed causally position by position inside each layer, so the result is
what any correct engine must produce however it splits the tokens into batches.
"""
import math
import sys
import numpy as np

from gguf_reader import GGUF


def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis; w as stored (+1 already baked)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def l2norm(x, eps):
    """x / max(||x||_2, eps) over the last axis (ggml_l2_norm)."""
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def imrope_text_pairs(pairs, sections):
    """Which rotation pairs get the token position under llama.cpp's interleaved M-RoPE
    (rope type IMROPE, qwen35-arch.md §3.3). Text tokens carry positions (p, p, p, 0): pair i
    takes stream t/h/w when its sector (i mod sum(sections)) falls in the interleaved t/h/w
    pattern, else the 4th stream, position 0. With Qwen's sections ([11,11,10,0] for 32 pairs,
    [3,3,2,0] for 8) every pair is t/h/w, so this is exactly NeoX RoPE; other sections can leave
    pairs unrotated. The spec states only the Qwen case; the sector rule (sector % 3 picks t, h,
    w while sector < 3 * that section) is ggml's mrope cache as the engine also implements it."""
    mask = np.ones(pairs, dtype=bool)
    if not sections or sum(sections) <= 0:
        return mask                                          # plain NeoX
    s, total = list(sections) + [0] * (4 - len(sections)), sum(sections)
    for i in range(pairs):
        sector = i % total
        r = sector % 3
        mask[i] = sector < 3 * s[r]                          # r = 0 t, 1 h, 2 w
    return mask


class Hparams:
    def __init__(self, meta):
        a = meta.get('general.architecture')
        if a != 'qwen35':
            raise ValueError('architecture %r is not qwen35' % a)
        g = lambda k, d=None: meta.get('qwen35.' + k, d)
        self.n_layer = int(g('block_count'))
        self.n_embd = int(g('embedding_length'))
        self.n_ff = int(g('feed_forward_length'))
        self.n_head = int(g('attention.head_count'))
        self.n_head_kv = int(g('attention.head_count_kv'))
        self.head_dim = int(g('attention.key_length', self.n_embd // self.n_head))
        self.v_head_dim = int(g('attention.value_length', self.head_dim))
        self.eps = float(g('attention.layer_norm_rms_epsilon'))
        self.rope_base = float(g('rope.freq_base', 10000.0))
        self.n_rot = int(g('rope.dimension_count', self.head_dim))
        self.rope_sections = g('rope.dimension_sections')
        self.text_pairs = imrope_text_pairs(self.n_rot // 2, self.rope_sections)
        # DeltaNet keys (absent values only matter if the file has DeltaNet layers)
        self.conv_kernel = int(g('ssm.conv_kernel', 0))
        self.d_k = int(g('ssm.state_size', 0))          # linear key head dim
        self.n_k_heads = int(g('ssm.group_count', 0))
        self.n_v_heads = int(g('ssm.time_step_rank', 0))
        self.d_v = int(g('ssm.inner_size', 0)) // max(self.n_v_heads, 1)
        rec = g('attention.recurrent_layers')
        if rec is not None:
            self.is_attn = [not bool(r) for r in rec]
        else:
            iv = int(g('full_attention_interval', 4))
            self.is_attn = [(i + 1) % iv == 0 for i in range(self.n_layer)]


class HadamardFold:
    """PrismML's prism.hadamard.* fold (Bonsai 2), written from its definition: each block of
    `block` inputs meets the normalized Sylvester-Walsh-Hadamard matrix, built here by Kronecker
    doubling (not the engine's butterfly); a folded weight takes x -> H (s * P x), P regrouping
    ssm_out's V heads from the tiled [rep][nk][hd] order to [nk][rep][hd]; the latent token table
    gives rows back as s * (H z)."""

    def __init__(self, meta, hp):
        k = lambda name, d=None: meta.get('prism.hadamard.' + name, d)
        assert k('transform') == 'normalized-sylvester-walsh-hadamard' and k('axis') == 'input-last-dimension'
        self.block = int(k('block_size'))
        H = np.array([[1.0]])
        while H.shape[0] < self.block:
            H = np.block([[H, H], [H, -H]])
        self.H = H / math.sqrt(self.block)
        self.signs = {}
        if k('sign_mode', 'identity') == 'explicit':
            vals, at = np.asarray(k('sign_values'), dtype=np.float64), 0
            for w in k('sign_widths'):
                self.signs[int(w)] = vals[at:at + int(w)]
                at += int(w)
        self.names = set(k('weight_names', []))
        self.inverse = set(k('inverse_weight_names', []))
        self.grouped = bool(k('gdn_v_grouped', False))
        self.hp = hp

    def _rotate(self, x):
        T, n = x.shape
        return (x.reshape(T, n // self.block, self.block) @ self.H).reshape(T, n)

    def _sign(self, x):
        return x * self.signs[x.shape[1]] if self.signs else x

    def input(self, x, name):
        latent_head = name == 'token_embd.weight' and name in self.inverse   # a tied, folded head
        if name not in self.names and not latent_head:
            return x
        if self.grouped and name.endswith('.ssm_out.weight'):
            hp, T = self.hp, x.shape[0]
            rep = hp.n_v_heads // hp.n_k_heads
            x = x.reshape(T, rep, hp.n_k_heads, hp.d_v).transpose(0, 2, 1, 3).reshape(T, -1)
        return self._rotate(self._sign(x))

    def rows(self, z, name):
        return self._sign(self._rotate(z)) if name in self.inverse else z


class Qwen35Ref:
    def __init__(self, path):
        self.g = GGUF(path)
        self.hp = Hparams(self.g.meta)
        self._cache = {}
        folded = any(k.startswith('prism.hadamard.') for k in self.g.meta)
        self.fold = HadamardFold(self.g.meta, self.hp) if folded else None

    def w(self, name):
        if name not in self._cache:
            self._cache[name] = self.g.get(name)
        return self._cache[name]

    def mm(self, x, name):
        """x @ W^T for the weight matrix `name` (ne {in, out}), x rotated first where the file
        folds the weight."""
        return self.product(self.fold.input(x, name) if self.fold else x, name)

    def product(self, x, name):
        """Every weight product goes through here, so a subclass can change how activations
        meet weights."""
        return x @ self.w(name).T

    # --- Gated DeltaNet (qwen35-arch.md §2) ---------------------------------------------------
    def deltanet(self, il, x):
        hp, p = self.hp, 'blk.%d.' % il
        T = x.shape[0]
        nk, nv, dk, dv = hp.n_k_heads, hp.n_v_heads, hp.d_k, hp.d_v
        mixed = self.mm(x, p + 'attn_qkv.weight')             # (T, 2*nk*dk + nv*dv)
        z = self.mm(x, p + 'attn_gate.weight')                 # (T, nv*dv)
        b = self.mm(x, p + 'ssm_beta.weight')                  # (T, nv)
        a = self.mm(x, p + 'ssm_alpha.weight')                 # (T, nv)
        beta = sigmoid(b)
        g = self.w(p + 'ssm_a') * softplus(a + self.w(p + 'ssm_dt.bias'))
        decay = np.exp(g)

        # causal depthwise conv over time, zero initial state; w[:, K-1] hits the current token
        cw = self.w(p + 'ssm_conv1d.weight')                     # (C, K)
        K = cw.shape[1]
        xe = np.concatenate([np.zeros((K - 1, mixed.shape[1])), mixed], axis=0)
        y = np.zeros_like(mixed)
        for i in range(K):
            y += xe[i:i + T] * cw[:, i]
        qkv = silu(y)

        q = qkv[:, 0:nk * dk].reshape(T, nk, dk)
        k = qkv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
        v = qkv[:, 2 * nk * dk:].reshape(T, nv, dv)
        q, k = l2norm(q, hp.eps), l2norm(k, hp.eps)
        kmap = np.arange(nv) % nk                                # GGUF tiled V->K head order
        q, k = q[:, kmap], k[:, kmap]                            # (T, nv, dk)

        S = np.zeros((nv, dk, dv))                               # S[h][i=key][j=value]
        o = np.empty((T, nv, dv))
        scale = 1.0 / math.sqrt(dk)
        for t in range(T):
            S *= decay[t][:, None, None]                         # decay first
            u = np.einsum('hij,hi->hj', S, k[t])
            d = (v[t] - u) * beta[t][:, None]
            S += k[t][:, :, None] * d[:, None, :]                # rank-1 delta update
            o[t] = np.einsum('hij,hi->hj', S, q[t]) * scale      # read-out with updated state

        zz = z.reshape(T, nv, dv)
        yh = rmsnorm(o, self.w(p + 'ssm_norm.weight'), hp.eps) * silu(zz)   # ssm_norm raw
        return self.mm(yh.reshape(T, nv * dv), p + 'ssm_out.weight')

    # --- gated full attention (§3) ------------------------------------------------------------
    def rope(self, x, pos):
        """Partial NeoX RoPE on the first n_rot dims. x: (T, H, D)."""
        n = self.hp.n_rot
        half = n // 2
        inv = self.hp.rope_base ** (-2.0 * np.arange(half) / n)
        th = pos[:, None].astype(np.float64) * inv[None, :]      # (T, half)
        th[:, ~self.hp.text_pairs] = 0.0                         # 4th mrope stream: position 0
        c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
        x0, x1 = x[..., 0:half], x[..., half:n]
        out = x.copy()
        out[..., 0:half] = x0 * c - x1 * s
        out[..., half:n] = x0 * s + x1 * c
        return out

    def attention(self, il, x):
        hp, p = self.hp, 'blk.%d.' % il
        T = x.shape[0]
        H, Hkv, D, Dv = hp.n_head, hp.n_head_kv, hp.head_dim, hp.v_head_dim
        qg = self.mm(x, p + 'attn_q.weight').reshape(T, H, 2 * D)   # per head [q | gate]
        q, gate = qg[..., 0:D], qg[..., D:2 * D]
        k = self.mm(x, p + 'attn_k.weight').reshape(T, Hkv, D)
        v = self.mm(x, p + 'attn_v.weight').reshape(T, Hkv, Dv)
        q = rmsnorm(q, self.w(p + 'attn_q_norm.weight'), hp.eps)
        k = rmsnorm(k, self.w(p + 'attn_k_norm.weight'), hp.eps)
        pos = np.arange(T)
        q, k = self.rope(q, pos), self.rope(k, pos)
        kv_of = np.arange(H) // (H // Hkv)                       # blocked GQA
        kq = np.einsum('thd,shd->hts', q, k[:, kv_of]) / math.sqrt(D)
        kq = np.where(np.tril(np.ones((T, T), dtype=bool))[None], kq, -np.inf)
        kq -= kq.max(axis=-1, keepdims=True)
        pr = np.exp(kq)
        pr /= pr.sum(axis=-1, keepdims=True)
        o = np.einsum('hts,shd->thd', pr, v[:, kv_of])            # (T, H, Dv)
        o = o.reshape(T, H * Dv) * sigmoid(gate.reshape(T, H * D))
        return self.mm(o, p + 'attn_output.weight')

    # --- block, head ---------------------------------------------------------------------------
    def ffn(self, il, x):
        p = 'blk.%d.' % il
        gt = self.mm(x, p + 'ffn_gate.weight')
        up = self.mm(x, p + 'ffn_up.weight')
        return self.mm(silu(gt) * up, p + 'ffn_down.weight')

    def forward(self, tokens):
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError('need a non-empty 1-D token list')
        x = self.w('token_embd.weight')[tokens]                 # (T, n_embd), no scaling
        if self.fold:
            x = self.fold.rows(x, 'token_embd.weight')
        outs = []
        for il in range(hp.n_layer):
            p = 'blk.%d.' % il
            hn = rmsnorm(x, self.w(p + 'attn_norm.weight'), hp.eps)
            x = x + (self.attention(il, hn) if hp.is_attn[il] else self.deltanet(il, hn))
            hn = rmsnorm(x, self.w(p + 'post_attention_norm.weight'), hp.eps)
            x = x + self.ffn(il, hn)
            outs.append(x)
        xn = rmsnorm(x, self.w('output_norm.weight'), hp.eps)
        head = 'output.weight' if 'output.weight' in self.g.tensors else 'token_embd.weight'
        return np.stack(outs), self.mm(xn, head)


def rel_l2_rows(ours, ref):
    """Relative L2 error per row: ||ours - ref|| / ||ref||."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(ours - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)


def main(argv):
    """ref_qwen35.py MODEL.gguf ID,ID,... [LOGITS_OUT.f32 [TAPS_OUT.f32]]: prints the argmax per
    position; optionally writes float32 logits rows and, per position, every layer's residual
    output concatenated (the layouts of `bitspark logits -o` and `--taps 0,..,L-1 --taps-out`)."""
    if len(argv) < 3:
        print(main.__doc__)
        return 2
    m = Qwen35Ref(argv[1])
    toks = [int(t) for t in argv[2].split(',')]
    outs, lg = m.forward(toks)
    print('argmax per position:', lg.argmax(axis=1).tolist())
    if len(argv) > 3:
        lg.astype('<f4').tofile(argv[3])
    if len(argv) > 4:
        outs.transpose(1, 0, 2).astype('<f4').tofile(argv[4])
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
