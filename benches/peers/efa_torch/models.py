"""PyTorch versions of the EFA models efa trains (docs/paper.md §2.3, §3.4/§5.3, §6.2–§6.3).

Each model's ``forward`` takes one minibatch and returns the mean training loss, so a training
step is ``loss = model(*batch); loss.backward(); adam.step()``. The parameters are those of
efa's ``EfaConfig::declare`` (same shapes, Keras initialisers), except that each block's query,
key and value kernels are stored side by side in one ``qkv_w`` ``[d, 3·H·K]`` (the usual PyTorch
layout; ``logical_params`` splits it back into efa's names for comparisons).

``attn`` selects how attention is computed: ``"sdpa"`` (``F.scaled_dot_product_attention``,
boolean key mask or ``is_causal``) or ``"explicit"`` (scores, masked with −inf, softmax,
weighted sum). Both compute exactly the same function.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def glorot(shape, fan_in, fan_out, gen):
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return nn.Parameter((torch.rand(shape, generator=gen) * 2 - 1) * limit)


def embedding(shape, gen):
    """Keras ``Embedding`` rows: Uniform(−0.05, 0.05)."""
    return nn.Parameter((torch.rand(shape, generator=gen) * 2 - 1) * 0.05)


def zeros(n):
    return nn.Parameter(torch.zeros(n))


class Dense(nn.Module):
    """``x·W + b`` with ``W`` ``[fan_in, fan_out]`` (Glorot) and an optional zero bias."""

    def __init__(self, fan_in, fan_out, gen, bias=True):
        super().__init__()
        self.w = glorot((fan_in, fan_out), fan_in, fan_out, gen)
        self.b = zeros(fan_out) if bias else None

    def forward(self, x):
        y = x @ self.w
        return y + self.b if self.b is not None else y

    def logical(self, prefix):
        out = [(f"{prefix}.w", tuple(self.w.shape))]
        if self.b is not None:
            out.append((f"{prefix}.b", tuple(self.b.shape)))
        return out


def attention_core(q, k, v, impl, key_mask=None, causal=False):
    """Softmax attention of ``q, k, v`` ``[B, H, N, K]`` with scale 1/√K.

    ``key_mask`` ``[B, 1, 1, N]`` (True = visible) restricts keys; ``causal`` lets query i see
    keys j ≤ i."""
    if impl == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = s.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    if key_mask is not None:
        s = s.masked_fill(~key_mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class MultiHeadAttention(nn.Module):
    """Keras ``MultiHeadAttention(heads, key_dim)`` on width ``d``: Glorot kernels with Keras's
    fans (projections: fan_in = H·d, fan_out = K·d; output: fan_in = K·H, fan_out = d·H), zero
    biases."""

    def __init__(self, d, heads, key_dim, gen):
        super().__init__()
        self.h, self.k = heads, key_dim
        hk = heads * key_dim
        parts = [glorot((d, hk), heads * d, key_dim * d, gen) for _ in range(3)]
        self.qkv_w = nn.Parameter(torch.cat([p.data for p in parts], dim=1))
        self.qkv_b = zeros(3 * hk)
        self.o_w = glorot((hk, d), key_dim * heads, d * heads, gen)
        self.o_b = zeros(d)

    def forward(self, x, impl, key_mask=None, causal=False):
        b, n, _ = x.shape
        qkv = (x @ self.qkv_w + self.qkv_b).view(b, n, 3, self.h, self.k).permute(2, 0, 3, 1, 4)
        o = attention_core(qkv[0], qkv[1], qkv[2], impl, key_mask, causal)
        o = o.transpose(1, 2).reshape(b, n, self.h * self.k)
        return o @ self.o_w + self.o_b

    def logical(self, prefix):
        d, hk = self.qkv_w.shape[0], self.h * self.k
        out = []
        for name in "qkv":
            out += [(f"{prefix}.{name}.w", (d, hk)), (f"{prefix}.{name}.b", (hk,))]
        return out + [(f"{prefix}.o.w", (hk, d)), (f"{prefix}.o.b", (d,))]


class RatingEfa(nn.Module):
    """The synthetic EFA (§2.3): movie 32 ‖ rating 32 (compact rating table), + positions at
    every position, 2 × (x + MHA(x)) with the key-length mask, gather, Dense 32 ReLU, Dense 1;
    MSE."""

    def __init__(self, value_rows, width, impl, seed=0, items=6, dim=32, layers=2):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        d = 2 * dim
        self.impl = impl
        self.item_emb = embedding((items, dim), g)
        self.value_emb = embedding((value_rows, dim), g)
        self.pos_emb = glorot((width, d), width, d, g)
        self.blocks = nn.ModuleList(MultiHeadAttention(d, 2, 16, g) for _ in range(layers))
        self.head0 = Dense(d, 32, g)
        self.out = Dense(32, 1, g)

    def forward(self, movies, values, lengths, pred, target):
        return torch.mean((self.eta(movies, values, lengths, pred) - target) ** 2)

    def eta(self, movies, values, lengths, pred):
        """The natural parameter (the predicted mean) of each sample's target, ``[B]``."""
        b, n = movies.shape
        x = torch.cat([self.item_emb[movies], self.value_emb[values]], dim=-1) + self.pos_emb[:n]
        mask = (torch.arange(n, device=movies.device) < lengths[:, None])[:, None, None, :]
        for blk in self.blocks:
            x = x + blk(x, self.impl, key_mask=mask)
        h = x[torch.arange(b, device=x.device), pred]
        return self.out(torch.relu(self.head0(h))).squeeze(-1)

    def logical_params(self):
        out = [("item_emb", tuple(self.item_emb.shape)), ("value_emb", tuple(self.value_emb.shape)),
               ("pos_emb", tuple(self.pos_emb.shape))]
        for i, blk in enumerate(self.blocks):
            out += blk.logical(f"block{i}.attn")
        return out + self.head0.logical("head0") + self.out.logical("out")


