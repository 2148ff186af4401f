#!/usr/bin/env python3
"""The PyTorch peer of `vfm bench`: the same DiT, as a strong user would train it in PyTorch 2.

It reads what `vfm bench --check DIR` wrote (DIR/bench.json: the model and the benchmark's pack;
DIR/model.safetensors: vfm's initial weights; DIR/check.safetensors: a fixed input and vfm's output
on it), builds the model from reference/model_torch.py's definition (its modules and parameter
names: vfm's weights load strictly), and runs it the fast way:

  - bf16 autocast over fp32 parameters (PyTorch's mixed precision: bf16 matmuls and attention,
    fp32 master weights, fp32 LayerNorm/RMSNorm statistics), fused AdamW (fused=True) with vfm's
    hyper-parameters and decay only on >= 2-D weights, global-norm clipping (foreach);
  - attention through F.scaled_dot_product_attention (flash / cuDNN / memory-efficient kernels
    chosen by PyTorch; GQA through enable_gqa), F.rms_norm for QK-norm;
  - torch.compile of the network (default mode; --compile-mode to change);
  - packing: the pinned configs have one sample per pack, which is one dense attention over the
    whole pack with no mask. A pack of several samples is run sample by sample (each a dense
    SDPA call, no mask, no padding) — exactly what vfm's varlen attention computes, without the
    flash-varlen kernel PyTorch does not ship.

Before timing, the peer's forward (the code it times, without compile) runs on vfm's fixed input
and must match vfm's output: max|a - b| <= atol + rtol * max|vfm| with rtol 5e-2 in bf16 (1e-4 in
fp32), and the EDM loss within the same relative bound; a mismatch exits 1 before anything is timed.
Then warm-up steps (which include compilation) and timed steps of the full training step on the
benchmark's pack (random latents and noise made on the device), with the FLOP count vfm used.
The last line is `bench-json: {...}` (bench/run_pair.sh reads it).

    python3 bench/torch_peer.py --from DIR                      # on the GPU
    python3 bench/torch_peer.py --from DIR --device cpu --dtype f32 --no-compile   # a CPU smoke run
"""
import argparse
import contextlib
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from model_torch import DiT, DiTConfig, edm_coefficients, pos_embed_2d, pos_embed_3d, timestep_embedding  # noqa: E402

ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "I32": torch.int32,
             "I64": torch.int64}


