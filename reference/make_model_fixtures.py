"""Writes the state-dict fixtures of `vfm import` (tests/e2e/model_interop.sh): a tiny adaln-zero model
of the PyTorch twin (the DiT reference's names and shapes, random weights, plus the reference's
pos_embed buffer for 8 x 8 latents) saved with torch.save, as a plain state dict and nested as a
training checkpoint {"model": ..., "ema": ..., "steps": 3}.
    /usr/bin/python3 reference/make_model_fixtures.py --out tests/fixtures/models
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_torch import DiT, DiTConfig, pos_embed_2d  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cfg = DiTConfig(variant="adaln-zero", hidden=16, layers=1, heads=2, kv_heads=2, ffn=64, in_channels=4,
                    out_channels=4, patch_spatial=2, num_classes=3, learn_sigma=True)
    model = DiT(cfg)
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    sd = dict(model.state_dict())
    sd["pos_embed"] = pos_embed_2d(cfg.hidden, (1, 4, 4)).unsqueeze(0)  # the reference keeps it, [1, T, D]
    torch.save(sd, os.path.join(args.out, "dit_tiny.pt"))
    torch.save({"model": sd, "ema": sd, "steps": 3}, os.path.join(args.out, "dit_tiny_train_ckpt.pt"))
    print(f"wrote {len(sd)} tensors ({sum(v.numel() for v in sd.values())} values) to {args.out}")


if __name__ == "__main__":
    main()
