"""Goldens of the flow-matching and DDPM objectives for the C tests (tests/unit/test_model_golden.c):
models of model_torch.py with random non-zero weights — the DFM DiT, and for DDPM also the DiT
paper's setting (adaln-zero, class labels with a dropped one, learned sigma) — a pack of 3 samples
of different sizes (a dropped prompt or label) with given times and noise, the network output, the
loss, every parameter gradient, and the losses of 10 AdamW steps with fresh times and noise.
    /usr/bin/python3 reference/objectives_golden.py --out tests/fixtures/golden
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402
from model_golden import CLIP, LR, STEPS, WD, make_samples, randomize  # noqa: E402
from model_torch import DiT, DiTConfig  # noqa: E402
from objectives_torch import ddpm_pack_loss, flow_pack_loss  # noqa: E402

# (latent shape C,T,H,W, text rows, fps, dropped prompt, class row)
SPECS = [((4, 1, 4, 4), 3, 30.0, False, None), ((4, 2, 4, 4), 5, 24.0, False, None), ((4, 1, 6, 4), 2, 30.0, True, None)]
# DiT: classes 2 and 4, and a dropped label (the null class 5)
DIT_SPECS = [((4, 1, 4, 4), 3, 30.0, False, 2), ((4, 2, 4, 4), 5, 24.0, False, 4), ((4, 1, 6, 4), 2, 30.0, False, 5)]


def tiny(**kw):  # small, so the fixtures stay small
    return DiTConfig(hidden=16, layers=1, heads=2, kv_heads=2, ffn=32, in_channels=4, out_channels=4, patch_spatial=2,
                     patch_temporal=1, d_text=8, adaln_lora=8, fps_dim=16, **kw)


CASES = {
    # name: (config, objective, samples, times of the forward/backward case)
    "objective_flow": (tiny(), "flow", SPECS, [0.15, 0.6, 0.93]),
    "objective_ddpm_dit": (tiny(variant="adaln-zero", num_classes=5, learn_sigma=True), "ddpm", DIT_SPECS, [0, 17, 640]),
    "objective_ddpm_fixed_sigma": (tiny(), "ddpm", SPECS, [999, 3, 250]),
}


def pack_loss(model, objective, samples, C):
    return flow_pack_loss(model, samples) if objective == "flow" else ddpm_pack_loss(model, samples, C)


def draw_times(objective, n, gen):
    if objective == "flow":
        return (0.02 + 0.96 * torch.rand(n, generator=gen)).tolist()
    return torch.randint(0, 1000, (n,), generator=gen).tolist()


def write_case(outdir, name, cfg, objective, specs, times):
    gen = torch.Generator().manual_seed(20250611)
    model = DiT(cfg)
    randomize(model, gen)
    samples = make_samples(cfg, specs, gen, times)
    out = {"objective": torch.tensor([0 if objective == "flow" else 1], dtype=torch.int32),
           "config.ints": torch.tensor(cfg.c_ints(), dtype=torch.int32),
           "config.floats": torch.tensor([cfg.ln_eps, cfg.class_dropout_prob], dtype=torch.float32)}
    for k, v in model.state_dict().items():
        out["param." + k] = v.clone()
    for i, s in enumerate(samples):
        s["t"] = times[i]
        out[f"sample{i}.latent_shape"] = torch.tensor(s["latent_shape"], dtype=torch.int32)
        out[f"sample{i}.tokens"] = s["latent_tokens"]
        out[f"sample{i}.noise"] = s["noise"]
        out[f"sample{i}.text"] = s["text"]
        out[f"sample{i}.t"] = torch.tensor([times[i]], dtype=torch.float32)
        out[f"sample{i}.fps"] = torch.tensor([s["fps"]], dtype=torch.float32)
        out[f"sample{i}.dropped"] = torch.tensor([int(s["dropped"])], dtype=torch.int32)
        if s["class_row"] is not None:
            out[f"sample{i}.class_row"] = torch.tensor([s["class_row"]], dtype=torch.int32)
    loss, outs, per = pack_loss(model, objective, samples, cfg.in_channels)
    loss.backward()
    for i, f in enumerate(outs):
        out[f"sample{i}.F"] = f.detach()
        out[f"sample{i}.loss"] = per[i].detach().view(1)
    out["loss"] = loss.detach().view(1)
    for k, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, k
        out["grad." + k] = p.grad.clone()

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-5)
    losses = []
    for step in range(STEPS):
        ts = draw_times(objective, len(samples), gen)
        if objective == "ddpm" and step == 4:
            ts[1] = 0  # the decoder-NLL branch inside the trajectory too
        for i, s in enumerate(samples):
            s["t"] = ts[i]
            s["noise"] = torch.randn(s["noise"].shape, generator=gen)
            out[f"step{step}.sample{i}.t"] = torch.tensor([ts[i]], dtype=torch.float32)
            out[f"step{step}.sample{i}.noise"] = s["noise"]
        opt.zero_grad()
        loss, _, _ = pack_loss(model, objective, samples, cfg.in_channels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    out["trajectory.losses"] = torch.tensor(losses, dtype=torch.float64)
    write_golden(os.path.join(outdir, name + ".bin"), out)
    print(f"{name}: loss {out['loss'].item():.6f}, trajectory {losses[0]:.5f} -> {losses[-1]:.5f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (cfg, objective, specs, times) in CASES.items():
        write_case(args.out, name, cfg, objective, specs, times)


if __name__ == "__main__":
    main()
