"""Goldens of whole MoE models for tests/unit/test_model_golden.c: the twins of moviegen_torch.py and
model_torch.py with every block's MLP a mixture of experts written from the layer's definition
(docs/models.md "The MoE layer"), not from vfm's code. Per sample (the twins run sample by sample,
so selection never crosses samples), with T real tokens:
    probs = softmax(router(x)) over the E experts (fp32, pre-softmax router)
    C = min(T, ceil(T·k·f/E))                        (expert choice: k = 1)
    expert choice: expert e takes the C tokens with the highest probs[:, e]
    token choice:  a token's candidates are its k most probable experts; each expert keeps its C
                   most probable candidates (the rest pass through the residual)
    y[t] = Σ_{e holds t} probs[t, e] · expert_e(x[t])        (experts in ascending order)
ties by (score desc, index asc). Cases: "model_moe_moviegen", a tiny ECDiT (moviegen, SwiGLU experts,
expert choice, capacity factor 2: each expert takes half of every sample) under EDM, and
"model_moe_dfm_token_choice" (dfm, erf-GELU experts, token choice top-2 without the load-balancing
loss, capacity factor 1: tokens dropped) under EDM; the network output, loss, every parameter
gradient and 10 AdamW steps (model_golden.py's record_case).
    /usr/bin/python3 reference/moe_model_golden.py --out tests/fixtures/golden
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402
from model_golden import make_samples, randomize, record_case  # noqa: E402
from model_torch import DiT, DiTConfig, edm_pack_loss  # noqa: E402
from moviegen_torch import MovieGen, MovieGenConfig  # noqa: E402

ROUTING = {"expert_choice": 0, "aux_loss": 1, "none": 2}  # MoeRouting (src/model/moe.h)


def order(scores):
    """Indices by (score desc, index asc): a stable sort of -score keeps ties in index order."""
    return torch.sort(-scores, stable=True).indices


class Experts(nn.Module):
    def __init__(self, D, E, Fe, swiglu):
        super().__init__()
        self.fc1 = nn.Linear(D, E * (2 if swiglu else 1) * Fe, bias=False)  # expert e: rows [e·F', (e+1)·F')
        self.fc2 = nn.Linear(Fe, E * D, bias=False)                          # expert e: rows [e·D, (e+1)·D)


class MoE(nn.Module):
    def __init__(self, D, E, Fe, swiglu, routing, k, cf):
        super().__init__()
        self.D, self.E, self.Fe, self.swiglu, self.routing, self.k, self.cf = D, E, Fe, swiglu, routing, k, cf
        self.router = nn.Linear(D, E, bias=False)
        self.experts = Experts(D, E, Fe, swiglu)

    def expert(self, e, x):
        w = 2 * self.Fe if self.swiglu else self.Fe
        h = x @ self.experts.fc1.weight[e * w:(e + 1) * w].t()
        if self.swiglu:
            gate, value = h.chunk(2, dim=-1)
            h = F.silu(gate) * value
        else:
            h = F.gelu(h)  # dfm's erf GELU
        return h @ self.experts.fc2.weight[e * self.D:(e + 1) * self.D].t()

    def forward(self, x):
        T, E = x.shape[0], self.E
        probs = torch.softmax(self.router(x), dim=-1)
        ec = self.routing == "expert_choice"
        k = 1 if ec else self.k
        C = T if self.cf <= 0 else min(T, math.ceil(T * k * self.cf / E))
        if ec:
            cand = torch.ones(T, E, dtype=torch.bool)
        else:
            cand = torch.zeros(T, E, dtype=torch.bool)
            for t in range(T):
                cand[t, order(probs[t].detach())[:k]] = True
        out = torch.zeros_like(x)
        for e in range(E):
            rows = torch.arange(T)[cand[:, e]]
            chosen = rows[order(probs[rows, e].detach())][:C]
            if len(chosen) == 0:
                continue
            out = out.index_add(0, chosen, probs[chosen, e][:, None] * self.expert(e, x[chosen]))
        return out


CASES = {
    # name: (twin, config, MoE (experts, expert width, routing, k, capacity factor), samples)
    "model_moe_moviegen": (
        MovieGen, MovieGenConfig(hidden=16, layers=2, heads=4, kv_heads=2, ffn=24, in_channels=3, out_channels=3,
                                 patch_spatial=2, patch_temporal=1, d_text=12, fps_dim=8, ln_eps=1e-5,
                                 pos_rows=(4, 5, 6)),
        (4, 8, "expert_choice", 1, 2.0),
        [((3, 2, 4, 6), 3, 30.0, False, None), ((3, 1, 8, 4), 2, 12.0, True, None), ((3, 3, 4, 4), 4, 24.0, False, None)]),
    "model_moe_dfm_token_choice": (
        DiT, DiTConfig(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, in_channels=4, out_channels=4,
                       patch_spatial=2, patch_temporal=1, d_text=16, adaln_lora=16, fps_dim=16),
        (4, 12, "none", 2, 1.0),
        [((4, 1, 8, 8), 3, 30.0, False, None), ((4, 2, 4, 8), 5, 24.0, False, None), ((4, 3, 6, 4), 2, 30.0, True, None)]),
}
SIGMAS = [0.3, 1.7, 5.0]


def write_case(outdir, name, twin, cfg, moe, specs):
    E, Fe, routing, k, cf = moe
    gen = torch.Generator().manual_seed(20261126)
    model = twin(cfg)
    for b in model.blocks:
        b.mlp = MoE(cfg.hidden, E, Fe, twin is MovieGen, routing, k, cf)
    randomize(model, gen)
    samples = make_samples(cfg, specs, gen, SIGMAS)
    out = {"config.ints": torch.tensor(cfg.c_ints(), dtype=torch.int32),
           "config.floats": torch.tensor([cfg.ln_eps, cfg.class_dropout_prob], dtype=torch.float32),
           "config.moe": torch.tensor([E, Fe, k, ROUTING[routing]], dtype=torch.int32),
           "config.moe_floats": torch.tensor([cf, 0.0, 0.0], dtype=torch.float32)}
    if twin is MovieGen:
        out["config.pos_rows"] = torch.tensor(cfg.pos_rows, dtype=torch.int32)
    losses = record_case(model, samples, edm_pack_loss, "sigma",
                         lambda g: (0.2 + 3.0 * torch.rand(len(samples), generator=g)).tolist(), gen, out)
    write_golden(os.path.join(outdir, name + ".bin"), out)
    print(f"{name}: loss {out['loss'].item():.6f}, trajectory {losses[0]:.5f} -> {losses[-1]:.5f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (twin, cfg, moe, specs) in CASES.items():
        write_case(args.out, name, twin, cfg, moe, specs)


if __name__ == "__main__":
    main()
