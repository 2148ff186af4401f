"""PyTorch twin of vfm's DiT family and its EDM objective (research/dfm.md §1–§2, docs/models.md).

Variants (DiTConfig.variant):
  dfm         DFM's cross-attention DiT: adaLN-LoRA (9 chunks), per-head RMSNorm QK-norm, no biases,
              erf-GELU, 3-D sin-cos position, plain final Linear;
  nemo-adaln  NeMo's full-rank form: one Linear(D -> 9D) modulation, a learnable RMSNorm on t + fps;
  adaln-zero  the original DiT (facebookresearch/DiT models.py): 6-chunk adaLN with bias, fused qkv
              and MLP with biases, tanh-GELU, cos-first 256-wide timestep features, class table with a
              null row, 2-D sin-cos position, conv patch weight, final LayerNorm + shift/scale + Linear;
              optional cross-attention with QK-norm (9 chunks).

Written for clarity, not speed: samples of a pack are processed one by one, which is exactly
what packed attention computes (attention never crosses samples). Parameter names are vfm's
(src/model/dit_build.c; for adaln-zero the DiT reference's own), so `model.state_dict()` loads
vfm's model.safetensors directly:

    from safetensors.torch import load_file
    m = DiT(cfg); m.load_state_dict(load_file("run/iter_0000100/model.safetensors"))
"""
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VARIANTS = ("dfm", "nemo-adaln", "adaln-zero", "moviegen", "stdit", "wan")  # DiTVariant's order; moviegen: moviegen_torch.py, stdit: stdit_torch.py; wan: diffusers (make_wan_fixtures.py)


@dataclass
class DiTConfig:
    variant: str = "dfm"
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 256
    in_channels: int = 4
    out_channels: int = 4
    patch_spatial: int = 2
    patch_temporal: int = 1
    d_text: int = 32
    adaln_lora: int = 32
    fps_dim: int = 32
    ln_eps: float = 1e-5
    qk_norm: bool = True
    cross_attention: Optional[bool] = None  # None: on for dfm / nemo-adaln, off for adaln-zero
    num_classes: int = 0
    class_dropout_prob: float = 0.1
    learn_sigma: bool = False
    pos_embedding: Optional[str] = None     # None: "sincos2d" for adaln-zero, else "sincos3d"

    @property
    def dit(self):
        return self.variant == "adaln-zero"

    @property
    def cross(self):
        return (not self.dit) if self.cross_attention is None else self.cross_attention

    @property
    def n_chunks(self):
        return 9 if self.cross else 6

    @property
    def pos(self):
        return self.pos_embedding or ("sincos2d" if self.dit else "sincos3d")

    @property
    def block_ln_eps(self):
        return 1e-6 if self.dit else self.ln_eps

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def token_dim(self):
        return self.in_channels * self.patch_spatial ** 2 * self.patch_temporal

    @property
    def out_dim(self):
        return self.out_channels * (2 if self.learn_sigma else 1) * self.patch_spatial ** 2 * self.patch_temporal

    def c_ints(self):
        """The config as the C golden test reads it (tests/unit/test_model_golden.c)."""
        cross = 0 if self.cross_attention is None else (1 if self.cross_attention else 2)
        pos = {None: 0, "sincos3d": 1, "sincos2d": 2}[self.pos_embedding]
        return [VARIANTS.index(self.variant), self.hidden, self.layers, self.heads, self.kv_heads, self.ffn,
                self.in_channels, self.out_channels, self.patch_spatial, self.patch_temporal, self.d_text,
                self.adaln_lora, self.fps_dim, int(self.qk_norm), cross, self.num_classes, int(self.learn_sigma), pos]


def timestep_embedding(t, dim, shift, flip=False, max_period=10000.0):
    """diffusers get_timestep_embedding: [sin | cos], or [cos | sin] with flip (GLIDE / DiT)."""
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float64) / (half - shift)
    args = t.to(torch.float64)[:, None] * torch.exp(exponent)[None, :]
    parts = [torch.cos(args), torch.sin(args)] if flip else [torch.sin(args), torch.cos(args)]
    return torch.cat(parts, dim=-1).to(t.dtype)


