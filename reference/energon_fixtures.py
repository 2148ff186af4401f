#!/usr/bin/env python3
"""Writes tests/fixtures/energon/ with the real tools (PyPI webdataset and megatron-energon), for
the C tests in tests/unit/test_energon.c. Not part of CI (CI never runs Python).

    make && /work/venv-torch2/bin/python reference/energon_fixtures.py --vfm build/vfm

- prepared/      shards written by webdataset's TarWriter, indexed by `energon prepare
                 --split-ratio 6,2,2 --sample-type CrudeWebdataset` (its .nv-meta and .tar.idx
                 committed as Energon wrote them), plus split_excl.yaml: a hand-written split file
                 with brace patterns and excludes of a shard and of single samples.
- vfm_indexed/   shards (one in a directory whose name sorts differently by path components than
                 as a string, one sample key long enough for a pax header) indexed by
                 `vfm data index --split 8,1,1`; its .nv-meta and .tar.idx as vfm wrote them.
- meta.yaml      a MetadatasetV2 over both (a 3:1 blend for train; for val a concatenation with
                 split_config, subset ranges and subflavors).
- energon_read.json  what Energon's validation loader yields (shard, key), in order, for every
                 split of prepared/, of prepared/ under split_excl.yaml, of vfm_indexed/, and of
                 meta.yaml's val split: the C tests require vfm's split sources to yield exactly
                 these sequences; and `energon prepare` on a copy of vfm_indexed's shards, to show
                 Energon's own .nv-meta equals vfm's.

Every latent is a float32 .npy [4, 1, 4, 4] whose values encode the sample number (so the tests
can see which sample they got); every sample has a json with its caption.
"""
import argparse
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import webdataset as wds
import yaml
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_val_dataset,
    stateless,
)


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def write_shard(path, samples):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with wds.TarWriter(path) as w:
        for key, number in samples:
            w.write({
                "__key__": key,
                "latent.npy": npy_bytes(np.full((4, 1, 4, 4), number, np.float32)),
                "json": json.dumps({"caption": "sample %d" % number}).encode(),
            })


@dataclasses.dataclass
class KeySample(Sample):
    shard: str


@stateless
def cook(raw):
    return KeySample(**basic_sample_keys(raw), shard=raw["__shard__"])


class KeyTaskEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook)]

    def batch(self, samples):
        return samples


def energon_read(path, split, **kwargs):
    """(shard, key) in the order Energon's validation loader yields them (rank 0 of 1, no workers)."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(path, split_part=split, batch_size=1, worker_config=wc, task_encoder=KeyTaskEncoder(),
                         **kwargs)
    return [[s.shard, s.__key__] for batch in get_loader(ds) for s in batch]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vfm", default="build/vfm")
    ap.add_argument("--out", default="tests/fixtures/energon")
    args = ap.parse_args()
    vfm = os.path.abspath(args.vfm)
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    # prepared/: 5 shards of 3 samples, numbered 0..14
    prepared = os.path.join(out, "prepared")
    n = 0
    for s in range(5):
        write_shard(os.path.join(prepared, "part-%03d.tar" % s), [("p%04d" % (n + i), n + i) for i in range(3)])
        n += 3
    subprocess.run(["energon", "prepare", prepared, "--non-interactive", "--split-ratio", "6,2,2", "--sample-type",
                    "CrudeWebdataset", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    # a split file with brace patterns and excludes (whole shard part-004, samples p0001 and p0007)
    excl = {"split_parts": {"train": ["part-{000..002}.tar"], "val": ["part-{003..004}.tar"], "test": []},
            "exclude": ["part-004.tar", "part-000.tar/p0001", "part-002.tar/p0007"]}
    with open(os.path.join(prepared, ".nv-meta", "split_excl.yaml"), "w") as f:
        yaml.dump(excl, f, sort_keys=False)

    # vfm_indexed/: shards named so that Python's path order differs from string order
    indexed = os.path.join(out, "vfm_indexed")
    layout = [("s-000.tar", 3), ("s-001.tar", 3), ("s-002.tar", 2), ("s-003.tar", 3), ("s/x.tar", 2),
              ("s-0.tar", 2), ("t/000.tar", 3), ("t/001.tar", 3)]
    n = 100
    for name, count in layout:
        keys = [("v%04d" % (n + i), n + i) for i in range(count)]
        if name == "s-001.tar":  # a key longer than ustar's 100-byte name field: a pax header
            keys[1] = ("v%04d_%s" % (n + 1, "long" * 30), n + 1)
        write_shard(os.path.join(indexed, name), keys)
        n += count
    subprocess.run([vfm, "data", "index", indexed, "--split", "8,1,1"], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(os.path.join(indexed, ".vfm"))

    # energon prepare on the same shards writes what vfm wrote (index.uuid aside)
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "copy")
        shutil.copytree(indexed, copy, ignore=shutil.ignore_patterns(".nv-meta", "*.tar.idx"))
        subprocess.run(["energon", "prepare", copy, "--non-interactive", "--split-ratio", "8,1,1", "--sample-type",
                        "CrudeWebdataset", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        for f in [".nv-meta/.info.json", ".nv-meta/split.yaml", ".nv-meta/dataset.yaml"] + \
                 [name + ".idx" for name, _ in layout]:
            a = open(os.path.join(indexed, f), "rb").read()
            b = open(os.path.join(copy, f), "rb").read()
            if a != b:
                sys.exit("vfm and energon prepare differ in %s" % f)
        import sqlite3
        for table in ["samples", "sample_parts", "sqlite_master"]:
            rows = [sorted(sqlite3.connect(os.path.join(d, ".nv-meta/index.sqlite")).execute(
                "SELECT * FROM %s" % table).fetchall(), key=repr) for d in (indexed, copy)]
            if rows[0] != rows[1]:
                sys.exit("vfm and energon prepare differ in index.sqlite table %s" % table)

    meta = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {
            "train": {"blend": [{"weight": 3, "path": "prepared"}, {"weight": 1, "path": "vfm_indexed"}]},
            "val": {"blend": [
                {"path": "prepared", "split_config": "split_excl.yaml", "subset": {"range": [1, "end"]}},
                {"path": "vfm_indexed", "split_part": "train", "subset": {"range": ["25%", "75%"]},
                 "subflavors": {"source": "indexed"}},
            ]},
        },
    }
    with open(os.path.join(out, "meta.yaml"), "w") as f:
        yaml.dump(meta, f, sort_keys=False)

    read = {}
    for split in ["train", "val", "test"]:
        read["prepared/" + split] = energon_read(prepared, split)
        read["vfm_indexed/" + split] = energon_read(indexed, split)
    read["prepared:split_excl.yaml/train"] = energon_read(prepared, "train", split_config="split_excl.yaml")
    read["prepared:split_excl.yaml/val"] = energon_read(prepared, "val", split_config="split_excl.yaml")
    read["meta.yaml/val"] = energon_read(os.path.join(out, "meta.yaml"), "val")
    import megatron.energon
    read["energon_version"] = megatron.energon.__version__
    with open(os.path.join(out, "energon_read.json"), "w") as f:
        json.dump(read, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, x)) for d, _, files in os.walk(out) for x in files)
    print("wrote %s (%d bytes)" % (out, total))


if __name__ == "__main__":
    main()
