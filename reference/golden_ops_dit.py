"""Goldens of the ops the DiT reference's layout needs (tests/unit/test_ops_dit.c): the 2-D sin-cos
position embedding (MAE / DiT layout), the row lookup of a class table and the column gather, with
the backwards from autograd. Inputs are float32; references are float64 from the same values.
File: ops_dit.bin.
"""
import os

import numpy as np
import torch

from golden_io import write_golden


def sincos_1d(embed_dim, pos):
    omega = 1.0 / 10000 ** (np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1).astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def sincos_2d(embed_dim, height, width):
    """The DiT reference's table, generalised to H x W: its grid is meshgrid(w, h), so the first half of
    each row encodes the column w and the second the row h; rows h·W + w."""
    grid_w, grid_h = np.meshgrid(np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32))
    return np.concatenate([sincos_1d(embed_dim // 2, grid_w), sincos_1d(embed_dim // 2, grid_h)], axis=1)


def write_all(outdir):
    out = {}
    # 2-D position: a square grid (the reference's own case) and two non-square ones, with frames
    for i, (dim, (T, H, W)) in enumerate([(16, (1, 4, 4)), (24, (2, 3, 5)), (64, (1, 6, 2))]):
        table = sincos_2d(dim, H, W)
        pos = np.array([(t, h, w) for t in range(T) for h in range(H) for w in range(W)], dtype=np.int32)
        out[f"p{i}_pos"] = pos
        out[f"p{i}_table"] = np.concatenate([table] * T, axis=0)  # every frame: the same rows
    # class-table lookup with a repeated index (the null class twice)
    N, D, B = 6, 10, 5
    table = torch.rand(N, D, dtype=torch.float32) * 2 - 1
    idx = torch.tensor([5, 2, 0, 5, 3], dtype=torch.int64)
    dout = torch.rand(B, D, dtype=torch.float32) * 2 - 1
    t64 = table.double().requires_grad_(True)
    emb = torch.nn.functional.embedding(idx, t64)
    (emb * dout.double()).sum().backward()
    out.update({"e_table": table, "e_idx": idx.int(), "e_dout": dout, "e_out": emb.detach(), "e_dtable": t64.grad})
    # column gather: (ph pw C) token columns to the conv's (C ph pw), plus a repeated column
    Nr, M = 7, 12
    x = torch.rand(Nr, M, dtype=torch.float32) * 2 - 1
    perm = [((ih * 2 + iw) * 3 + c) for c in range(3) for ih in range(2) for iw in range(2)] + [4, 4]
    gidx = torch.tensor(perm, dtype=torch.int64)
    gout = torch.rand(Nr, len(perm), dtype=torch.float32) * 2 - 1
    x64 = x.double().requires_grad_(True)
    y = x64.index_select(1, gidx)
    (y * gout.double()).sum().backward()
    out.update({"g_in": x, "g_idx": gidx.int(), "g_dout": gout, "g_out": y.detach(), "g_din": x64.grad})
    write_golden(os.path.join(outdir, "ops_dit.bin"), out)