def _sincos_1d(d, pos):
    omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
    out = np.outer(pos.astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def pos_embed_3d(D, grid):
    """Rows t·H·W + h·W + w: [temporal D/4 | w part 3D/8 | h part 3D/8] (diffusers layout)."""
    T, H, W = grid
    t, h, w = np.meshgrid(np.arange(T), np.arange(H), np.arange(W), indexing="ij")
    t, h, w = t.reshape(-1), h.reshape(-1), w.reshape(-1)
    ds, dt = 3 * D // 4, D // 4
    emb = np.concatenate([_sincos_1d(dt, t), _sincos_1d(ds // 2, w), _sincos_1d(ds // 2, h)], axis=1)
    return torch.from_numpy(emb.astype(np.float32))


def pos_embed_2d(D, grid):
    """Rows t·H·W + h·W + w: [w part D/2 | h part D/2] (the DiT reference's layout, any H x W; every
    frame gets the same embedding)."""
    T, H, W = grid
    t, h, w = np.meshgrid(np.arange(T), np.arange(H), np.arange(W), indexing="ij")
    emb = np.concatenate([_sincos_1d(D // 2, w.reshape(-1)), _sincos_1d(D // 2, h.reshape(-1))], axis=1)
    return torch.from_numpy(emb.astype(np.float32))


def patchify(latent, pt, ph, pw):
    """latent [C, T, H, W] -> tokens [T'H'W', ph·pw·pt·C]."""
    C, T, H, W = latent.shape
    x = latent.reshape(C, T // pt, pt, H // ph, ph, W // pw, pw)
    x = x.permute(1, 3, 5, 4, 6, 2, 0)  # T' H' W' ph pw pt C
    return x.reshape((T // pt) * (H // ph) * (W // pw), ph * pw * pt * C)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _attend(q, k, v, heads):
    """q [H, n, hd], k, v [Hkv, m, hd] -> [n, H·hd]."""
    rep = heads // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
    return (p @ v).transpose(0, 1).reshape(q.shape[1], -1)


class Attention(nn.Module):
    """q, k, v, proj as separate linears (DFM / NeMo self-attention, every variant's cross-attention)."""

    def __init__(self, cfg, kv_in, kv_heads, qk_norm, bias):
        super().__init__()
        D, hd = cfg.hidden, cfg.head_dim
        self.heads, self.kv_heads, self.hd = cfg.heads, kv_heads, hd
        self.q = nn.Linear(D, D, bias=bias)
        self.k = nn.Linear(kv_in, kv_heads * hd, bias=bias)
        self.v = nn.Linear(kv_in, kv_heads * hd, bias=bias)
        if qk_norm:
            self.q_norm = RMSNorm(hd, cfg.ln_eps)
            self.k_norm = RMSNorm(hd, cfg.ln_eps)
        self.qk_norm = qk_norm
        self.proj = nn.Linear(D, D, bias=bias)

    def forward(self, x, ctx):
        n, m = x.shape[0], ctx.shape[0]
        q = self.q(x).view(n, self.heads, self.hd)
        k = self.k(ctx).view(m, self.kv_heads, self.hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.v(ctx).view(m, self.kv_heads, self.hd)
        return self.proj(_attend(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), self.heads))


class FusedAttention(nn.Module):
    """The DiT reference's self-attention (timm Attention, qkv_bias=True): qkv [3D, D] read as (3, H, hd)."""

    def __init__(self, cfg):
        super().__init__()
        self.heads, self.hd = cfg.heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x, ctx):
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.hd).permute(1, 2, 0, 3)
        return self.proj(_attend(q, k, v, self.heads))


class AdaLNLoRA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.linear_1 = nn.Linear(cfg.hidden, cfg.adaln_lora, bias=False)
        self.linear_2 = nn.Linear(cfg.adaln_lora, cfg.n_chunks * cfg.hidden, bias=False)

    def forward(self, c_silu):
        return self.linear_2(self.linear_1(c_silu))


class AdaLNFull(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.linear = nn.Linear(cfg.hidden, cfg.n_chunks * cfg.hidden, bias=False)

    def forward(self, c_silu):
        return self.linear(c_silu)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn, bias=cfg.dit)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden, bias=cfg.dit)
        self.approximate = "tanh" if cfg.dit else "none"

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        if cfg.dit:
            self.attn = FusedAttention(cfg)
        else:
            self.adaln = AdaLNFull(cfg) if cfg.variant == "nemo-adaln" else AdaLNLoRA(cfg)
            self.self_attn = Attention(cfg, cfg.hidden, cfg.kv_heads, cfg.qk_norm, False)
        if cfg.cross:
            self.cross_attn = Attention(cfg, cfg.d_text, cfg.heads, cfg.qk_norm, cfg.dit)
        self.mlp = MLP(cfg)
        if cfg.dit:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(cfg.hidden, cfg.n_chunks * cfg.hidden))

    def ln(self, x, shift, scale):
        return F.layer_norm(x, x.shape[-1:], eps=self.cfg.block_ln_eps) * (1 + scale) + shift

    def self_attention(self, h):
        """Over every token of the sample (ST-DiT's blocks restrict it: stdit_torch.py)."""
        return self.attn(h, h) if self.cfg.dit else self.self_attn(h, h)

    def forward(self, x, c, text):
        mod = self.adaLN_modulation(c) if self.cfg.dit else self.adaln(F.silu(c))
        ch = mod.chunk(self.cfg.n_chunks, dim=-1)
        sa, mlp = ch[0:3], ch[-3:]
        h = self.ln(x, sa[0], sa[1])
        x = x + sa[2] * self.self_attention(h)
        if self.cfg.cross:
            ca = ch[3:6]
            x = x + ca[2] * self.cross_attn(self.ln(x, ca[0], ca[1]), text)
        return x + mlp[2] * self.mlp(self.ln(x, mlp[0], mlp[1]))


class Embedder(nn.Module):
    def __init__(self, dim_in, dim):
        super().__init__()
        self.linear_1 = nn.Linear(dim_in, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEmbedder(nn.Module):
    """The DiT reference's: 256 cos-first features -> Linear -> SiLU -> Linear, named mlp.0 / mlp.2."""

    def __init__(self, dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t):
        return self.mlp(timestep_embedding(t, 256, 0, flip=True))


class LabelEmbedder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embedding_table = nn.Embedding(cfg.num_classes + (cfg.class_dropout_prob > 0), cfg.hidden)

    def forward(self, rows):
        return self.embedding_table(rows)


class PatchEmbed(nn.Module):
    """The DiT reference's x_embedder.proj: a stride-p conv, weight [D, C, (pt,) p, p]. Applied to vfm's
    (ph pw pt C) tokens by reading their columns in (C pt ph pw) order."""

    def __init__(self, cfg):
        super().__init__()
        p, pt = cfg.patch_spatial, cfg.patch_temporal
        if pt == 1:
            self.proj = nn.Conv2d(cfg.in_channels, cfg.hidden, p, stride=p)
        else:
            self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden, (pt, p, p), stride=(pt, p, p))
        self.shape = (p, p, pt, cfg.in_channels)

    def forward(self, tokens):
        n = tokens.shape[0]
        x = tokens.view(n, *self.shape).permute(0, 4, 3, 1, 2).reshape(n, -1)  # (C pt ph pw)
        return F.linear(x, self.proj.weight.reshape(self.proj.weight.shape[0], -1), self.proj.bias)


class FinalLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.linear = nn.Linear(cfg.hidden, cfg.out_dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(cfg.hidden, 2 * cfg.hidden))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(F.layer_norm(x, x.shape[-1:], eps=1e-6) * (1 + scale) + shift)


class DiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        if cfg.dit:
            self.x_embedder = PatchEmbed(cfg)
            self.t_embedder = TimestepEmbedder(cfg.hidden)
        else:
            self.x_embedder = nn.Linear(cfg.token_dim, cfg.hidden)
            self.t_embedder = Embedder(cfg.hidden, cfg.hidden)
        if cfg.num_classes > 0:
            self.y_embedder = LabelEmbedder(cfg)
        if not cfg.dit:
            self.fps_embedder = Embedder(cfg.fps_dim, cfg.fps_dim)
        if cfg.variant == "nemo-adaln":
            self.cond_norm = RMSNorm(cfg.hidden, 1e-6)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        if cfg.dit:
            self.final_layer = FinalLayer(cfg)
        else:
            self.final_linear = nn.Linear(cfg.hidden, cfg.out_dim)

    def forward_sample(self, x, c_noise, fps, text, grid, class_row=None):
        """One sample: x [n, token_dim], c_noise and fps scalars (0-d tensors), text [l, d_text], class_row
        the class-table row (label or the null class) for class-conditional models."""
        cfg = self.cfg
        if cfg.dit:
            c = self.t_embedder(c_noise.view(1))
        else:
            c = self.t_embedder(timestep_embedding(c_noise.view(1), cfg.hidden, 0))
            f = self.fps_embedder(timestep_embedding(fps.view(1), cfg.fps_dim, 1))
            c = c + F.pad(f, (0, cfg.hidden - cfg.fps_dim))
        if cfg.num_classes > 0:
            c = c + self.y_embedder(torch.as_tensor([class_row]))
        if cfg.variant == "nemo-adaln":
            c = self.cond_norm(c)
        pos = pos_embed_2d if cfg.pos == "sincos2d" else pos_embed_3d
        h = self.x_embedder(x) + pos(cfg.hidden, grid)
        for block in self.blocks:
            h = block(h, c, text)
        return self.final_layer(h, c) if cfg.dit else self.final_linear(h)


def edm_coefficients(sigma, sigma_data):
    s2, d2 = sigma * sigma, sigma_data * sigma_data
    c_skip = d2 / (s2 + d2)
    c_out = sigma * sigma_data / torch.sqrt(s2 + d2)
    c_in = 1 / torch.sqrt(s2 + d2)
    c_noise = 0.25 * torch.log(sigma)
    weight = (s2 + d2) / (sigma * sigma_data) ** 2
    return c_skip, c_out, c_in, c_noise, weight


def edm_pack_loss(model, samples, sigma_data=0.5):
    """samples: list of dicts with latent_tokens [n, token_dim], noise [n, token_dim], sigma, fps,
    text [l, d_text], dropped (bool), grid (t, h, w), class_row (None without classes). Returns (loss,
    per-sample F, per-sample loss) with DFM's reduction: the mean over all real tokens of
    w(σ)·mean_c (D − x0)²."""
    total, count, outs, per = 0.0, 0, [], []
    for s in samples:
        x0 = sigma_data * s["latent_tokens"]
        sigma = torch.as_tensor(s["sigma"], dtype=torch.float32)
        c_skip, c_out, c_in, c_noise, weight = edm_coefficients(sigma, sigma_data)
        x_t = x0 + sigma * s["noise"]
        text = torch.zeros(1, s["text"].shape[1]) if s["dropped"] else s["text"]
        Fx = model.forward_sample(c_in * x_t, c_noise, torch.as_tensor(s["fps"], dtype=torch.float32), text, s["grid"],
                                  s.get("class_row"))
        D = c_skip * x_t + c_out * Fx
        err = weight * ((D - x0) ** 2).mean(dim=-1)
        total = total + err.sum()
        count += err.shape[0]
        outs.append(Fx)
        per.append(err.mean())
    return total / count, outs, per
