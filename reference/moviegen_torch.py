"""PyTorch twin of vfm's moviegen variant (src/model/arch_moviegen.c, docs/models.md "moviegen"),
written from NeMo's layer spec (nemo/collections/diffusion/models/dit_llama/dit_llama_layer_spec.py,
MoviegGenLayer; dit_model.py DiTCrossAttentionModel with FactorizedLearnable3DEmbedding) and Movie
Gen's flow matching (arXiv 2410.13720 §3.1), not from vfm's C code. One block, per sample:

    h   = h + E_t[t] + E_h[h] + E_w[w]                        (re-added before every block)
    sh1, sc1, g1, sh2, sc2, g2 = adaLN(silu(c)).chunk(6)       (Linear(D, 6D), no bias)
    h   = h + g1 * SelfAttn(N(h) * (1 + sc1) + sh1)            (GQA, no QK-norm, no biases)
    a   = CrossAttn(h, text)                                   (multi-head, no norm, no residual)
    h   = h + g2 * MLP(N(a) * (1 + sc2) + sh2)                 (SwiGLU: silu(gate) * value)

N is one RMSNorm with a learnable weight per block (NeMo's AdaLN.ln, TENorm as RMSNorm), used by
both norms. c = RMSNorm(t_emb + pad(fps_emb)) as NeMo's affline_norm (eps 1e-6). The parameter
names are vfm's, so a vfm checkpoint loads with load_state_dict.
"""
import math
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_torch import DiTConfig, Embedder, RMSNorm, timestep_embedding  # noqa: E402

MOVIEGEN = 3  # DiTVariant's value (src/model/dit.h)


@dataclass
class MovieGenConfig(DiTConfig):
    variant: str = "moviegen"
    pos_rows: tuple = field(default=(4, 6, 6))  # learned position table rows (t, h, w)

    def c_ints(self):
        cross = 0 if self.cross_attention is None else (1 if self.cross_attention else 2)
        return [MOVIEGEN, self.hidden, self.layers, self.heads, self.kv_heads, self.ffn, self.in_channels,
                self.out_channels, self.patch_spatial, self.patch_temporal, self.d_text, self.adaln_lora, self.fps_dim,
                int(self.qk_norm), cross, self.num_classes, int(self.learn_sigma), 0]


class Attention(nn.Module):
    """Megatron's SelfAttention (GQA) / CrossAttention (heads = kv heads) without biases or QK-norm."""

    def __init__(self, cfg, kv_in, kv_heads):
        super().__init__()
        D, self.hd = cfg.hidden, cfg.head_dim
        self.heads, self.kv_heads = cfg.heads, kv_heads
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(kv_in, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(kv_in, kv_heads * self.hd, bias=False)
        self.proj = nn.Linear(D, D, bias=False)

    def forward(self, x, ctx):
        q = self.q(x).view(-1, self.heads, self.hd).transpose(0, 1)          # [H, n, hd]
        k = self.k(ctx).view(-1, self.kv_heads, self.hd).transpose(0, 1)     # [G, m, hd]
        v = self.v(ctx).view(-1, self.kv_heads, self.hd).transpose(0, 1)
        group = self.heads // self.kv_heads                                  # query heads per kv head
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        o = F.softmax(q @ k.transpose(1, 2) / math.sqrt(self.hd), dim=-1) @ v
        return self.proj(o.transpose(0, 1).reshape(x.shape[0], -1))


class SwiGLU(nn.Module):
    """Megatron's MLP with gated_linear_unit and silu: fc1 gives [gate | value]."""

    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x):
        gate, value = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * value)


