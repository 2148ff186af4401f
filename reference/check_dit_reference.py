"""vfm's adaln-zero against the DiT reference implementation itself (facebookresearch/DiT models.py,
which the user fetches: it is not part of vfm). Not run by CI; docs/models.md records a run.

  1. builds the reference's DiT (models.py) in the paper's setting for a given size, gives every
     parameter random non-zero values (zero-initialised gates would hide most of the model), and
     saves its state dict as safetensors (pos_embed included, as the reference keeps it);
  2. `vfm import` of that file (and of the same state dict torch.save'd: the same checkpoint bytes);
     `vfm export --input-size N` of the imported run;
  3. the reference loads vfm's export with load_state_dict(strict=True); every tensor equals the
     original bit for bit, and pos_embed agrees with the reference's own buffer;
  4. on a fixed input (a random latent, two timesteps, a class label and the null class), the
     reference's forward and `vfm model forward` agree within the stated tolerance.
With --checkpoint RUN (an adaln-zero run vfm trained), steps 1-2 are skipped: that run is exported,
the reference model is built from the exported shapes, and steps 3-4 run on it.

Needs torch, what models.py imports (timm, numpy) and safetensors, e.g. Debian's python3-torch and
python3-torchvision plus `pip install --no-deps timm==0.9.16 safetensors` in a venv with system packages:
  python3 reference/check_dit_reference.py --models /tmp/dit_ref/models.py --size S/2 --vfm build/vfm
  python3 reference/check_dit_reference.py --models /tmp/dit_ref/models.py --checkpoint RUN --vfm build/vfm
"""
import argparse
import glob
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

SIZES = {"S": (384, 12, 6, "dit-s"), "B": (768, 12, 12, "dit-b"), "L": (1024, 24, 16, "dit-l"), "XL": (1152, 28, 16, "dit-xl")}


def load_models_py(path):
    spec = importlib.util.spec_from_file_location("dit_reference_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="the reference's models.py")
    ap.add_argument("--size", default="S/2", help="S|B|L|XL / patch (default S/2)")
    ap.add_argument("--input-size", type=int, default=32, help="latent size N (default 32: 256x256 images)")
    ap.add_argument("--vfm", default="build/vfm")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |ref - vfm| / max |ref| allowed")
    ap.add_argument("--checkpoint", help="an adaln-zero run of vfm to check instead of random reference weights")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    models = load_models_py(args.models)
    N = args.input_size
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "vfm_export.safetensors")
        if args.checkpoint:
            run_dir = args.checkpoint
            run([args.vfm, "export", "--checkpoint", run_dir, "--to", out, "--input-size", str(N)])
            done = sorted(glob.glob(os.path.join(run_dir, "iter_*", "DONE")))
            if os.path.exists(os.path.join(run_dir, "DONE")):
                done = [os.path.join(run_dir, "DONE")]
            sd = load_file(os.path.join(os.path.dirname(done[-1]), "model.safetensors"))  # the checkpoint itself
            w = sd["x_embedder.proj.weight"]
            D, C, p = w.shape[0], w.shape[1], w.shape[-1]
            depth = len([k for k in sd if k.endswith(".attn.qkv.weight")])
            heads = {384: 6, 768: 12, 1024: 16, 1152: 16}.get(D, max(1, D // 64))
            classes = sd["y_embedder.embedding_table.weight"].shape[0] - 1
            learn_sigma = sd["final_layer.linear.weight"].shape[0] == 2 * C * p * p
            args.size = f"{D}x{depth}/{p}"
        else:
            name, patch = args.size.split("/")
            D, depth, heads, _ = SIZES[name]
            C, p, classes, learn_sigma = 4, int(patch), 1000, True
            ref = models.DiT(input_size=N, patch_size=p, in_channels=C, hidden_size=D, depth=depth, num_heads=heads,
                             class_dropout_prob=0.1, num_classes=classes, learn_sigma=learn_sigma)
            gen = torch.Generator().manual_seed(1234)
            with torch.no_grad():
                for pname, prm in ref.named_parameters():
                    if pname == "pos_embed":
                        continue
                    fan_in = prm.numel() // prm.shape[0] if prm.ndim >= 2 else prm.shape[-1]
                    prm.copy_(torch.randn(prm.shape, generator=gen) / max(1.0, fan_in) ** 0.5)
            sd = {k: v.detach().clone().contiguous() for k, v in ref.state_dict().items()}
            src = os.path.join(tmp, "reference.safetensors")
            save_file(sd, src)
            run_dir = os.path.join(tmp, "run")
            run([args.vfm, "import", "--from", src, "--variant", "adaln-zero", "--out", run_dir])
            run([args.vfm, "export", "--checkpoint", run_dir, "--to", out, "--input-size", str(N)])
            pt = os.path.join(tmp, "reference.pt")  # torch.save, as the reference's released weights
            torch.save(sd, pt)
            run([args.vfm, "import", "--from", pt, "--variant", "adaln-zero", "--out", os.path.join(tmp, "run_pt")])
            same_pt = open(os.path.join(run_dir, "iter_0000000", "model.safetensors"), "rb").read() == open(
                os.path.join(tmp, "run_pt", "iter_0000000", "model.safetensors"), "rb").read()
            print(f"vfm import of the torch.save file gives the same checkpoint bytes: {same_pt}")
            if not same_pt:
                sys.exit("FAIL: .pt and .safetensors imports differ")
        exported = load_file(out)
        fresh = models.DiT(input_size=N, patch_size=p, in_channels=C, hidden_size=D, depth=depth, num_heads=heads,
                           class_dropout_prob=0.1, num_classes=classes, learn_sigma=learn_sigma)
        pos_ref = fresh.pos_embed.detach().clone()
        result = fresh.load_state_dict(exported, strict=True)
        print(f"load_state_dict(strict=True): {result}")
        same = all(torch.equal(exported[k], sd[k]) for k in sd if k != "pos_embed")
        print(f"{len(sd) - (0 if args.checkpoint else 1)} tensors equal to the "
              f"{'checkpoint' if args.checkpoint else 'reference'}'s bit for bit: {same}")
        pos_diff = (exported["pos_embed"] - pos_ref).abs().max().item()
        print(f"pos_embed [1, {pos_ref.shape[1]}, {D}] vs the reference's own buffer: max |diff| {pos_diff:.3g}")
        fresh.eval()
        x = torch.randn(2, C, N, N, generator=torch.Generator().manual_seed(7))
        t, y = torch.tensor([3.0, 250.0]), torch.tensor([207 % classes, classes])  # a class and the null class
        with torch.no_grad():
            want = fresh(x, t, y)
        worst = 0.0
        for i in range(2):
            xi, yi = os.path.join(tmp, f"x{i}.npy"), os.path.join(tmp, f"y{i}.npy")
            np.save(xi, x[i].numpy())
            run([args.vfm, "model", "forward", "--checkpoint", run_dir, "--latent", xi, "--t",
                 repr(float(t[i])), "--class", str(int(y[i])), "--out", yi])
            got = torch.from_numpy(np.load(yi))
            rel = ((got - want[i]).abs().max() / want[i].abs().max()).item()
            print(f"sample {i} (t {float(t[i]):g}, class {int(y[i])}): output {tuple(got.shape)}, "
                  f"max |ref - vfm| / max |ref| = {rel:.3g}")
            worst = max(worst, rel)
        ok = same and pos_diff < 1e-6 and worst <= args.tol
        print(f"DiT-{args.size} at {N}x{N}: {'PASS' if ok else 'FAIL'} (tolerance {args.tol:g})")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
