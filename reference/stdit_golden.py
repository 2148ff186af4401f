"""Goldens of ST-DiT (stdit_torch.py) for tests/unit/test_model_golden.c, written as model_golden.py
writes every variant's: random non-zero weights, a pack of two videos of different T and H·W and an
image (a dropped prompt), the output, the loss, every parameter gradient, 10 AdamW steps.
    /usr/bin/python3 reference/stdit_golden.py --out tests/fixtures/golden
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_golden  # noqa: E402
from stdit_torch import STDiT, STDiTConfig  # noqa: E402

# 2 ST-DiT layers (4 blocks): spatial, temporal, full (layer 2's spatial block), temporal; GQA
CASES = {
    "model_stdit": (STDiTConfig(hidden=16, layers=2, heads=2, kv_heads=1, ffn=32, in_channels=4, out_channels=4,
                                patch_spatial=2, patch_temporal=1, d_text=12, fps_dim=8, stdit_full_every=2),
                    [((4, 3, 4, 6), 3, 24.0, False, None), ((4, 2, 6, 4), 2, 12.0, True, None),
                     ((4, 1, 4, 4), 4, 30.0, False, None)]),
}

if __name__ == "__main__":
    model_golden.main(CASES, STDiT,
                      lambda cfg: {"config.stdit_full_every": torch.tensor([cfg.stdit_full_every], dtype=torch.int32)})