class AdaLN(nn.Module):
    """NeMo's AdaLN(n_adaln_chunks=6, norm=TENorm): the modulation Linear and the block's RMSNorm."""

    def __init__(self, cfg):
        super().__init__()
        self.linear = nn.Linear(cfg.hidden, 6 * cfg.hidden, bias=False)
        self.norm = RMSNorm(cfg.hidden, cfg.ln_eps)

    def modulated(self, x, shift, scale):
        return self.norm(x) * (1 + scale) + shift


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.adaln = AdaLN(cfg)
        self.self_attn = Attention(cfg, cfg.hidden, cfg.kv_heads)
        self.cross = cfg.cross
        if cfg.cross:
            self.cross_attn = Attention(cfg, cfg.d_text, cfg.heads)
        self.mlp = SwiGLU(cfg)

    def forward(self, h, c, text, pos):
        h = h + pos
        sh1, sc1, g1, sh2, sc2, g2 = self.adaln.linear(F.silu(c)).chunk(6, dim=-1)
        x = self.adaln.modulated(h, sh1, sc1)
        h = h + g1 * self.self_attn(x, x)
        a = self.cross_attn(h, text) if self.cross else h  # feeds the MLP only
        return h + g2 * self.mlp(self.adaln.modulated(a, sh2, sc2))


class FactorizedPosition(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.emb_t = nn.Embedding(cfg.pos_rows[0], cfg.hidden)
        self.emb_h = nn.Embedding(cfg.pos_rows[1], cfg.hidden)
        self.emb_w = nn.Embedding(cfg.pos_rows[2], cfg.hidden)

    def forward(self, grid):
        T, H, W = grid
        t, h, w = torch.meshgrid(torch.arange(T), torch.arange(H), torch.arange(W), indexing="ij")
        return self.emb_t(t.reshape(-1)) + self.emb_h(h.reshape(-1)) + self.emb_w(w.reshape(-1))


class MovieGen(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.x_embedder = nn.Linear(cfg.token_dim, cfg.hidden)
        self.pos_embedder = FactorizedPosition(cfg)
        self.t_embedder = Embedder(cfg.hidden, cfg.hidden)
        self.fps_embedder = Embedder(cfg.fps_dim, cfg.fps_dim)
        self.cond_norm = RMSNorm(cfg.hidden, 1e-6)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.final_linear = nn.Linear(cfg.hidden, cfg.out_dim)

    def forward_sample(self, x, c_noise, fps, text, grid, class_row=None):
        """One sample (model_torch.DiT.forward_sample's contract): x [n, token_dim] in (t, h, w) order."""
        cfg = self.cfg
        c = self.t_embedder(timestep_embedding(c_noise.view(1), cfg.hidden, 0))
        f = self.fps_embedder(timestep_embedding(fps.view(1), cfg.fps_dim, 1))
        c = self.cond_norm(c + F.pad(f, (0, cfg.hidden - cfg.fps_dim)))
        pos = self.pos_embedder(grid)
        h = self.x_embedder(x)
        for block in self.blocks:
            h = block(h, c, text, pos)
        return self.final_linear(h)


def moviegen_flow_pack_loss(model, samples, sigma_min=1e-5):
    """Movie Gen's flow matching in its own notation (t = 0 noise, t = 1 data): with X1 the data
    and X0 the noise, X_t = t·X1 + (1 − (1 − σ_min)·t)·X0 and V = X1 − (1 − σ_min)·X0, loss
    ‖u − V‖². vfm's network runs in DFM's convention (σ = 1 − t, time input 1000·σ, output the
    velocity along σ), so u = −F. samples as objectives_torch.flow_pack_loss, s["t"] holding σ."""
    total, count, outs, per = 0.0, 0, [], []
    for s in samples:
        X1, X0 = s["latent_tokens"], s["noise"]
        sigma = torch.tensor(s["t"], dtype=torch.float32)
        t = 1 - sigma
        X_t = t * X1 + (1 - (1 - sigma_min) * t) * X0
        V = X1 - (1 - sigma_min) * X0
        text = torch.zeros(1, s["text"].shape[1]) if s["dropped"] else s["text"]
        Fx = model.forward_sample(X_t, 1000 * sigma, torch.as_tensor(s["fps"], dtype=torch.float32), text, s["grid"])
        err = ((-Fx - V) ** 2).mean(dim=-1)
        total, count = total + err.sum(), count + err.shape[0]
        outs.append(Fx)
        per.append(err.mean())
    return total / count, outs, per
