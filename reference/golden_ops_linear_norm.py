"""Goldens of the linear, activation and normalisation ops (tests/unit/test_ops_linear.c and
test_ops_norm.c): inputs, outputs and autograd gradients for 2-3 shapes per op, written to
tests/fixtures/golden/ops_linear_norm_<op>.bin.

Inputs are float32. The reference is PyTorch evaluated in float64 on those float32 values and
stored as float32, so the C test's error is the f32 op's own rounding, not PyTorch's. Gradients
are of L = sum(r * y) for a fixed random r (stored as "r"), so they are what the op's backward
returns for dy = r. Packs hold 3 samples with padding rows between; padding rows follow the op
contract: y = 0 (layernorm_modulate) or out = x (gated_residual), no gradient into padding.
"""
import os

import torch
import torch.nn.functional as F

from golden_io import write_golden

ACT_NONE, ACT_GELU_ERF, ACT_GELU_TANH = 0, 1, 2
LN_EPS = 1e-6
RMS_EPS = 1e-6


def _randn(*shape, std=1.0, mean=0.0):
    return (torch.randn(*shape, dtype=torch.float64) * std + mean).float()


def _leaf(t):
    return t.double().clone().requires_grad_(True)


def _pack(lengths, pads):
    """tok2sample of a pack: sample i's rows, then pads[i] padding rows (-1)."""
    t2s = []
    for i, (n, p) in enumerate(zip(lengths, pads)):
        t2s += [i] * n + [-1] * p
    return torch.tensor(t2s, dtype=torch.int32)


def _linear_cases():
    out = {}
    cases = [(7, 16, 24, True, ACT_GELU_ERF), (33, 40, 20, False, ACT_NONE), (5, 8, 12, True, ACT_GELU_TANH)]
    for c, (n, fin, fout, has_bias, act) in enumerate(cases):
        x = _randn(n, fin)
        w = _randn(fout, fin, std=1.5 / fin ** 0.5)
        b = _randn(fout, std=0.5)
        r = _randn(n, fout)
        xd, wd, bd = _leaf(x), _leaf(w), _leaf(b)
        pre = F.linear(xd, wd, bd if has_bias else None)
        if act == ACT_GELU_ERF:
            y = F.gelu(pre)
        elif act == ACT_GELU_TANH:
            y = F.gelu(pre, approximate="tanh")
        else:
            y = pre
        (y * r.double()).sum().backward()
        p = f"c{c}."
        out.update({p + "act": torch.tensor([act], dtype=torch.int32),
                    p + "has_bias": torch.tensor([int(has_bias)], dtype=torch.int32),
                    p + "x": x, p + "w": w, p + "b": b, p + "r": r,
                    p + "pre": pre.float(), p + "y": y.float(),
                    p + "dx": xd.grad.float(), p + "dw": wd.grad.float(),
                    p + "db": bd.grad.float() if has_bias else torch.zeros(fout)})
    out["ncases"] = torch.tensor([len(cases)], dtype=torch.int32)
    return out


def _activation_cases():
    out = {}
    # kind: 0 gelu erf, 1 gelu tanh, 2 silu, 3 swiglu
    cases = [(0, (6, 10)), (1, (6, 10)), (2, (6, 10)), (3, (6, 24)), (0, (3, 5, 7)), (1, (4, 9)), (3, (5, 8))]
    for c, (kind, shape) in enumerate(cases):
        x = _randn(*shape, std=2.5)
        xd = _leaf(x)
        if kind == 0:
            y = F.gelu(xd)
        elif kind == 1:
            y = F.gelu(xd, approximate="tanh")
        elif kind == 2:
            y = F.silu(xd)
        else:
            half = shape[-1] // 2
            y = F.silu(xd[:, :half]) * xd[:, half:]
        r = _randn(*y.shape)
        (y * r.double()).sum().backward()
        p = f"c{c}."
        out.update({p + "kind": torch.tensor([kind], dtype=torch.int32), p + "x": x, p + "r": r,
                    p + "y": y.float(), p + "dx": xd.grad.float()})
    out["ncases"] = torch.tensor([len(cases)], dtype=torch.int32)
    return out