class ItemEfa(nn.Module):
    """The item EFA of ML exp-1 / Instacart (§3.4, §5.3): α (n_items + 2) × 32 zeroed at
    padding, positions added at non-pad positions only, 2 × (x + MHA(x)) with the key-padding
    mask (bi) or the causal mask only (uni), gather, Dense(n_items, no bias); cross-entropy."""

    def __init__(self, n_items, width, uni, impl, seed=0, dim=32, layers=2):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.impl, self.uni = impl, uni
        self.item_emb = embedding((n_items + 2, dim), g)
        self.pos_emb = glorot((width, dim), width, dim, g)
        self.blocks = nn.ModuleList(MultiHeadAttention(dim, 2, 16, g) for _ in range(layers))
        self.out = Dense(dim, n_items, g, bias=False)

    def forward(self, tokens, lengths, pred, target):
        return F.cross_entropy(self.eta(tokens, lengths, pred), target)

    def eta(self, tokens, lengths, pred):
        """The logits (natural parameters) of each sample's target, ``[B, n_items]``."""
        b, n = tokens.shape
        valid = (tokens != 0).unsqueeze(-1).to(self.item_emb.dtype)
        x = (self.item_emb[tokens] + self.pos_emb[:n]) * valid
        if self.uni:
            mask, causal = None, True
        else:
            mask = (torch.arange(n, device=tokens.device) < lengths[:, None])[:, None, None, :]
            causal = False
        for blk in self.blocks:
            x = x + blk(x, self.impl, key_mask=mask, causal=causal)
        return self.out(x[torch.arange(b, device=x.device), pred])

    def logical_params(self):
        out = [("item_emb", tuple(self.item_emb.shape)), ("pos_emb", tuple(self.pos_emb.shape))]
        for i, blk in enumerate(self.blocks):
            out += blk.logical(f"block{i}.attn")
        return out + self.out.logical("out")


class LayerNorm(nn.Module):
    """Keras ``LayerNormalization`` (ε 1e-3), γ = 1, β = 0."""

    def __init__(self, d, eps=1e-3):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.bias = zeros(d)
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gain, self.bias, self.eps)


