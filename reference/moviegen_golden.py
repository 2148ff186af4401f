"""Goldens of the moviegen variant for the C tests (tests/unit/test_model_golden.c), from the twin in
moviegen_torch.py: EDM as NeMo trains MovieGen (model_moviegen) and Movie Gen's flow matching with
σ_min = 1e-5 (objective_flow_moviegen). Random non-zero weights (not the zero-gated init), grouped-
query self-attention (4 heads, 2 kv heads), a text width (12) that is not D (16), a pack of 3
samples of different lengths with a 2-frame video and a 3-frame one, a dropped prompt and per-sample
times; the network output, loss, every parameter gradient, and 10 AdamW steps (model_golden.py's).
    /usr/bin/python3 reference/moviegen_golden.py --out tests/fixtures/golden
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402
from model_golden import make_samples, randomize, record_case  # noqa: E402
from model_torch import edm_pack_loss  # noqa: E402
from moviegen_torch import MovieGen, MovieGenConfig, moviegen_flow_pack_loss  # noqa: E402

CFG = MovieGenConfig(hidden=16, layers=2, heads=4, kv_heads=2, ffn=24, in_channels=3, out_channels=3, patch_spatial=2,
                     patch_temporal=1, d_text=12, fps_dim=8, ln_eps=1e-5, pos_rows=(4, 5, 6))
# (latent shape C,T,H,W, text rows, fps, dropped prompt, class row): grids (2,2,3), (1,4,2), (3,2,2)
SPECS = [((3, 2, 4, 6), 3, 30.0, False, None), ((3, 1, 8, 4), 2, 12.0, True, None),
         ((3, 3, 4, 4), 4, 24.0, False, None)]
CASES = {
    # name: (objective, times of the forward/backward case: EDM σ, or flow σ = 1 − t)
    "model_moviegen": ("edm", [0.3, 1.7, 5.0]),
    "objective_flow_moviegen": ("flow", [0.15, 0.6, 0.93]),
}
SIGMA_MIN = 1e-5


def pack_loss(model, objective, samples):
    return edm_pack_loss(model, samples) if objective == "edm" else moviegen_flow_pack_loss(model, samples, SIGMA_MIN)


def write_case(outdir, name, objective, times):
    gen = torch.Generator().manual_seed(20260126)
    model = MovieGen(CFG)
    randomize(model, gen)
    samples = make_samples(CFG, SPECS, gen, times)
    key = "sigma" if objective == "edm" else "t"
    for i, s in enumerate(samples):
        s[key] = times[i]
    out = {"config.ints": torch.tensor(CFG.c_ints(), dtype=torch.int32),
           "config.floats": torch.tensor([CFG.ln_eps, CFG.class_dropout_prob], dtype=torch.float32),
           "config.pos_rows": torch.tensor(CFG.pos_rows, dtype=torch.int32)}
    if objective == "flow":
        out["objective"] = torch.tensor([0], dtype=torch.int32)
        out["flow_sigma_min"] = torch.tensor([SIGMA_MIN], dtype=torch.float64)
    draw = ((lambda g: (0.2 + 3.0 * torch.rand(3, generator=g)).tolist()) if objective == "edm" else
            (lambda g: (0.02 + 0.96 * torch.rand(3, generator=g)).tolist()))
    losses = record_case(model, samples, lambda m, ss: pack_loss(m, objective, ss), key, draw, gen, out)
    write_golden(os.path.join(outdir, name + ".bin"), out)
    print(f"{name}: loss {out['loss'].item():.6f}, trajectory {losses[0]:.5f} -> {losses[-1]:.5f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (objective, times) in CASES.items():
        write_case(args.out, name, objective, times)


if __name__ == "__main__":
    main()