def _layernorm_modulate_cases():
    out = {}
    # (lengths, pads, D, has_shift, has_scale)
    cases = [([5, 3, 7], [3, 1, 2], 32, True, True), ([4, 6], [0, 0], 48, False, True), ([9], [3], 24, True, False)]
    for c, (lengths, pads, D, has_shift, has_scale) in enumerate(cases):
        t2s = _pack(lengths, pads)
        S, B = len(t2s), len(lengths)
        real = (t2s >= 0).nonzero().squeeze(1)
        b_of = t2s[real].long()
        x = _randn(S, D, std=2.0, mean=0.5)
        shift, scale, r = _randn(B, D, std=0.5), _randn(B, D, std=0.5), _randn(S, D)
        xd, shd, scd = _leaf(x), _leaf(shift), _leaf(scale)
        xr = xd[real]
        yr = F.layer_norm(xr, (D,), eps=LN_EPS)
        if has_scale:
            yr = yr * (1 + scd[b_of])
        if has_shift:
            yr = yr + shd[b_of]
        y = torch.zeros(S, D, dtype=torch.float64).index_copy(0, real, yr)
        (y * r.double()).sum().backward()
        with torch.no_grad():
            mean = torch.zeros(S, dtype=torch.float64)
            rstd = torch.zeros(S, dtype=torch.float64)
            xr64 = x.double()[real]
            mean[real] = xr64.mean(-1)
            rstd[real] = torch.rsqrt(xr64.var(-1, unbiased=False) + LN_EPS)
        p = f"c{c}."
        out.update({p + "has_shift": torch.tensor([int(has_shift)], dtype=torch.int32),
                    p + "has_scale": torch.tensor([int(has_scale)], dtype=torch.int32),
                    p + "tok2sample": t2s, p + "x": x, p + "shift": shift, p + "scale": scale, p + "r": r,
                    p + "y": y.float(), p + "mean": mean.float(), p + "rstd": rstd.float(),
                    p + "dx": xd.grad.float(),
                    p + "dshift": shd.grad.float() if has_shift else torch.zeros(B, D),
                    p + "dscale": scd.grad.float() if has_scale else torch.zeros(B, D)})
    out["ncases"] = torch.tensor([len(cases)], dtype=torch.int32)
    out["eps"] = torch.tensor([LN_EPS], dtype=torch.float64)
    return out


def _gated_residual_cases():
    out = {}
    # (lengths, pads, D, has_gate)
    cases = [([5, 3, 7], [3, 1, 2], 32, True), ([6, 4], [0, 0], 16, False), ([2, 8, 3], [1, 0, 4], 20, True)]
    for c, (lengths, pads, D, has_gate) in enumerate(cases):
        t2s = _pack(lengths, pads)
        S, B = len(t2s), len(lengths)
        real = (t2s >= 0).nonzero().squeeze(1)
        b_of = t2s[real].long()
        x, y_in, gate, r = _randn(S, D), _randn(S, D), _randn(B, D), _randn(S, D)
        xd, yd, gd = _leaf(x), _leaf(y_in), _leaf(gate)
        add = yd[real] * gd[b_of] if has_gate else yd[real]
        out_t = xd.index_add(0, real, add)  # padding rows: out = x
        (out_t * r.double()).sum().backward()
        p = f"c{c}."
        out.update({p + "has_gate": torch.tensor([int(has_gate)], dtype=torch.int32),
                    p + "tok2sample": t2s, p + "x": x, p + "y": y_in, p + "gate": gate, p + "r": r,
                    p + "out": out_t.float(), p + "dx": xd.grad.float(), p + "dy": yd.grad.float(),
                    p + "dgate": gd.grad.float() if has_gate else torch.zeros(B, D)})
    out["ncases"] = torch.tensor([len(cases)], dtype=torch.int32)
    return out


def _rmsnorm_cases():
    out = {}
    # (x shape, has_weight): the 3-D case is the per-head QK-norm, q[S,H,hd] viewed as [S*H, hd]
    cases = [((9, 32), True), ((6, 4, 16), True), ((7, 24), False)]
    for c, (shape, has_w) in enumerate(cases):
        d = shape[-1]
        x = _randn(*shape, std=1.5)
        w = _randn(d, std=0.3, mean=1.0)
        r = _randn(*shape)
        xd, wd = _leaf(x), _leaf(w)
        rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        y = xd * rstd * wd if has_w else xd * rstd
        (y * r.double()).sum().backward()
        p = f"c{c}."
        out.update({p + "has_w": torch.tensor([int(has_w)], dtype=torch.int32),
                    p + "x": x.reshape(-1, d), p + "w": w, p + "r": r.reshape(-1, d),
                    p + "y": y.float().reshape(-1, d), p + "rstd": rstd.float().reshape(-1),
                    p + "dx": xd.grad.float().reshape(-1, d),
                    p + "dw": wd.grad.float() if has_w else torch.zeros(d)})
    out["ncases"] = torch.tensor([len(cases)], dtype=torch.int32)
    out["eps"] = torch.tensor([RMS_EPS], dtype=torch.float64)
    return out


def write_all(outdir):
    write_golden(os.path.join(outdir, "ops_linear_norm_linear.bin"), _linear_cases())
    write_golden(os.path.join(outdir, "ops_linear_norm_activations.bin"), _activation_cases())
    write_golden(os.path.join(outdir, "ops_linear_norm_layernorm_modulate.bin"), _layernorm_modulate_cases())
    write_golden(os.path.join(outdir, "ops_linear_norm_gated_residual.bin"), _gated_residual_cases())
    write_golden(os.path.join(outdir, "ops_linear_norm_rmsnorm.bin"), _rmsnorm_cases())