def read_safetensors(path):
    """A safetensors file as (dict name -> tensor, metadata): the format is an 8-byte header length,
    a JSON header and the raw little-endian bytes (the `safetensors` package may not be installed).
    Each tensor is read into its own buffer (one copy, for the 8 GB of a 2 B model)."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        meta = header.pop("__metadata__", {}) or {}
        base = 8 + n
        for name, e in header.items():
            a, b = e["data_offsets"]
            buf = bytearray(b - a)
            f.seek(base + a)
            if f.readinto(buf) != b - a:
                raise SystemExit(f"torch_peer: {path}: {name} is cut short")
            t = torch.frombuffer(buf, dtype=ST_DTYPES[e["dtype"]]) if b > a else torch.empty(0, dtype=ST_DTYPES[e["dtype"]])
            out[name] = t.reshape(e["shape"])
    return out, meta


class Peer(torch.nn.Module):
    """The reference model's parameters with a fast forward over one sample: batch dim 1, fused
    SDPA, F.rms_norm, no per-sample Python work inside the compiled graph but the embeddings."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref
        cfg = ref.cfg
        if cfg.dit:
            raise SystemExit("torch_peer: model.variant=adaln-zero is not in the peer (dfm and nemo-adaln are; the "
                             "pinned benchmark configs are dfm)")
        self.cfg = cfg

    def attend(self, mod, x, ctx):
        cfg = self.cfg
        B, n, m = x.shape[0], x.shape[1], ctx.shape[1]
        q = mod.q(x).view(B, n, cfg.heads, cfg.head_dim)
        k = mod.k(ctx).view(B, m, mod.kv_heads, cfg.head_dim)
        v = mod.v(ctx).view(B, m, mod.kv_heads, cfg.head_dim)
        if mod.qk_norm:
            q = F.rms_norm(q, (cfg.head_dim,), mod.q_norm.weight, cfg.ln_eps)
            k = F.rms_norm(k, (cfg.head_dim,), mod.k_norm.weight, cfg.ln_eps)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           enable_gqa=mod.kv_heads != cfg.heads)
        return mod.proj(o.transpose(1, 2).reshape(B, n, cfg.hidden))

    def forward(self, x, c_noise, fps, text, pos):
        """x [B, n, token_dim], c_noise and fps [B], text [B, l, d_text], pos [1, n, D] -> F [B, n, out_dim]
        (B samples of one shape; B = 1 for a pack of mixed shapes)."""
        cfg, ref = self.cfg, self.ref
        eps = cfg.block_ln_eps
        c = ref.t_embedder(timestep_embedding(c_noise, cfg.hidden, 0))
        f = ref.fps_embedder(timestep_embedding(fps, cfg.fps_dim, 1))
        c = c + F.pad(f, (0, cfg.hidden - cfg.fps_dim))
        if cfg.variant == "nemo-adaln":
            c = ref.cond_norm(c)
        c_silu = F.silu(c)
        h = ref.x_embedder(x) + pos
        D = cfg.hidden
        for blk in ref.blocks:
            mod = blk.adaln(c_silu).unsqueeze(1)  # [1, 1, n_chunks·D]
            ch = mod.split(D, dim=-1)
            y = F.layer_norm(h, (D,), eps=eps) * (1 + ch[1]) + ch[0]
            h = h + ch[2] * self.attend(blk.self_attn, y, y)
            if cfg.cross:
                y = F.layer_norm(h, (D,), eps=eps) * (1 + ch[4]) + ch[3]
                h = h + ch[5] * self.attend(blk.cross_attn, y, text)
            y = F.layer_norm(h, (D,), eps=eps) * (1 + ch[-2]) + ch[-3]
            h = h + ch[-1] * blk.mlp(y)
        return ref.final_linear(h)


def pos_table(cfg, grid, device):
    fn = pos_embed_2d if cfg.pos == "sincos2d" else pos_embed_3d
    return fn(cfg.hidden, tuple(grid)).to(device).unsqueeze(0)


def edm_loss(net, cfg, sigma_data, samples):
    """DFM's EDM loss over a pack, sample by sample: mean over all tokens of w(σ)·mean_c (D − x0)².
    samples: dicts with latent [n, C], noise [n, C], sigma [1], fps [1], text [1, l, d], pos [1, n, D]."""
    total, count, outs = 0.0, 0, []
    for s in samples:
        x0 = sigma_data * s["latent"]
        c_skip, c_out, c_in, c_noise, weight = edm_coefficients(s["sigma"], sigma_data)
        x_t = x0 + s["sigma"] * s["noise"]
        Fx = net((c_in * x_t).unsqueeze(0), c_noise, s["fps"], s["text"], s["pos"])[0]
        D = c_skip * x_t + c_out * Fx.float()
        err = weight * ((D - x0) ** 2).mean(dim=-1)
        total = total + err.sum()
        count += err.shape[0]
        outs.append(Fx)
    return total / count, outs


def edm_loss_batched(net, cfg, sigma_data, samples):
    """edm_loss for a pack whose samples all have one shape (the demo's images): one forward over a
    batch [B, n, ·] (SDPA batched over samples, still no mask and no padding), the same loss."""
    latent = torch.stack([s["latent"] for s in samples])
    noise = torch.stack([s["noise"] for s in samples])
    sigma = torch.cat([s["sigma"] for s in samples])
    fps = torch.cat([s["fps"] for s in samples])
    text = torch.cat([s["text"] for s in samples])
    x0 = sigma_data * latent
    c_skip, c_out, c_in, c_noise, weight = edm_coefficients(sigma, sigma_data)
    col = lambda t: t.view(-1, 1, 1)  # noqa: E731
    x_t = x0 + col(sigma) * noise
    Fx = net(col(c_in) * x_t, c_noise, fps, text, samples[0]["pos"])
    D = col(c_skip) * x_t + col(c_out) * Fx.float()
    err = weight.view(-1, 1) * ((D - x0) ** 2).mean(dim=-1)
    return err.sum() / err.numel(), list(Fx)


