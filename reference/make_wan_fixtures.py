"""Fixtures of vfm's Wan 2.1 (model.variant=wan) against diffusers' own code, in tests/fixtures/wan:
  tiny/        a small random-init WanTransformer3DModel written by save_pretrained (config.json,
               diffusion_pytorch_model.safetensors): what `vfm import --from tiny` reads
  io.safetensors  the forward's input and output in f32: latent [C,T,H,W], text [512, text_dim] (7 real
               rows, then zero rows: Wan's padding, attended without a mask), timestep, out [C,T,H,W] (the
               float32 forward), r (the weights of the loss L = Σ r·out) and grad.<name> = dL/d<name> of
               every parameter (diffusers' model in float64: the twin of the gradients)
  unipc.safetensors  diffusers' UniPCMultistepScheduler as Wan configures it (flow_prediction, flow
               sigmas, shift 3, order 2, bh2), 12 steps on a fixed sequence of model outputs: timesteps,
               sigmas, the outputs and the sample after every step; the same for solver orders 1 and 3
               (order1.*, order3.*: sampler.unipc_order's other values)
Run with PyPI torch >= 2 and diffusers==0.42.1 in a venv outside the repository:
    python3 -m venv /opt/venv-wan && /opt/venv-wan/bin/pip install torch diffusers==0.42.1 safetensors accelerate
    /opt/venv-wan/bin/python reference/make_wan_fixtures.py --out tests/fixtures/wan
--check DIR loads a folder `vfm export --format diffusers` wrote: config.json builds the model, its state dict
loads with strict=True, and its forward on io.safetensors' input is compared with io's output.
"""
import argparse
import json
import os

import torch
from diffusers import UniPCMultistepScheduler, WanTransformer3DModel
from safetensors.torch import load_file, save_file

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
            text_dim=24, freq_dim=256, ffn_dim=48, num_layers=2, cross_attn_norm=True,
            qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None,
            rope_max_seq_len=1024, pos_embed_seq_len=None)
WAN_SCHEDULER = dict(num_train_timesteps=1000, solver_order=2, prediction_type="flow_prediction",
                     use_flow_sigmas=True, flow_shift=3.0, predict_x0=True, solver_type="bh2",
                     lower_order_final=True, final_sigmas_type="zero", timestep_spacing="linspace")


def inputs(gen):
    latent = torch.randn(4, 2, 6, 4, generator=gen)
    text = torch.zeros(512, TINY["text_dim"])
    text[:7] = torch.randn(7, TINY["text_dim"], generator=gen)
    # t = 4: diffusers forms the sinusoid's angles t·f in float32 (at t = 700 they are off by up to 4e-5, a
    # 1.3e-5 change of the output); vfm forms them in double. At t = 4 the two agree to 1.2e-7.
    return latent, text, torch.tensor([4.0])


def forward(model, latent, text, t):
    return model(latent[None], t, text[None], return_dict=False)[0][0]


def make(out):
    gen = torch.Generator().manual_seed(27)
    model = WanTransformer3DModel(**TINY).float()
    with torch.no_grad():  # every weight non-zero and away from its initial value
        for name, p in model.named_parameters():
            base = 1.0 if name.endswith(("norm_q.weight", "norm_k.weight", "norm2.weight")) else 0.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(os.path.join(out, "tiny"), safe_serialization=True)
    latent, text, t = inputs(gen)
    with torch.no_grad():
        y = forward(model, latent, text, t)
    r = torch.randn(y.shape, generator=gen)
    # the gradients in float64: torch's own float32 ones are off by up to 1.4e-4 of the largest (block 0's
    # cross-attention, whose 505 equal padding rows sum), vfm's (float32) by 3e-5
    model64 = WanTransformer3DModel(**TINY).double()
    model64.load_state_dict(model.state_dict())
    (forward(model64, latent.double(), text.double(), t.double()) * r.double()).sum().backward()
    io = {"latent": latent, "text": text, "timestep": t, "out": y, "r": r}
    for name, p in model64.named_parameters():
        io["grad." + name] = p.grad.float()
    save_file({k: v.contiguous() for k, v in io.items()}, os.path.join(out, "io.safetensors"))
    print("tiny Wan:", sum(p.numel() for p in model.parameters()), "parameters; out", tuple(y.shape))

    sched = UniPCMultistepScheduler(**WAN_SCHEDULER)
    sched.set_timesteps(12)
    sample = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    trace = {"start": sample.clone(), "timesteps": sched.timesteps.double(), "sigmas": sched.sigmas.double()}
    for i, ts in enumerate(sched.timesteps):
        v = torch.randn(3, 5, generator=gen, dtype=torch.float64)
        sample = sched.step(v, ts, sample, return_dict=False)[0]
        trace[f"model_output.{i}"] = v
        trace[f"sample.{i}"] = sample.clone()
    for order in (1, 3):  # sampler.unipc_order's other values, on a sequence of their own
        sched = UniPCMultistepScheduler(**{**WAN_SCHEDULER, "solver_order": order})
        sched.set_timesteps(12)
        sample = torch.randn(3, 5, generator=gen, dtype=torch.float64)
        trace[f"order{order}.start"] = sample.clone()
        for i, ts in enumerate(sched.timesteps):
            v = torch.randn(3, 5, generator=gen, dtype=torch.float64)
            sample = sched.step(v, ts, sample, return_dict=False)[0]
            trace[f"order{order}.model_output.{i}"] = v
            trace[f"order{order}.sample.{i}"] = sample.clone()
    save_file({k: v.contiguous() for k, v in trace.items()}, os.path.join(out, "unipc.safetensors"),
              metadata={"config": json.dumps(WAN_SCHEDULER)})
    print("UniPC: orders 2 (Wan's), 1 and 3, 12 steps, timesteps", [round(float(x), 3) for x in sched.timesteps])


def check(folder, out):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    model = WanTransformer3DModel.from_config(cfg).float()
    sd = load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    print("load_state_dict(strict=True):", model.load_state_dict(sd, strict=True))
    loaded = WanTransformer3DModel.from_pretrained(folder).float()
    io = load_file(os.path.join(out, "io.safetensors"))
    with torch.no_grad():
        for m, what in ((model, "strict load"), (loaded, "from_pretrained")):
            y = forward(m, io["latent"], io["text"], io["timestep"])
            err = ((y - io["out"]).abs().max() / io["out"].abs().max()).item()
            print(f"{what}: max |out - fixture| / max |fixture| = {err:.3g}")
            assert err < 1e-5, what


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "wan"))
    ap.add_argument("--check", help="a folder vfm export --format diffusers wrote")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.check:
        check(args.check, args.out)
    else:
        make(args.out)


if __name__ == "__main__":
    main()
