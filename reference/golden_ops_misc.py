"""Goldens of the embedding, patchify, EDM and AdamW ops (tests/unit/test_ops_{embed,edm,optim}.c).

Inputs are drawn in float32 (what the C tests feed the f32 build); references are computed in
float64 from those same values (the C tests also run the f64 build on them), and where the
framework's own computation is float32 (diffusers' timestep embedding, torch.optim.AdamW) the
float32 result is stored too. Files: ops_misc_timestep.bin, ops_misc_pos3d.bin,
ops_misc_patchify.bin, ops_misc_edm.bin, ops_misc_adamw.bin.
"""
import math
import os

import numpy as np
import torch

from golden_io import write_golden


# ---- timestep embedding (diffusers get_timestep_embedding) ---------------------------------
def timestep_embedding(t, dim, flip_sin_to_cos, shift, max_period=10000.0):
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=t.dtype) / (half - shift)
    angle = t[:, None] * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    return emb


def write_timestep(outdir):
    out = {}
    cases = {
        # DiT timestep embedder: dim D, shift 0; EDM's c_noise = ln(σ)/4 and some DDPM-style steps
        "a": (64, 0.0, [-1.55, -0.4, 0.0, 0.37, 1.1, 3.0, 17.0, 999.0]),
        # fps embedder: dim 256, shift 1
        "b": (256, 1.0, [8.0, 24.0, 30.0, 60.0]),
    }
    for name, (dim, shift, values) in cases.items():
        t32 = torch.tensor(values, dtype=torch.float32)
        dout = torch.rand(len(values), dim, dtype=torch.float32) * 2 - 1
        out[f"{name}_t"] = t32
        out[f"{name}_dim"] = np.array([dim], dtype=np.int32)
        out[f"{name}_shift"] = np.array([shift], dtype=np.float64)
        out[f"{name}_dout"] = dout
        for flip in (0, 1):
            t64 = t32.double().requires_grad_(True)
            emb = timestep_embedding(t64, dim, flip, shift)
            (emb * dout.double()).sum().backward()
            out[f"{name}_emb{flip}"] = emb.detach()
            out[f"{name}_dt{flip}"] = t64.grad
            out[f"{name}_emb32_{flip}"] = timestep_embedding(t32, dim, flip, shift)
    write_golden(os.path.join(outdir, "ops_misc_timestep.bin"), out)


