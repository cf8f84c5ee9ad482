"""PyTorch DSpark drafter (../shared/reference/dspark.md §1-§4, prism-fork.md §3.1-3.3).

Context: the target's residual stream after layers `taps` (concatenated) -> c = RMSNorm(fc · F)
⊙ hidden_norm, injected as extra K/V rows in every layer (never queries, never the residual
stream). Block: [anchor, MASK, MASK, MASK] at positions s..s+3, token embedding + log-SNR
addend (anchor t=1000, masks t=0), non-causal attention over (allowed context rows + the whole
block), Qwen3 layers (q/k per-head RMSNorm, NeoX RoPE over the full head dim, GQA blocked).
Slot k predicts the token at s+k+1 (the anchor slot predicts). Heads: base logits U = output ·
RMSNorm(x) ⊙ output_norm; vanilla Markov bias W2 · W1[prev]; confidence sigmoid(w·[hN ; W1[prev]] + b).
Parameter names follow the GGUF tensor names.
"""
import math
from dataclasses import dataclass, field, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DConfig:
    n_vocab: int = 2048
    n_embd: int = 256
    n_layer: int = 2
    n_ff: int = 512
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    rope_theta: float = 1e7
    eps: float = 1e-6
    block_size: int = 4
    mask_id: int = 2047
    markov_rank: int = 32
    taps: list = field(default_factory=lambda: [1, 4, 6])
    min_log_snr: float = -9.0
    max_log_snr: float = 9.0


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    """NeoX RoPE over the whole head dim. x (..., N, H, D), pos (N,) or broadcastable."""
    D = x.shape[-1]
    half = D // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float32) * 2 / D)
    ang = pos.float()[..., None] * inv                              # (..., N, half)
    c, s = ang.cos()[..., None, :], ang.sin()[..., None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def log_snr_features(c):
    """(block_size, 128) sinusoidal features of each slot's log-SNR (dspark.md §2.6)."""
    lam = torch.tensor([c.max_log_snr if k % c.block_size == 0 else c.min_log_snr
                        for k in range(c.block_size)], dtype=torch.float32)
    t = (lam - c.min_log_snr) / (c.max_log_snr - c.min_log_snr) * 1000.0
    f = torch.exp(-math.log(10000.0) * torch.arange(64, dtype=torch.float32) / 64)
    return torch.cat([torch.sin(t[:, None] * f), torch.cos(t[:, None] * f)], dim=1)


def _lin(o, i, std=0.02):
    return nn.Parameter(torch.randn(o, i) * std)


class DLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        hd = c.head_dim
        self.attn_norm = nn.Parameter(torch.ones(c.n_embd))
        self.attn_q = _lin(c.n_head * hd, c.n_embd)
        self.attn_k = _lin(c.n_head_kv * hd, c.n_embd)
        self.attn_v = _lin(c.n_head_kv * hd, c.n_embd)
        self.attn_output = _lin(c.n_embd, c.n_head * hd, 0.01)
        self.attn_q_norm = nn.Parameter(torch.ones(hd))
        self.attn_k_norm = nn.Parameter(torch.ones(hd))
        self.ffn_norm = nn.Parameter(torch.ones(c.n_embd))
        self.ffn_gate = _lin(c.n_ff, c.n_embd)
        self.ffn_up = _lin(c.n_ff, c.n_embd)
        self.ffn_down = _lin(c.n_embd, c.n_ff, 0.01)


class DSpark(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E = c.n_embd
        self.token_embd = nn.Parameter(torch.zeros(c.n_vocab, E), requires_grad=False)
        self.output = nn.Parameter(torch.zeros(c.n_vocab, E), requires_grad=False)
        self.output_norm = nn.Parameter(torch.ones(E))
        self.fc = _lin(E, E * len(c.taps))
        self.hidden_norm = nn.Parameter(torch.ones(E))
        self.markov_head_a = _lin(c.n_vocab, c.markov_rank)
        self.markov_head_b = nn.Parameter(torch.zeros(c.n_vocab, c.markov_rank))
        self.confidence_head = _lin(1, E + c.markov_rank)
        self.confidence_bias = nn.Parameter(torch.zeros(1))
        self.log_snr_fc1 = _lin(E, 128)
        self.log_snr_fc1_b = nn.Parameter(torch.zeros(E))
        self.log_snr_fc2 = _lin(E, E)
        self.log_snr_fc2_b = nn.Parameter(torch.zeros(E))
        self.layers = nn.ModuleList([DLayer(c) for _ in range(c.n_layer)])

    def snr_addend(self):
        f = log_snr_features(self.c)
        return F.silu(f @ self.log_snr_fc1.t() + self.log_snr_fc1_b) @ self.log_snr_fc2.t() + self.log_snr_fc2_b

    def context(self, feat):
        return rmsnorm(feat @ self.fc.t(), self.hidden_norm, self.c.eps)

    def backbone(self, ctx, ctx_pos, blk_ids, blk_pos, allow):
        """ctx (B, Nc, E) fused context rows at positions ctx_pos (Nc,); blk_ids (B, Nb) block
        tokens at positions blk_pos (B, Nb); allow (B, Nb, Nc + Nb) bool: which keys each block
        row may see. Returns the post-final-norm hidden hN (B, Nb, E)."""
        c = self.c
        B, Nb = blk_ids.shape
        hd, H, KV = c.head_dim, c.n_head, c.n_head_kv
        x = F.embedding(blk_ids, self.token_embd) + self.snr_addend().repeat(Nb // c.block_size, 1)
        bias = torch.zeros(allow.shape).masked_fill(~allow, float('-inf'))[:, None]
        for L in self.layers:
            h = rmsnorm(x, L.attn_norm, c.eps)
            a_in = torch.cat([ctx, h], dim=1)                               # (B, Nc+Nb, E)
            kpos = torch.cat([ctx_pos.expand(B, -1), blk_pos], dim=1)
            q = (h @ L.attn_q.t()).reshape(B, Nb, H, hd)
            k = (a_in @ L.attn_k.t()).reshape(B, -1, KV, hd)
            v = (a_in @ L.attn_v.t()).reshape(B, -1, KV, hd)
            q = rope(rmsnorm(q, L.attn_q_norm, c.eps), blk_pos, c.rope_theta)
            k = rope(rmsnorm(k, L.attn_k_norm, c.eps), kpos, c.rope_theta)
            k = k.repeat_interleave(H // KV, dim=2).transpose(1, 2)
            v = v.repeat_interleave(H // KV, dim=2).transpose(1, 2)
            att = (q.transpose(1, 2) @ k.transpose(-1, -2)) / math.sqrt(hd) + bias
            o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, Nb, H * hd)
            x = x + o @ L.attn_output.t()
            h2 = rmsnorm(x, L.ffn_norm, c.eps)
            x = x + (F.silu(h2 @ L.ffn_gate.t()) * (h2 @ L.ffn_up.t())) @ L.ffn_down.t()
        return rmsnorm(x, self.output_norm, c.eps)

    def heads(self, hN, prev):
        """Base logits, Markov-biased logits and confidence for slots with previous tokens prev."""
        U = hN @ self.output.t()
        w1 = F.embedding(prev, self.markov_head_a)
        logits = U + w1 @ self.markov_head_b.t()
        conf = torch.sigmoid(torch.cat([hN, w1], dim=-1) @ self.confidence_head.t() + self.confidence_bias)[..., 0]
        return U, logits, conf

    @torch.no_grad()
    def draft_greedy(self, feat, anchor, s):
        """One round: context taps feat (Nc, n_embd_cap) at positions 0..Nc-1 (Nc == s), anchor at
        position s. Returns (drafts, confidences, base logits)."""
        c = self.c
        ctx = self.context(feat[None])
        Nc = ctx.shape[1]
        ids = torch.tensor([[anchor] + [c.mask_id] * (c.block_size - 1)])
        pos = torch.arange(s, s + c.block_size)[None]
        allow = torch.ones(1, c.block_size, Nc + c.block_size, dtype=torch.bool)
        hN = self.backbone(ctx, torch.arange(Nc), ids, pos, allow)[0]
        U = hN @ self.output.t()
        prev, drafts, confs = anchor, [], []
        for k in range(c.block_size):
            w1 = self.markov_head_a[prev]
            lg = U[k] + self.markov_head_b @ w1
            lg[c.mask_id] = float('-inf')
            d = int(torch.argmax(lg))
            confs.append(float(torch.sigmoid(torch.cat([hN[k], w1]) @ self.confidence_head[0] + self.confidence_bias[0])))
            drafts.append(d)
            prev = d
        return drafts, confs, U


def config_dict(c):
    return asdict(c)