def close(what, got, ref, rtol, atol=0.0):
    err = (got.double() - ref.double()).abs().max().item()
    bound = atol + rtol * ref.double().abs().max().item()
    ok = err <= bound
    print(f"check {what}: max|peer - vfm| = {err:.3e}, bound {bound:.3e} ({'ok' if ok else 'FAILED'})")
    return ok


def check(peer, cfg, ckdir, device, autocast, bf16):
    """The peer's forward and EDM loss on vfm's fixed input (one sample, σ = 0.8, no CFG drop)."""
    t, meta = read_safetensors(os.path.join(ckdir, "check.safetensors"))
    grid = [int(v) for v in meta["grid"].split(",")]
    n = grid[0] * grid[1] * grid[2]
    s = {"latent": t["latent_tokens"][:n].to(device), "noise": t["noise"][:n].to(device),
         "sigma": t["sigma"].to(device), "fps": t["fps"].to(device), "text": t["text"].unsqueeze(0).to(device),
         "pos": pos_table(cfg, grid, device)}
    with torch.no_grad(), autocast():
        loss, outs = edm_loss(peer, cfg, float(meta["sigma_data"]), [s])
    rtol = 5e-2 if bf16 else 1e-4
    ok = close("F on vfm's fixed input", outs[0].float().cpu(), t["F"][:n], rtol)
    vloss = float(meta["loss"])
    lerr = abs(loss.item() - vloss)
    lok = lerr <= rtol * abs(vloss)
    print(f"check EDM loss: peer {loss.item():.6f}, vfm {vloss:.6f}, |diff| {lerr:.3e} ({'ok' if lok else 'FAILED'})")
    return ok and lok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="src", required=True, help="the directory `vfm bench --check DIR` wrote")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16", help="bf16 autocast (default) or plain fp32")
    ap.add_argument("--no-compile", action="store_true", help="eager mode (the CPU smoke run)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (default, max-autotune, ...)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: vfm's, at least 3 with compile)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default: vfm's)")
    ap.add_argument("--skip-check", action="store_true", help="time without checking against vfm (not for results)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the peak MFU is measured against (default: vfm's)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads of PyTorch's ops (default: PyTorch's)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)

    with open(os.path.join(a.src, "bench.json")) as f:
        info = json.load(f)
    b = info["bench"]
    cfg = DiTConfig(**info["model"])
    device = torch.device(a.device)
    torch.manual_seed(0)
    ref = DiT(cfg)
    weights, _ = read_safetensors(os.path.join(a.src, "model.safetensors"))
    ref.load_state_dict(weights, strict=True)
    ref.to(device)
    peer = Peer(ref)
    bf16 = a.dtype == "bf16"

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    compiled = not a.no_compile
    warmup = a.warmup if a.warmup is not None else max(b["warmup"], 3 if compiled else 1)
    steps = a.steps if a.steps is not None else b["steps"]
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"torch peer: torch {torch.__version__} on {dev_name}; "
          f"{'bf16 autocast over fp32 parameters' if bf16 else 'fp32'}; SDPA attention; "
          f"{'torch.compile (mode ' + a.compile_mode + ')' if compiled else 'eager'}; AdamW fused="
          f"{device.type == 'cuda'}; clip_grad_norm_ {b['clip_grad']}")
    print(f"model: DiT {cfg.variant}, hidden {cfg.hidden}, {cfg.layers} layers, {cfg.heads} heads (head dim "
          f"{cfg.head_dim}), {sum(p.numel() for p in ref.parameters()) / 1e6:.1f} M parameters")
    one_shape = len({(tuple(s["grid"]), s["text"]) for s in b["samples"]}) == 1
    batched = len(b["samples"]) > 1 and one_shape
    print("packing: " + ("one sample per pack: one dense SDPA over the pack, no mask" if len(b["samples"]) == 1 else
                         f"{len(b['samples'])} samples of one shape per pack: one batched forward, SDPA batched over "
                         "the samples (no mask, no padding)" if batched else
                         f"{len(b['samples'])} samples per pack: one dense SDPA per sample (no mask, no padding)"))
    pack_loss = edm_loss_batched if batched else edm_loss

    if not a.skip_check and not check(peer, cfg, a.src, device, autocast, bf16):
        print("torch_peer: the peer does not compute vfm's function on the fixed input; nothing timed", file=sys.stderr)
        return 1

    net = torch.compile(peer, mode=a.compile_mode) if compiled else peer  # compiled on the first step
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    no_decay = [p for p in ref.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": b["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=b["lr"], betas=(b["beta1"], b["beta2"]),
                            eps=b["eps"], fused=device.type == "cuda")
    C = cfg.token_dim
    shapes = []
    for s in b["samples"]:
        g = s["grid"]
        shapes.append((g[0] * g[1] * g[2], pos_table(cfg, g, device), s["text"], s["fps"]))
    gen = torch.Generator(device=device).manual_seed(1)

    def make_pack():
        out = []
        for n, pos, l, fps in shapes:
            out.append({"latent": torch.randn(n, C, device=device, generator=gen),
                        "noise": torch.randn(n, C, device=device, generator=gen),
                        "sigma": torch.exp(torch.randn(1, device=device, generator=gen)),
                        "fps": torch.full((1,), float(fps), device=device),
                        "text": torch.randn(1, l, cfg.d_text, device=device, generator=gen), "pos": pos})
        return out

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    accum = int(b["packs_per_step"])
    timed_s, losses = 0.0, []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    def step(packs):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for p in packs:
            with autocast():
                loss, _ = pack_loss(net, cfg, b["sigma_data"], p)
            (loss / accum).backward()
            total += loss.detach()
        if b["clip_grad"] > 0:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), b["clip_grad"], foreach=True)
        opt.step()
        return total

    for it in range(warmup + steps):
        packs = [make_pack() for _ in range(accum)]
        sync()
        t0 = time.perf_counter()
        try:
            total = step(packs)
        except Exception as e:  # torch.compile needs Triton and a C compiler: without them, eager (said so)
            if not compiled or it > 0:
                raise
            print(f"torch_peer: torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  "running eager instead (the figures below are NOT compiled)", flush=True)
            compiled, net = False, peer
            opt.zero_grad(set_to_none=True)
            total = step(packs)
        sync()
        dt = time.perf_counter() - t0
        lv = float(total) / accum
        timed = it >= warmup
        print(f"{'timed' if timed else 'warm-up'} step {it - warmup + 1 if timed else it + 1}/"
              f"{steps if timed else warmup}: {1e3 * dt:.1f} ms, loss {lv:.4f}", flush=True)
        if timed:
            timed_s += dt
            losses.append(lv)

    tokens = sum(n for n, _, _, _ in shapes) * accum
    samples = len(shapes) * accum
    flops, attn = b["flops_per_step"], b["attn_flops_per_step"]
    peak = a.peak_tflops or b["peak_tflops"]
    peak_source = "--peak-tflops" if a.peak_tflops else b["peak_source"]
    secs = timed_s / steps
    tflops = flops / secs / 1e12
    mem = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    res = {"impl": "torch", "device": dev_name, "torch": torch.__version__, "compile": compiled, "dtype": a.dtype,
           "tokens_per_step": tokens, "samples_per_step": samples, "ms_per_step": 1e3 * secs,
           "tokens_per_s": tokens / secs, "samples_per_s": samples / secs, "tflops": tflops, "mfu": tflops / peak,
           "mfu_no_attn": (flops - attn) / secs / 1e12 / peak, "peak_tflops": peak, "flops_per_step": flops,
           "peak_device_bytes": mem}
    print(f"ms/step:       {res['ms_per_step']:.2f}")
    print(f"tokens/s:      {res['tokens_per_s']:.1f}")
    print(f"samples/s:     {res['samples_per_s']:.3f}")
    print(f"model TFLOP/s: {tflops:.4f} (vfm's FLOP count: {flops:.4g} per step, attention {100 * attn / flops:.1f}%)")
    print(f"MFU:           {100 * res['mfu']:.2f}% of {peak:.1f} TFLOP/s ({peak_source}); without attention "
          f"FLOPs {100 * res['mfu_no_attn']:.2f}%")
    if mem:
        print(f"peak memory:   {mem / 2**20:.1f} MiB (torch.cuda.max_memory_allocated)")
    print(f"loss:          {losses[0]:.4f} -> {losses[-1]:.4f}")
    print("bench-json: " + json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
