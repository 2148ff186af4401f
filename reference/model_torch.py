"""PyTorch twin of vfm's DFM DiT and its EDM objective (research/dfm.md §1–§2).

Written for clarity, not speed: samples of a pack are processed one by one, which is exactly
what packed attention computes (attention never crosses samples). Parameter names are vfm's
(src/model/dit.c), so `model.state_dict()` loads vfm's model.safetensors directly:

    from safetensors.torch import load_file
    m = DiT(cfg); m.load_state_dict(load_file("run/iter_0000100/model.safetensors"))
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DiTConfig:
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

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def token_dim(self):
        return self.in_channels * self.patch_spatial ** 2 * self.patch_temporal

    @property
    def out_dim(self):
        return self.out_channels * self.patch_spatial ** 2 * self.patch_temporal


def timestep_embedding(t, dim, shift, max_period=10000.0):
    """diffusers get_timestep_embedding, flip_sin_to_cos=False: [sin | cos]."""
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float64) / (half - shift)
    args = t.to(torch.float64)[:, None] * torch.exp(exponent)[None, :]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=-1).to(t.dtype)


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


class Attention(nn.Module):
    def __init__(self, cfg, kv_in, kv_heads):
        super().__init__()
        D, hd = cfg.hidden, cfg.head_dim
        self.heads, self.kv_heads, self.hd = cfg.heads, kv_heads, hd
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(kv_in, kv_heads * hd, bias=False)
        self.v = nn.Linear(kv_in, kv_heads * hd, bias=False)
        self.q_norm = RMSNorm(hd, cfg.ln_eps)
        self.k_norm = RMSNorm(hd, cfg.ln_eps)
        self.proj = nn.Linear(D, D, bias=False)

    def forward(self, x, ctx):
        n, m = x.shape[0], ctx.shape[0]
        q = self.q_norm(self.q(x).view(n, self.heads, self.hd)).transpose(0, 1)
        k = self.k_norm(self.k(ctx).view(m, self.kv_heads, self.hd)).transpose(0, 1)
        v = self.v(ctx).view(m, self.kv_heads, self.hd).transpose(0, 1)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(self.hd), dim=-1)
        return self.proj((p @ v).transpose(0, 1).reshape(n, -1))


class AdaLN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.linear_1 = nn.Linear(cfg.hidden, cfg.adaln_lora, bias=False)
        self.linear_2 = nn.Linear(cfg.adaln_lora, 9 * cfg.hidden, bias=False)

    def forward(self, c_silu):
        return self.linear_2(self.linear_1(c_silu)).chunk(9, dim=-1)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.eps = cfg.ln_eps
        self.adaln = AdaLN(cfg)
        self.self_attn = Attention(cfg, cfg.hidden, cfg.kv_heads)
        self.cross_attn = Attention(cfg, cfg.d_text, cfg.heads)
        self.mlp = MLP(cfg)

    def ln(self, x, shift, scale):
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * (1 + scale) + shift

    def forward(self, x, c_silu, text):
        sh_sa, sc_sa, g_sa, sh_ca, sc_ca, g_ca, sh_m, sc_m, g_m = self.adaln(c_silu)
        h = self.ln(x, sh_sa, sc_sa)
        x = x + g_sa * self.self_attn(h, h)
        x = x + g_ca * self.cross_attn(self.ln(x, sh_ca, sc_ca), text)
        return x + g_m * self.mlp(self.ln(x, sh_m, sc_m))


class Embedder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.linear_1 = nn.Linear(dim, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class DiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.x_embedder = nn.Linear(cfg.token_dim, cfg.hidden)
        self.t_embedder = Embedder(cfg.hidden)
        self.fps_embedder = Embedder(cfg.fps_dim)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.final_linear = nn.Linear(cfg.hidden, cfg.out_dim)

    def forward_sample(self, x, c_noise, fps, text, grid):
        """One sample: x [n, token_dim], c_noise and fps scalars (0-d tensors), text [l, d_text]."""
        cfg = self.cfg
        c = self.t_embedder(timestep_embedding(c_noise.view(1), cfg.hidden, 0))
        f = self.fps_embedder(timestep_embedding(fps.view(1), cfg.fps_dim, 1))
        c = c + F.pad(f, (0, cfg.hidden - cfg.fps_dim))
        c_silu = F.silu(c)
        h = self.x_embedder(x) + pos_embed_3d(cfg.hidden, grid)
        for block in self.blocks:
            h = block(h, c_silu, text)
        return self.final_linear(h)


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
    text [l, d_text], dropped (bool), grid (t, h, w). Returns (loss, per-sample F, per-sample loss)
    with DFM's reduction: the mean over all real tokens of w(σ)·mean_c (D − x0)²."""
    total, count, outs, per = 0.0, 0, [], []
    for s in samples:
        x0 = sigma_data * s["latent_tokens"]
        sigma = torch.as_tensor(s["sigma"], dtype=torch.float32)
        c_skip, c_out, c_in, c_noise, weight = edm_coefficients(sigma, sigma_data)
        x_t = x0 + sigma * s["noise"]
        text = torch.zeros(1, s["text"].shape[1]) if s["dropped"] else s["text"]
        Fx = model.forward_sample(c_in * x_t, c_noise, torch.as_tensor(s["fps"], dtype=torch.float32), text, s["grid"])
        D = c_skip * x_t + c_out * Fx
        err = weight * ((D - x0) ** 2).mean(dim=-1)
        total = total + err.sum()
        count += err.shape[0]
        outs.append(Fx)
        per.append(err.mean())
    return total / count, outs, per