# ---- 3-D sin-cos position embedding (diffusers get_3d_sincos_pos_embed, numpy float64) -------
def sincos_1d(embed_dim, pos):
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000 ** omega
    out = np.einsum("m,d->md", pos.reshape(-1).astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def sincos_2d_from_grid(embed_dim, grid):
    emb_a = sincos_1d(embed_dim // 2, grid[0])  # diffusers calls it emb_h; grid[0] holds w (see below)
    emb_b = sincos_1d(embed_dim // 2, grid[1])
    return np.concatenate([emb_a, emb_b], axis=1)


def sincos_3d(embed_dim, spatial_size, temporal_size):
    """diffusers' formula: spatial_size = (width, height); returns [T, H·W, D]."""
    width, height = spatial_size
    dim_spatial, dim_temporal = 3 * embed_dim // 4, embed_dim // 4
    grid_h = np.arange(height, dtype=np.float32)
    grid_w = np.arange(width, dtype=np.float32)
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0)  # grid[0][h, w] = w, grid[1][h, w] = h
    grid = grid.reshape([2, 1, height, width])
    spatial = sincos_2d_from_grid(dim_spatial, grid)  # [H·W, 3D/4]
    temporal = sincos_1d(dim_temporal, np.arange(temporal_size, dtype=np.float32))  # [T, D/4]
    spatial = np.repeat(spatial[None, :, :], temporal_size, axis=0)
    temporal = np.repeat(temporal[:, None, :], height * width, axis=1)
    return np.concatenate([temporal, spatial], axis=-1)


def write_pos3d(outdir):
    out = {}
    for i, (dim, (T, H, W)) in enumerate([(32, (3, 4, 6)), (48, (1, 5, 5)), (64, (2, 3, 2))]):
        table = sincos_3d(dim, (W, H), T).reshape(T * H * W, dim)
        pos = np.array([(t, h, w) for t in range(T) for h in range(H) for w in range(W)], dtype=np.int32)
        # the layout ops.h documents: [temporal D/4 (t) | 3D/8 (w) | 3D/8 (h)], row t·H·W + h·W + w
        for t, h, w in [(T - 1, H - 1, 0), (0, 0, W - 1), (T // 2, H // 2, W // 2)]:
            row = table[t * H * W + h * W + w]
            q, e = dim // 4, 3 * dim // 8
            assert np.allclose(row[:q], sincos_1d(q, np.array([t]))[0])
            assert np.allclose(row[q:q + e], sincos_1d(e, np.array([w]))[0])
            assert np.allclose(row[q + e:], sincos_1d(e, np.array([h]))[0])
        out[f"g{i}_thw"] = np.array([T, H, W], dtype=np.int32)
        out[f"g{i}_pos"] = pos
        out[f"g{i}_table"] = table
    write_golden(os.path.join(outdir, "ops_misc_pos3d.bin"), out)


# ---- patchify (einops "C (T pt)(H ph)(W pw) -> (T H W)(ph pw pt C)" as permute/reshape) ------
def patchify(latent, pt, ph, pw):
    C, T, H, W = latent.shape
    x = latent.reshape(C, T // pt, pt, H // ph, ph, W // pw, pw)
    x = x.permute(1, 3, 5, 4, 6, 2, 0)  # T' H' W' ph pw pt C
    return x.reshape((T // pt) * (H // ph) * (W // pw), ph * pw * pt * C)


def write_patchify(outdir):
    out = {}
    for i, (shape, patch) in enumerate([((4, 2, 4, 6), (1, 2, 2)), ((3, 4, 4, 2), (2, 2, 1)), ((2, 6, 3, 3), (2, 1, 3))]):
        latent = torch.rand(*shape, dtype=torch.float32) * 2 - 1
        tokens = patchify(latent, *patch)
        # unpatchify is the backward of patchify: autograd of Σ r·patchify(x) gives it
        x = latent.double().requires_grad_(True)
        r = torch.rand(tokens.shape, dtype=torch.float32) * 2 - 1
        (patchify(x, *patch) * r.double()).sum().backward()
        out[f"p{i}_patch"] = np.array(patch, dtype=np.int32)
        out[f"p{i}_latent"] = latent
        out[f"p{i}_tokens"] = tokens
        out[f"p{i}_r"] = r
        out[f"p{i}_unpatch_r"] = x.grad.float()
    write_golden(os.path.join(outdir, "ops_misc_patchify.bin"), out)


# ---- EDM preconditioning and loss (DFM semantics) -------------------------------------------
def write_edm(outdir):
    sigma_data = 0.5
    lengths, padded = [5, 3, 7], [8, 4, 8]
    C = 8
    S = sum(padded)
    tok2sample = np.full(S, -1, dtype=np.int32)
    start = 0
    for b, (n, p) in enumerate(zip(lengths, padded)):
        tok2sample[start:start + n] = b
        start += p
    real = torch.from_numpy(tok2sample >= 0)
    x0 = torch.randn(S, C, dtype=torch.float32) * 0.5
    noise = torch.randn(S, C, dtype=torch.float32)
    F = torch.randn(S, C, dtype=torch.float32)
    sigma = torch.tensor([0.3, 1.7, 12.0], dtype=torch.float32)
    mask = real.float()
    mask[1] = 0.0  # a real token left out of the loss
    mask[start - padded[-1] + 2] = 0.5
    for t in (x0, noise, F):
        t[~real] = 0.0

    s = sigma.double()
    s2 = s * s + sigma_data ** 2
    c_skip = sigma_data ** 2 / s2
    c_out = s * sigma_data / s2.sqrt()
    c_in = 1 / s2.sqrt()
    c_noise = s.log() / 4
    weight = s2 / (s * sigma_data) ** 2

    idx = torch.from_numpy(np.maximum(tok2sample, 0)).long()
    keep = real.double()[:, None]
    x_t = (x0.double() + s[idx, None] * noise.double()) * keep
    net_in = c_in[idx, None] * x_t
    Fd = F.double().requires_grad_(True)
    D = (c_skip[idx, None] * x_t + c_out[idx, None] * Fd) * keep
    D.retain_grad()
    per_token = (weight[idx, None] * (D - x0.double()) ** 2).mean(dim=-1)  # DFM: channel mean of w·(D−x0)²
    m = mask.double() * real.double()
    loss = (per_token * m).sum() / m.sum()  # masked_next_token_loss / num_tokens
    loss.backward()
    sample_sum = torch.zeros(3, dtype=torch.float64).index_add_(0, idx[real], (per_token * m)[real])
    sample_count = torch.zeros(3, dtype=torch.float64).index_add_(0, idx[real], m[real])

    write_golden(os.path.join(outdir, "ops_misc_edm.bin"), {
        "sigma_data": np.array([sigma_data]), "tok2sample": tok2sample, "sigma": sigma, "mask": mask,
        "x0": x0, "noise": noise, "F": F,
        "c_skip": c_skip, "c_out": c_out, "c_in": c_in, "c_noise": c_noise, "weight": weight,
        "x_t": x_t, "net_in": net_in, "denoised": D.detach(), "loss": loss.detach().reshape(1),
        "sample_sum": sample_sum, "sample_count": sample_count, "ddenoised": D.grad, "dF": Fd.grad,
    })


# ---- AdamW -----------------------------------------------------------------------------------
def write_adamw(outdir):
    steps = 10
    shapes = [(5, 7), (13,), (3, 4, 2)]
    decays = [0.033, 0.0, 0.033]
    lrs = [1e-2 * min(1.0, (k + 1) / 4) for k in range(steps)]  # a short warm-up: lr changes per step
    init = [torch.rand(*s, dtype=torch.float32) * 2 - 1 for s in shapes]
    grads = [torch.randn(steps, *s, dtype=torch.float32) * 0.3 for s in shapes]
    out = {"lr": torch.tensor(lrs, dtype=torch.float64)}
    for i in range(len(shapes)):
        out[f"p{i}_init"] = init[i]
        out[f"p{i}_grads"] = grads[i]
        out[f"p{i}_wd"] = np.array([decays[i]])
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    for dtype, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
        # vfm's AdamWHyper holds float hyper-parameters; the float64 run uses those same values so
        # the f64 build can be compared tightly. The float32 run uses the nominal ones (as DFM).
        r = f32 if dtype == torch.float64 else (lambda x: x)
        params = [torch.nn.Parameter(p.clone().to(dtype)) for p in init]
        opt = torch.optim.AdamW([{"params": [p], "weight_decay": r(wd)} for p, wd in zip(params, decays)],
                                lr=r(lrs[0]), betas=(r(0.9), r(0.95)), eps=r(1e-5))
        history = [[] for _ in params]
        for k in range(steps):
            for group in opt.param_groups:
                group["lr"] = r(lrs[k])
            for p, g in zip(params, grads):
                p.grad = g[k].to(dtype).clone()
            opt.step()
            for i, p in enumerate(params):
                history[i].append(p.detach().clone())
        for i in range(len(params)):
            out[f"p{i}_after_{tag}"] = torch.stack(history[i])
    write_golden(os.path.join(outdir, "ops_misc_adamw.bin"), out)


def write_all(outdir):
    write_timestep(outdir)
    write_pos3d(outdir)
    write_patchify(outdir)
    write_edm(outdir)
    write_adamw(outdir)
