"""Goldens of the mixture-of-experts layer (src/model/moe.h) for tests/unit/test_model_moe.c: a
PyTorch twin written from the layer's definition (docs/models.md "The MoE layer"), not from vfm's
code. A pack of three samples of different lengths (7, 4, 9 real tokens) in padded slots; per case
the weights, the input, the output, the router's loss terms, the routing (which token each slot
holds) and the gradients of Σ out ⊙ r + aux·L_aux + z·L_z with respect to every weight and the input.
    /usr/bin/python3 reference/moe_golden.py --out tests/fixtures/golden
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

D, F, E = 16, 6, 4
LENGTHS, SLOTS = [7, 4, 9], [8, 4, 12]  # real tokens and padded rows per sample
CASES = {
    # name: (routing, k, capacity factor, aux coefficient, z coefficient)
    "moe_expert_choice": ("expert_choice", 1, 2.0, 0.0, 0.1),
    "moe_token_choice": ("aux_loss", 2, 0.5, 0.3, 0.1),  # capacity below demand: tokens dropped
}


def capacity(T, k, cf):
    return T if cf <= 0 else min(T, math.ceil(T * k * cf / E))


def order(scores):
    """Indices by (score desc, index asc): a stable sort of -score keeps ties in index order."""
    return torch.sort(-scores, stable=True).indices


def moe(x, router, fc1, fc2, routing, k, cf):
    """x [S, D] (padding rows included); returns out [S, D], probs, lse, masked, slot rows [E, C]."""
    logits = x @ router.t()
    real = torch.zeros(x.shape[0], dtype=torch.bool)
    starts = [sum(SLOTS[:i]) for i in range(len(SLOTS))]
    for s0, T in zip(starts, LENGTHS):
        real[s0:s0 + T] = True
    probs = torch.softmax(logits, dim=1) * real[:, None]
    lse = torch.logsumexp(logits, dim=1) * real
    if routing == "expert_choice":
        cand = torch.ones_like(probs, dtype=torch.bool)
    else:
        cand = torch.zeros_like(probs, dtype=torch.bool)
        for t in range(x.shape[0]):
            cand[t, order(probs[t].detach())[:k]] = True
    cand &= real[:, None]
    kk = 1 if routing == "expert_choice" else k
    caps = [capacity(T, kk, cf) for T in LENGTHS]
    C = sum(caps)
    slot_rows = torch.full((E, C), -1, dtype=torch.int32)
    out = torch.zeros_like(x)
    for e in range(E):
        c0 = 0
        for s0, T, Cb in zip(starts, LENGTHS, caps):
            rows = torch.arange(s0, s0 + T)
            ok = cand[rows, e]
            rows, sc = rows[ok], probs[rows[ok], e].detach()
            chosen = rows[order(sc)][:Cb]
            slot_rows[e, c0:c0 + len(chosen)] = chosen.int()
            c0 += Cb
            if len(chosen) == 0:
                continue
            h = torch.nn.functional.gelu(x[chosen] @ fc1[e * F:(e + 1) * F].t())
            y = h @ fc2[e * D:(e + 1) * D].t()
            out = out.index_add(0, chosen, probs[chosen, e][:, None] * y)
    return out, probs, lse, cand, slot_rows, real


def case(routing, k, cf, aux, z, seed):
    g = torch.Generator().manual_seed(seed)
    S = sum(SLOTS)
    x = (torch.rand(S, D, generator=g) * 2 - 1).float().double().requires_grad_()
    router = (torch.randn(E, D, generator=g) * 0.5).float().double().requires_grad_()
    fc1 = (torch.randn(E * F, D, generator=g) * 0.3).float().double().requires_grad_()
    fc2 = (torch.randn(E * D, F, generator=g) * 0.3).float().double().requires_grad_()
    r = (torch.rand(S, D, generator=g) * 2 - 1).float().double()
    out, probs, lse, cand, slot_rows, real = moe(x, router, fc1, fc2, routing, k, cf)
    T = int(real.sum())
    kk = 1 if routing == "expert_choice" else k
    kc = E if routing == "expert_choice" else k  # candidates per token (expert choice: every expert)
    f = cand.sum(0).double() / (T * kc)
    P = probs.sum(0) / T
    l_aux = E * (f * P).sum()
    l_z = (lse ** 2).sum() / T
    loss = (out * r).sum() + (aux * l_aux if routing == "aux_loss" else 0) + z * l_z
    loss.backward()
    t2s = torch.full((S,), -1, dtype=torch.int32)
    cu_real, cu_pad = [0], [0]
    for i, (T_b, P_b) in enumerate(zip(LENGTHS, SLOTS)):
        t2s[cu_pad[-1]:cu_pad[-1] + T_b] = i
        cu_real.append(cu_real[-1] + T_b)
        cu_pad.append(cu_pad[-1] + P_b)
    return {
        "config": torch.tensor([E, F, kk, 0 if routing == "expert_choice" else 1], dtype=torch.int32),
        "coeffs": torch.tensor([cf, aux, z], dtype=torch.float32),
        "tok2sample": t2s, "cu_real": torch.tensor(cu_real, dtype=torch.int32),
        "cu_pad": torch.tensor(cu_pad, dtype=torch.int32),
        "x": x.float(), "r": r.float(),
        "router": router.float(), "fc1": fc1.float(), "fc2": fc2.float(),
        "out": out.float(), "losses": torch.tensor([l_aux.item(), l_z.item()], dtype=torch.float32),
        "slot_rows": slot_rows,
        "d_x": x.grad.float(), "d_router": router.grad.float(), "d_fc1": fc1.grad.float(), "d_fc2": fc2.grad.float(),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/golden")
    a = ap.parse_args()
    for i, (name, (routing, k, cf, aux, z)) in enumerate(CASES.items()):
        t = case(routing, k, cf, aux, z, 100 + i)
        write_golden(os.path.join(a.out, name + ".bin"), t)
        held = torch.zeros(sum(SLOTS), dtype=torch.int32)
        for row in t["slot_rows"].flatten().tolist():
            if row >= 0:
                held[row] += 1
        real = t["tok2sample"] >= 0
        print(name, "slots per expert", t["slot_rows"].shape[1], "empty slots", int((t["slot_rows"] < 0).sum()),
              "tokens in no slot", int((real & (held == 0)).sum()), "in fewer than k", int((real & (held < k)).sum()))


if __name__ == "__main__":
    main()
