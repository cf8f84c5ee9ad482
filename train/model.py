"""PyTorch qwen35 (the Qwen3.5 / Bonsai-27B hybrid) at toy size, trained with 1-bit QAT.

Follows ../shared/reference/qwen35-arch.md. The parameters are kept directly in the GGUF
conventions so export is a plain copy:
  - RMSNorm weights multiply as stored (the GGUF's "+1 baked" form; initialised to 1), except
    `ssm_norm`, which is the raw gated-norm weight (also multiplies as stored, initialised to 1);
  - the DeltaNet V heads are in GGUF (tiled) order: V head n reads K/Q head n % n_k_heads;
  - `A_log` is the parameter, the GGUF gets ssm_a = -exp(A_log);
  - `attn_q` rows are [query(hd) | gate(hd)] per head, interleaved as in the GGUF;
  - conv1d is (C, K), tap K-1 multiplies the current token.
Every matrix (token_embd and output included, as in Bonsai-27B) is used through `binarize`:
sign(w) * mean|w| per 128-group of a row (scale rounded to fp16, as Q1_0 stores it), with a
straight-through gradient, so the exported Q1_0 file holds exactly the weights trained with.
"""
import math
from dataclasses import dataclass, field, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 2048
    n_embd: int = 256
    n_layer: int = 8
    n_ff: int = 512
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    rope_dim: int = 16
    rope_sections: list = field(default_factory=lambda: [3, 3, 2, 0])
    rope_theta: float = 1e7
    ssm_k_heads: int = 2
    ssm_v_heads: int = 6
    ssm_head_dim: int = 64
    conv_kernel: int = 4
    attn_interval: int = 4
    eps: float = 1e-6
    chunk: int = 64
    qat: bool = True
    quant: str = 'q1_0'          # what QAT fakes: 'q1_0' (1 bit) or 'q2_0' (ternary)

    def is_attn(self, il):
        return (il + 1) % self.attn_interval == 0


def binarize(w, enabled=True):
    """Fake quantization with a straight-through estimator (identity gradient). enabled: False
    (float), True or 'q1_0' (1 bit: sign(w) * mean|w| per 128-group, w >= 0 -> +d, as Q1_0
    stores it), 'q2_0' (ternary: s = mean|w| per 128-group (absmean, as BitNet b1.58),
    round(w/s) clamped to {-1, 0, 1} times s). Scales are rounded to fp16 as the files store
    them; a ternary group always holds some |w| >= s, so Q2_0's d = max|q| is exactly s and the
    export is lossless."""
    if not enabled:
        return w
    out, n = w.shape
    g = w.reshape(out, n // 128, 128)
    s = g.abs().mean(dim=2, keepdim=True).half().float()
    if enabled == 'q2_0':
        q = (g / s.clamp(min=1e-30)).round().clamp(-1, 1) * s
    else:
        q = torch.where(g >= 0, s, -s)
    return w + (q.reshape(out, n) - w).detach()


def qmode(c):
    """The binarize() mode of a config: its quantizer while QAT is on, else float."""
    return c.quant if c.qat else False


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_neox(x, pos, rope_dim, theta):
    """NeoX rotation of the first rope_dim dims (pairs i, i + rope_dim/2). x: (B, T, H, D)."""
    half = rope_dim // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float32) * 2 / rope_dim)
    ang = pos[:, None].float() * inv[None, :]                     # (T, half)
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2, rest = x[..., :half], x[..., half:rope_dim], x[..., rope_dim:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c, rest], dim=-1)