class Mlp(nn.Module):
    def __init__(self, fan_in, hidden, fan_out, gen):
        super().__init__()
        self.inner = Dense(fan_in, hidden, gen)
        self.outer = Dense(hidden, fan_out, gen)

    def forward(self, x):
        return self.outer(torch.relu(self.inner(x)))

    def logical(self, name):
        return self.inner.logical(f"{name}1") + self.outer.logical(f"{name}2")


class TempBlock(nn.Module):
    """Post-LN block: x = LN(x + MHA(x)); x = LN(x + FFN(x)) (FFN 64 ReLU → 32), no mask."""

    def __init__(self, d, ffn, gen):
        super().__init__()
        self.attn = MultiHeadAttention(d, 2, 16, gen)
        self.ln1 = LayerNorm(d)
        self.ffn = Mlp(d, ffn, d, gen)
        self.ln2 = LayerNorm(d)

    def forward(self, x, impl):
        x = self.ln1(x + self.attn(x, impl))
        return self.ln2(x + self.ffn(x))


class TemperatureEfa(nn.Module):
    """The temperature EFA (§6.2–§6.3): per position, value MLP 1 → 128 → 32 (the [MASK] row 1
    of a 2-row table at the target) ‖ site MLP (lat, lon) → 128 → 32 (‖ lag embedding), fusion
    Dense 64 ReLU → Dense 32; L post-LN blocks; gather; Dense 128 ReLU, Dense 16 ReLU, Dense 1;
    MSE. The site MLP runs once per city (its input is the fixed coordinate table) and is
    gathered at every position."""

    def __init__(self, sites, layers, lag, impl, seed=0, dim=32, hidden=128, fuse=64):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.impl = impl
        self.register_buffer("sites", torch.as_tensor(sites))
        self.value_mlp = Mlp(1, hidden, dim, g)
        self.mask_emb = embedding((2, dim), g)
        self.site_mlp = Mlp(self.sites.shape[1], hidden, dim, g)
        self.lag_emb = embedding((lag + 1, dim), g) if lag > 0 else None
        self.fuse = Mlp(dim * (3 if lag > 0 else 2), fuse, dim, g)
        self.blocks = nn.ModuleList(TempBlock(dim, 64, g) for _ in range(layers))
        self.head0 = Dense(dim, 128, g)
        self.head1 = Dense(128, 16, g)
        self.out = Dense(16, 1, g)

    def forward(self, temps, site, lag_id, pred, target):
        return torch.mean((self.eta(temps, site, lag_id, pred) - target) ** 2)

    def eta(self, temps, site, lag_id, pred):
        """The predicted temperature of each sample's masked city, ``[B]``."""
        b, n = temps.shape
        at = F.one_hot(pred, n).unsqueeze(-1).to(temps.dtype)
        v = self.value_mlp(temps.unsqueeze(-1)) * (1 - at) + self.mask_emb[1] * at
        parts = [v, self.site_mlp(self.sites)[site]]
        if self.lag_emb is not None:
            parts.append(self.lag_emb[lag_id])
        x = self.fuse(torch.cat(parts, dim=-1))
        for blk in self.blocks:
            x = blk(x, self.impl)
        h = x[torch.arange(b, device=x.device), pred]
        return self.out(torch.relu(self.head1(torch.relu(self.head0(h))))).squeeze(-1)

    def logical_params(self):
        out = self.value_mlp.logical("value_mlp") + [("mask_emb", tuple(self.mask_emb.shape))]
        out += self.site_mlp.logical("site_mlp")
        if self.lag_emb is not None:
            out.append(("lag_emb", tuple(self.lag_emb.shape)))
        out += self.fuse.logical("fuse")
        for i, blk in enumerate(self.blocks):
            out += blk.attn.logical(f"block{i}.attn")
            out += [(f"block{i}.ln1.gain", (32,)), (f"block{i}.ln1.bias", (32,))]
            out += blk.ffn.logical(f"block{i}.ffn")
            out += [(f"block{i}.ln2.gain", (32,)), (f"block{i}.ln2.bias", (32,))]
        return out + self.head0.logical("head0") + self.head1.logical("head1") + self.out.logical("out")
