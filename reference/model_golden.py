"""Goldens of the whole model and objective for the C tests (tests/unit/test_model_golden.c), one
file per variant case: the configuration, random non-zero weights (not the zero-gated init, so every
gradient is non-zero), a pack of 3 samples of different sizes with given σ, noise, fps, class rows and
a dropped prompt or label, the network output, the loss, every parameter gradient, and the losses of
10 AdamW steps (clip 1.0, decay on >= 2-D weights only).
    /usr/bin/python3 reference/model_golden.py --out tests/fixtures/golden
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402
from model_torch import DiT, DiTConfig, edm_pack_loss, patchify  # noqa: E402

CASES = {
    # name: (config, [(latent shape C,T,H,W, text rows, fps, dropped, class row)])
    "model_tiny": (DiTConfig(hidden=32, layers=2, heads=4, kv_heads=4, ffn=128, in_channels=4, out_channels=4,
                             patch_spatial=2, patch_temporal=1, d_text=16, adaln_lora=16, fps_dim=16),
                   [((4, 1, 8, 8), 3, 30.0, False, None), ((4, 2, 4, 8), 5, 24.0, False, None),
                    ((4, 3, 6, 4), 2, 30.0, True, None)]),
    "model_tiny_pt2_gqa": (DiTConfig(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, in_channels=3, out_channels=3,
                                     patch_spatial=2, patch_temporal=2, d_text=16, adaln_lora=8, fps_dim=16),
                           [((3, 4, 4, 6), 4, 30.0, False, None), ((3, 2, 6, 4), 1, 12.0, False, None),
                            ((3, 2, 4, 4), 3, 30.0, False, None)]),
    # the original DiT: class-conditional (5 classes + null row), no text; the third sample's label is
    # dropped (null class 5); a 2-frame sample shares its 2-D position embedding over frames
    "model_adaln_zero": (DiTConfig(variant="adaln-zero", hidden=16, layers=2, heads=2, kv_heads=2, ffn=64, in_channels=4,
                                   out_channels=4, patch_spatial=2, patch_temporal=1, d_text=8, num_classes=5),
                         [((4, 1, 8, 8), 2, 30.0, False, 2), ((4, 1, 4, 6), 3, 30.0, False, 4),
                          ((4, 2, 4, 4), 1, 30.0, False, 5)]),
    # adaLN-Zero with cross-attention (9 chunks, QK-norm), classes, and a conv3d patch (pt 2)
    "model_adaln_zero_cross": (DiTConfig(variant="adaln-zero", hidden=16, layers=2, heads=2, kv_heads=2, ffn=32,
                                         in_channels=3, out_channels=3, patch_spatial=2, patch_temporal=2, d_text=12,
                                         cross_attention=True, num_classes=3),
                               [((3, 2, 4, 4), 3, 30.0, False, 0), ((3, 4, 4, 2), 2, 30.0, True, 3),
                                ((3, 2, 2, 6), 4, 24.0, False, 1)]),
    # NeMo's full-rank adaLN with a text width (12) that is not D (16); grouped-query self-attention
    "model_nemo_adaln": (DiTConfig(variant="nemo-adaln", hidden=16, layers=2, heads=2, kv_heads=1, ffn=32,
                                   in_channels=3, out_channels=3, patch_spatial=2, patch_temporal=1, d_text=12,
                                   fps_dim=8),
                         [((3, 1, 6, 6), 3, 30.0, False, None), ((3, 2, 4, 4), 2, 12.0, True, None),
                          ((3, 1, 2, 8), 4, 24.0, False, None)]),
}
SIGMAS = [0.3, 1.7, 5.0]
STEPS, LR, WD, CLIP = 10, 1e-3, 0.033, 1.0


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.numel() // p.shape[0] if p.ndim >= 2 else p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / max(1.0, fan_in) ** 0.5)


def make_samples(cfg, specs, gen, sigmas):
    samples = []
    for i, ((C, T, H, W), text_rows, fps, dropped, class_row) in enumerate(specs):
        latent = torch.randn(C, T, H, W, generator=gen)
        tokens = patchify(latent, cfg.patch_temporal, cfg.patch_spatial, cfg.patch_spatial)
        grid = (T // cfg.patch_temporal, H // cfg.patch_spatial, W // cfg.patch_spatial)
        samples.append(dict(latent_shape=(C, T, H, W), latent_tokens=tokens, noise=torch.randn(tokens.shape, generator=gen),
                            sigma=sigmas[i], fps=fps, text=torch.randn(text_rows, cfg.d_text, generator=gen),
                            dropped=dropped, grid=grid, class_row=class_row))
    return samples


def record_case(model, samples, pack_loss, key, draw_times, gen, out):
    """Adds to out the model's state dict, the samples (their time under `key`: "sigma" or "t"), the
    output, loss and every gradient of pack_loss(model, samples), and the losses of STEPS clipped
    AdamW steps with fresh times (draw_times(gen)) and noise; returns the losses."""
    for k, v in model.state_dict().items():
        out["param." + k] = v.clone()
    for i, s in enumerate(samples):
        out[f"sample{i}.latent_shape"] = torch.tensor(s["latent_shape"], dtype=torch.int32)
        out[f"sample{i}.tokens"] = s["latent_tokens"]
        out[f"sample{i}.noise"] = s["noise"]
        out[f"sample{i}.text"] = s["text"]
        out[f"sample{i}.{key}"] = torch.tensor([s[key]], dtype=torch.float32)
        out[f"sample{i}.fps"] = torch.tensor([s["fps"]], dtype=torch.float32)
        out[f"sample{i}.dropped"] = torch.tensor([int(s["dropped"])], dtype=torch.int32)
        if s["class_row"] is not None:
            out[f"sample{i}.class_row"] = torch.tensor([s["class_row"]], dtype=torch.int32)
    loss, outs, per = pack_loss(model, samples)
    loss.backward()
    for i, f in enumerate(outs):
        out[f"sample{i}.F"] = f.detach()
        out[f"sample{i}.loss"] = per[i].detach().view(1)
    out["loss"] = loss.detach().view(1)
    for k, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, k
        out["grad." + k] = p.grad.clone()

    # STEPS AdamW steps on the same pack with fresh times and noise per step
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-5)
    losses = []
    for step in range(STEPS):
        times = draw_times(gen)
        for i, s in enumerate(samples):
            s[key] = times[i]
            s["noise"] = torch.randn(s["noise"].shape, generator=gen)
            out[f"step{step}.sample{i}.{key}"] = torch.tensor([times[i]], dtype=torch.float32)
            out[f"step{step}.sample{i}.noise"] = s["noise"]
        opt.zero_grad()
        loss, _, _ = pack_loss(model, samples)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    out["trajectory.losses"] = torch.tensor(losses, dtype=torch.float64)
    return losses


def write_case(outdir, name, cfg, specs, model_class=DiT, extra=None):
    """extra: more tensors for the file (another architecture's configuration, stdit_golden.py)."""
    gen = torch.Generator().manual_seed(20241122)
    model = model_class(cfg)
    randomize(model, gen)
    samples = make_samples(cfg, specs, gen, SIGMAS)
    out = {"config.ints": torch.tensor(cfg.c_ints(), dtype=torch.int32),
           "config.floats": torch.tensor([cfg.ln_eps, cfg.class_dropout_prob], dtype=torch.float32)}
    out.update(extra or {})
    losses = record_case(model, samples, edm_pack_loss, "sigma",
                         lambda g: (0.2 + 3.0 * torch.rand(len(samples), generator=g)).tolist(), gen, out)
    out["trajectory.lr"] = torch.tensor([LR], dtype=torch.float64)
    write_golden(os.path.join(outdir, name + ".bin"), out)
    print(f"{name}: loss {out['loss'].item():.6f}, trajectory {losses[0]:.5f} -> {losses[-1]:.5f}")


def main(cases=CASES, model_class=DiT, extra=lambda cfg: None):
    """Writes every case; extra(cfg): more tensors for a case's file (stdit_golden.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (cfg, specs) in cases.items():
        write_case(args.out, name, cfg, specs, model_class, extra(cfg))


if __name__ == "__main__":
    main()
