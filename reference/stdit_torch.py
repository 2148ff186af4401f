"""PyTorch twin of vfm's ST-DiT (model.variant stdit, src/model/arch_stdit.c; docs/models.md "ST-DiT").

NeMo's spatio-temporal layer (nemo/collections/diffusion/models/dit/dit_layer_spec.py
STDiTLayerWithAdaLN, and the two-block STDiTV3 layer of its stdit/ folder) as vfm builds it: the
model around the blocks is nemo-adaln's (model_torch.py), and an ST-DiT layer is two of its blocks
-- each with its own full-rank adaLN (9 chunks), self-attention, cross-attention to the text and
MLP -- whose self-attention is restricted:
  block 2k     spatial:  the H·W tokens of one frame attend to each other;
  block 2k+1   temporal: the T tokens at one (h, w) attend to each other (an image: one token);
and every `stdit_full_every`-th layer's spatial block attends over the whole sample. A sample's
tokens are t-major (row t·H·W + h·W + w), so a frame is a run of rows and a position a stride.
"""
import dataclasses
from dataclasses import dataclass

import torch

from model_torch import Block, DiT, DiTConfig


@dataclass
class STDiTConfig(DiTConfig):
    variant: str = "stdit"
    stdit_full_every: int = 0  # layers is the number of ST-DiT layers (two blocks each)


class STBlock(Block):
    def __init__(self, cfg, span):
        super().__init__(cfg)
        self.span = span
        self.grid = None  # (T, H, W) of the sample being run, set by STDiT.forward_sample

    def self_attention(self, h):
        T, H, W = self.grid
        if self.span == "full":
            return self.self_attn(h, h)
        frames = h.view(T, H * W, -1)
        if self.span == "spatial":
            return torch.cat([self.self_attn(f, f) for f in frames])
        positions = frames.transpose(0, 1)  # [H·W, T, D]
        out = torch.stack([self.self_attn(p, p) for p in positions])
        return out.transpose(0, 1).reshape(T * H * W, -1)


def block_span(cfg, l):
    if l % 2:
        return "temporal"
    layer = l // 2 + 1
    return "full" if cfg.stdit_full_every > 0 and layer % cfg.stdit_full_every == 0 else "spatial"


class STDiT(DiT):
    def __init__(self, cfg):
        blocks = dataclasses.replace(cfg, variant="nemo-adaln", layers=2 * cfg.layers)
        super().__init__(blocks)
        self.st_cfg = cfg
        self.blocks = torch.nn.ModuleList([STBlock(blocks, block_span(cfg, l)) for l in range(2 * cfg.layers)])

    def forward_sample(self, x, c_noise, fps, text, grid, class_row=None):
        for b in self.blocks:
            b.grid = grid
        return super().forward_sample(x, c_noise, fps, text, grid, class_row)
