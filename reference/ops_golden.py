"""Writes the op golden files tests/fixtures/golden/ops_*.bin with PyTorch (Debian's
python3-torch 1.13 is enough): inputs, outputs and gradients of every op for 2-3 shapes.

Each group of ops lives in a module reference/golden_ops_<group>.py exposing
`write_all(outdir)`; this driver runs them all (or those named on the command line).
    /usr/bin/python3 reference/ops_golden.py --out tests/fixtures/golden [group ...]
"""
import argparse
import glob
import importlib
import os
import sys

import torch


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "golden"))
    ap.add_argument("groups", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    modules = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(here, "golden_ops_*.py")))
    for name in modules:
        group = name[len("golden_ops_"):]
        if args.groups and group not in args.groups:
            continue
        torch.manual_seed(1234)
        importlib.import_module(name).write_all(args.out)
        print(f"wrote goldens of {group}")


if __name__ == "__main__":
    main()