def gated_delta_chunked(q, k, v, beta, g, chunk):
    """Chunked gated delta rule (equal to the per-token recurrence of qwen35-arch.md §2.5).
    q, k: (B, H, T, dk) (q already scaled by 1/sqrt(dk)), v: (B, H, T, dv), beta, g: (B, H, T).
    Returns o: (B, H, T, dv). Zero initial state."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    N = (T + pad) // chunk
    q, k, v = (t.reshape(B, H, N, chunk, -1) for t in (q, k, v))
    beta, g = beta.reshape(B, H, N, chunk), g.reshape(B, H, N, chunk)
    gam = g.cumsum(-1)                                                    # (B,H,N,C)
    tri_incl = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))
    diff = gam[..., :, None] - gam[..., None, :]
    D = torch.where(tri_incl, diff, torch.full_like(diff, -1e30)).exp()   # exp(γi-γj), i>=j
    kb = k * beta[..., None]
    vb = v * beta[..., None]
    A = (kb @ k.transpose(-1, -2)) * D
    A = A * torch.tril(torch.ones(chunk, chunk), -1)                     # strictly lower
    eye = torch.eye(chunk).expand_as(A)
    Tm = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)
    U = Tm @ vb
    W = Tm @ (kb * gam.exp()[..., None])
    S = q.new_zeros(B, H, dk, dv)
    outs = []
    qk_mask = tri_incl.float()
    for n in range(N):
        Vp = U[:, :, n] - W[:, :, n] @ S
        qn, kn, gn = q[:, :, n], k[:, :, n], gam[:, :, n]
        o = (qn * gn.exp()[..., None]) @ S + ((qn @ kn.transpose(-1, -2)) * D[:, :, n] * qk_mask) @ Vp
        outs.append(o)
        glast = gn[..., -1:]                                              # (B,H,1)
        S = S * glast.exp()[..., None] + (kn * (glast - gn).exp()[..., None]).transpose(-1, -2) @ Vp
    o = torch.stack(outs, dim=2).reshape(B, H, N * chunk, dv)
    return o[:, :, :T]


def gated_delta_recurrent(q, k, v, beta, g):
    """Reference per-token recurrence (same arguments as gated_delta_chunked)."""
    B, H, T, dk = k.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    outs = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        u = torch.einsum('bhij,bhi->bhj', S, k[:, :, t])
        d = (v[:, :, t] - u) * beta[:, :, t][..., None]
        S = S + k[:, :, t][..., :, None] * d[..., None, :]
        outs.append(torch.einsum('bhij,bhi->bhj', S, q[:, :, t]))
    return torch.stack(outs, dim=2)


def _lin(out, inp, std=0.02):
    return nn.Parameter(torch.randn(out, inp) * std)


class DeltaNetLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        nk, nv, d = c.ssm_k_heads, c.ssm_v_heads, c.ssm_head_dim
        self.conv_dim = 2 * nk * d + nv * d
        self.attn_qkv = _lin(self.conv_dim, c.n_embd)
        self.attn_gate = _lin(nv * d, c.n_embd)
        self.ssm_beta = _lin(nv, c.n_embd)
        self.ssm_alpha = _lin(nv, c.n_embd)
        self.ssm_conv1d = nn.Parameter((torch.rand(self.conv_dim, c.conv_kernel) * 2 - 1) / math.sqrt(c.conv_kernel))
        dt = torch.exp(torch.rand(nv) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.ssm_dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))   # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.empty(nv).uniform_(1, 16)))
        self.ssm_norm = nn.Parameter(torch.ones(d))
        self.ssm_out = _lin(c.n_embd, nv * d, 0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, h, recurrent=False):
        c, q1 = self.c, qmode(self.c)
        B, T, _ = h.shape
        nk, nv, d = c.ssm_k_heads, c.ssm_v_heads, c.ssm_head_dim
        mixed = h @ binarize(self.attn_qkv, q1).t()
        z = h @ binarize(self.attn_gate, q1).t()
        beta = torch.sigmoid(h @ binarize(self.ssm_beta, q1).t())
        a = h @ binarize(self.ssm_alpha, q1).t()
        g = -self.A_log.exp() * F.softplus(a + self.ssm_dt_bias)
        x = F.pad(mixed.transpose(1, 2), (c.conv_kernel - 1, 0))
        x = F.silu(F.conv1d(x, self.ssm_conv1d.unsqueeze(1), groups=self.conv_dim)).transpose(1, 2)
        q = x[..., :nk * d].reshape(B, T, nk, d)
        k = x[..., nk * d:2 * nk * d].reshape(B, T, nk, d)
        v = x[..., 2 * nk * d:].reshape(B, T, nv, d)
        q = F.normalize(q, dim=-1, eps=c.eps)
        k = F.normalize(k, dim=-1, eps=c.eps)
        kmap = torch.arange(nv) % nk                                   # GGUF tiled order
        q = q[:, :, kmap].transpose(1, 2) / math.sqrt(d)
        k = k[:, :, kmap].transpose(1, 2)
        v = v.transpose(1, 2)
        bt, gt = beta.transpose(1, 2), g.transpose(1, 2)
        if recurrent:
            o = gated_delta_recurrent(q, k, v, bt, gt)
        else:
            o = gated_delta_chunked(q, k, v, bt, gt, c.chunk)
        o = o.transpose(1, 2)                                          # (B,T,nv,d)
        y = rmsnorm(o, self.ssm_norm, c.eps) * F.silu(z.reshape(B, T, nv, d))
        return y.reshape(B, T, nv * d) @ binarize(self.ssm_out, q1).t()


class AttentionLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.attn_q = _lin(c.n_head * 2 * hd, c.n_embd)
        self.attn_k = _lin(c.n_head_kv * hd, c.n_embd)
        self.attn_v = _lin(c.n_head_kv * hd, c.n_embd)
        self.attn_output = _lin(c.n_embd, c.n_head * hd, 0.02 / math.sqrt(2 * c.n_layer))
        self.attn_q_norm = nn.Parameter(torch.ones(hd))
        self.attn_k_norm = nn.Parameter(torch.ones(hd))

    def forward(self, h, recurrent=False):
        c, q1 = self.c, qmode(self.c)
        B, T, _ = h.shape
        hd, H, KV = c.head_dim, c.n_head, c.n_head_kv
        qg = (h @ binarize(self.attn_q, q1).t()).reshape(B, T, H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = (h @ binarize(self.attn_k, q1).t()).reshape(B, T, KV, hd)
        v = (h @ binarize(self.attn_v, q1).t()).reshape(B, T, KV, hd)
        q = rmsnorm(q, self.attn_q_norm, c.eps)
        k = rmsnorm(k, self.attn_k_norm, c.eps)
        pos = torch.arange(T)
        q = rope_neox(q, pos, c.rope_dim, c.rope_theta)
        k = rope_neox(k, pos, c.rope_dim, c.rope_theta)
        k = k.repeat_interleave(H // KV, dim=2)                      # blocked GQA: h -> h/(H/KV)
        v = v.repeat_interleave(H // KV, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float('-inf'))
        o = (att.softmax(-1) @ v).transpose(1, 2)                    # (B,T,H,hd)
        o = o * torch.sigmoid(gate)
        return o.reshape(B, T, H * hd) @ binarize(self.attn_output, q1).t()


class Block(nn.Module):
    def __init__(self, c, il):
        super().__init__()
        self.c = c
        self.attn_norm = nn.Parameter(torch.ones(c.n_embd))
        self.post_attention_norm = nn.Parameter(torch.ones(c.n_embd))
        self.mixer = AttentionLayer(c) if c.is_attn(il) else DeltaNetLayer(c)
        self.ffn_gate = _lin(c.n_ff, c.n_embd)
        self.ffn_up = _lin(c.n_ff, c.n_embd)
        self.ffn_down = _lin(c.n_embd, c.n_ff, 0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, x, recurrent=False):
        c, q1 = self.c, qmode(self.c)
        x = x + self.mixer(rmsnorm(x, self.attn_norm, c.eps), recurrent)
        h = rmsnorm(x, self.post_attention_norm, c.eps)
        f = F.silu(h @ binarize(self.ffn_gate, q1).t()) * (h @ binarize(self.ffn_up, q1).t())
        return x + f @ binarize(self.ffn_down, q1).t()


class Qwen35(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.token_embd = _lin(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList([Block(c, i) for i in range(c.n_layer)])
        self.output_norm = nn.Parameter(torch.ones(c.n_embd))
        self.output = _lin(c.n_vocab, c.n_embd)

    def forward(self, ids, taps=None, recurrent=False):
        """ids (B, T) -> logits (B, T, V); with taps (list of layer ids) also the residual
        stream after those layers, concatenated in list order: (B, T, len(taps) * n_embd)."""
        c = self.c
        x = F.embedding(ids, binarize(self.token_embd, qmode(c)))
        tapped = {}
        for il, blk in enumerate(self.blocks):
            x = blk(x, recurrent)
            if taps and il in taps:
                tapped[il] = x
        logits = rmsnorm(x, self.output_norm, c.eps) @ binarize(self.output, qmode(c)).t()
        if taps:
            return logits, torch.cat([tapped[t] for t in taps], dim=-1)
        return logits


def config_dict(c):
    return asdict(c)


# --- inference helpers ------------------------------------------------------------------------
def quantized_copy(model):
    """A copy whose matrices hold their quantized values (what the Q1_0 / Q2_0 GGUF stores), with
    QAT off: the float forward of the quantized weights, cheaper for generation."""
    import copy
    m = copy.deepcopy(model)
    m.c = copy.copy(model.c)
    m.c.qat = False
    with torch.no_grad():
        for mod in m.modules():
            if hasattr(mod, 'c'):
                mod.c = m.c
            for n, p in mod.named_parameters(recurse=False):
                if p.dim() == 2 and n != 'ssm_conv1d':
                    p.copy_(binarize(p, model.c.quant))
    m.eval()
    return m


@torch.no_grad()
def decode_step(m, ids, state, pos):
    """One token per sequence with recurrent state (conv rows, DeltaNet S, KV cache).
    ids (B,), state: list per layer (None at the start), pos: int. Returns logits (B, V), taps
    dict {layer: (B, n_embd)}."""
    c = m.c
    B = ids.shape[0]
    x = F.embedding(ids, m.token_embd)
    outs = {}
    for il, blk in enumerate(m.blocks):
        L = blk.mixer
        h = rmsnorm(x, blk.attn_norm, c.eps)
        if c.is_attn(il):
            hd, H, KV = c.head_dim, c.n_head, c.n_head_kv
            qg = (h @ L.attn_q.t()).reshape(B, 1, H, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
            k = rmsnorm((h @ L.attn_k.t()).reshape(B, 1, KV, hd), L.attn_k_norm, c.eps)
            v = (h @ L.attn_v.t()).reshape(B, 1, KV, hd)
            p = torch.tensor([pos])
            q = rope_neox(rmsnorm(q, L.attn_q_norm, c.eps), p, c.rope_dim, c.rope_theta)
            k = rope_neox(k, p, c.rope_dim, c.rope_theta)
            if state[il] is not None:
                k = torch.cat([state[il][0], k], 1)
                v = torch.cat([state[il][1], v], 1)
            state[il] = (k, v)
            kk = k.repeat_interleave(H // KV, 2).transpose(1, 2)
            vv = v.repeat_interleave(H // KV, 2).transpose(1, 2)
            att = ((q.transpose(1, 2) @ kk.transpose(-1, -2)) / math.sqrt(hd)).softmax(-1)
            o = (att @ vv).transpose(1, 2) * torch.sigmoid(gate)
            mix = o.reshape(B, H * hd) @ L.attn_output.t()
        else:
            nk, nv, d = c.ssm_k_heads, c.ssm_v_heads, c.ssm_head_dim
            mixed = h @ L.attn_qkv.t()
            z = h @ L.attn_gate.t()
            beta = torch.sigmoid(h @ L.ssm_beta.t())
            g = -L.A_log.exp() * F.softplus(h @ L.ssm_alpha.t() + L.ssm_dt_bias)
            if state[il] is None:
                state[il] = (mixed.new_zeros(B, L.conv_dim, c.conv_kernel - 1), mixed.new_zeros(B, nv, d, d))
            conv, S = state[il]
            xe = torch.cat([conv, mixed[:, :, None]], 2)
            y = F.silu((xe * L.ssm_conv1d).sum(-1))
            q = F.normalize(y[:, :nk * d].reshape(B, nk, d), dim=-1, eps=c.eps)
            k = F.normalize(y[:, nk * d:2 * nk * d].reshape(B, nk, d), dim=-1, eps=c.eps)
            v = y[:, 2 * nk * d:].reshape(B, nv, d)
            kmap = torch.arange(nv) % nk
            q, k = q[:, kmap] / math.sqrt(d), k[:, kmap]
            S = S * g.exp()[..., None, None]
            u = torch.einsum('bhij,bhi->bhj', S, k)
            S = S + k[..., :, None] * ((v - u) * beta[..., None])[..., None, :]
            o = torch.einsum('bhij,bhi->bhj', S, q)
            state[il] = (xe[:, :, 1:], S)
            yy = rmsnorm(o, L.ssm_norm, c.eps) * F.silu(z.reshape(B, nv, d))
            mix = yy.reshape(B, nv * d) @ L.ssm_out.t()
        x = x + mix
        h2 = rmsnorm(x, blk.post_attention_norm, c.eps)
        x = x + (F.silu(h2 @ blk.ffn_gate.t()) * (h2 @ blk.ffn_up.t())) @ blk.ffn_down.t()
        outs[il] = x
    return rmsnorm(x, m.output_norm, c.eps) @ m.output.t(), outs


@torch.no_grad()
def generate(m, prompts, n_new, temp=0.0, top_p=1.0, generator=None, stop=None):
    """prompts: (B, P) token ids (same length). m: a quantized_copy. Returns (B, P + n_new)."""
    state = [None] * m.c.n_layer
    B, P = prompts.shape
    seq = prompts.clone()
    for t in range(P - 1):
        decode_step(m, prompts[:, t], state, t)
    cur = prompts[:, -1]
    for t in range(P - 1, P - 1 + n_new):
        lg, _ = decode_step(m, cur, state, t)
        if temp == 0:
            cur = lg.argmax(-1)
        else:
            pr = torch.softmax(lg / temp, -1)
            if top_p < 1.0:
                sp, si = pr.sort(-1, descending=True)
                keep = sp.cumsum(-1) - sp < top_p
                pr = torch.zeros_like(pr).scatter(-1, si, sp * keep)
                pr = pr / pr.sum(-1, keepdim=True)
            cur = torch.multinomial(pr, 1, generator=generator)[:, 0]
        seq = torch.cat([seq, cur[:, None]], 1)
    return seq
