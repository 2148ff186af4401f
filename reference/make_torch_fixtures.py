"""Writes the torch-format fixtures under tests/fixtures/torch/ (read by tests/unit/test_torch_tensor.c,
test_torch_data.c): real bytes from the real tools, with the values Python reads back.

    /work/venv-torch2/bin/python reference/make_torch_fixtures.py [--out tests/fixtures/torch]

Needs a venv with PyPI torch 2.x, numpy, webdataset and megatron-energon (`pip install torch numpy
webdataset megatron-energon`), and Debian's python3-torch (1.13) at /usr/bin/python3 for the torch 1.x
files (`apt-get install python3-torch`; the script runs itself there with --torch1). Not run by CI.

tensors/*.pth, *.pickle   one tensor each: every dtype, non-contiguous views, torch.save with pickle
                          protocols 2-5, pickle.dumps protocols 2-5, legacy (non-zip) torch.save,
                          checksums switched off, an nn.Parameter, Zip64 extra fields in every header
                          (zip64_extra.pth) and a big-endian writer's bytes (byteorder_big_*.pth), both
                          rebuilt from torch.save's records; t1_* written by torch 1.13
state_dicts/*             torch.save'd state dicts: a module's (with _metadata), nested, shared storage;
                          a pickled dict with a repeated key
malicious/*               pickles that create /tmp/vfm-pickle-marker-<name> when Python loads them
                          (checked here): os.system, builtins.eval, subprocess.Popen, a forbidden
                          global nested inside an allowed call, inside a torch.save zip, inside the
                          torch.save blob of a pickled tensor
expected.json             per file: what Python read back (dtype, shape, C-order bytes as hex, float32
                          values) or, for a malicious file, the global it names and its marker; per DFM
                          shard sample: the same for its pth and pickle parts
dfm/                      shards as DFM's prepare_energon_dataset_butterfly.py writes them (webdataset
                          ShardWriter "rank{r}-%06d.tar"; parts pth = bf16 latent [1,16,T,H,W], pickle =
                          pickle.dumps(bf16 T5-shaped embedding [1,16,32], zero past its real length),
                          json = {image_height: T, image_width: H}), then `energon prepare` (CrudeWebdataset,
                          split 1,0,0)
dfm_npy/                  the same samples with latent.npy / text.npy: the float32 values torch read back,
                          the json bytes unchanged (the twin for the bitwise training comparison)
dfm_torch1/               a shard whose parts torch 1.13 wrote, with DFM's older part names .pth/.pickle/.json
dfm_broken/               ten samples, five broken: NaN latent (000001), bad json (000002), a 2-D latent
                          (000004), a pickle naming os.system (000007), and rank1's shard cut inside the
                          pth member of its last sample (000009)
"""
import argparse
import collections
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile

MARKER = "/tmp/vfm-pickle-marker-"
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]


class Reduce:
    """Pickles as a call of fn(*args): how a malicious pickle is made."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def describe(t, name=None):
    """What the C test compares: dtype, shape, C-order bytes, float32 values (finite tensors only)."""
    import torch

    c = t.detach().contiguous()
    flat = c.reshape(-1)
    raw = flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)
    d = {
        "dtype": str(c.dtype).replace("torch.", ""),
        "shape": list(c.shape),
        "hex": bytes(raw.numpy().tobytes()).hex(),
    }
    f = flat.float()
    if bool(torch.isfinite(f).all()):
        d["values"] = [float(v) for v in f.tolist()]
    if name is not None:
        d["name"] = name
    return d


def base(torch, dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    if dt.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dt)
    if dt == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo, hi = (0, 250) if dt == torch.uint8 else (-120, 120)
    return torch.randint(lo, hi, shape, generator=g).to(dt)


def save_bytes(torch, obj, **kw):
    b = io.BytesIO()
    torch.save(obj, b, **kw)
    return b.getvalue()


# ---------------------------------------------------------------- single tensors and state dicts


def zip64_rezip(data, transform=None):
    """The records of a torch.save zip rewritten with Zip64 extra fields in every local and central
    header (sizes and offsets 0xffffffff), the way torch writes records of 4 GiB and more (too big
    to commit); payloads stay 64-byte aligned with torch's "FB" padding field. transform(name,
    payload) may change a record. torch.load reads the result (checked by read_back)."""
    import struct
    import zipfile
    import zlib

    zf = zipfile.ZipFile(io.BytesIO(data))
    out, central = bytearray(), bytearray()
    for info in zf.infolist():
        payload, name = zf.read(info.filename), info.filename.encode()
        if transform:
            payload = transform(info.filename, payload)
        crc, offset = zlib.crc32(payload), len(out)
        z64 = struct.pack("<HHQQ", 1, 16, len(payload), len(payload))
        pad = (-(offset + 30 + len(name) + len(z64) + 4)) % 64
        extra = z64 + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name),
                           len(extra)) + name + extra + payload
        cz64 = struct.pack("<HHQQQ", 1, 24, len(payload), len(payload), offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(name), len(cz64), 0, 0, 0, 0, 0xFFFFFFFF) + name + cz64
    n, cd_offset = len(zf.infolist()), len(out)
    out += central
    eocd64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out)



def tensor_cases(torch, prefix):
    """(file name, bytes, the object Python reads back) for every single-tensor case of this torch."""
    out = []
    t1 = prefix == "t1_"
    for i, dt in enumerate(DTYPES):
        if t1 and dt not in ("float32", "bfloat16", "float16", "int64", "bool"):
            continue
        x = base(torch, dt, (2, 3, 4), 10 + i)
        out.append((f"{prefix}{dt}.pth", save_bytes(torch, x)))
    views = {
        "transpose": lambda dt: base(torch, dt, (3, 5), 31).t(),
        "step": lambda dt: base(torch, dt, (4, 6), 32)[:, ::2],
        "offset": lambda dt: base(torch, dt, (5, 4), 33)[2:],
        "narrow": lambda dt: base(torch, dt, (6, 6), 34)[1:4, 2:5],
        "expand": lambda dt: base(torch, dt, (3, 1), 35).expand(3, 4),
        "permute": lambda dt: base(torch, dt, (2, 3, 4), 36).permute(2, 0, 1),
        "scalar": lambda dt: base(torch, dt, (), 37),
        "empty": lambda dt: base(torch, dt, (0, 3), 38),
        "latent5d": lambda dt: base(torch, dt, (2, 4, 2, 3, 3), 39)[1:],
    }
    for name, make in views.items():
        for dt in ("bfloat16", "float32") if not t1 else ("bfloat16",):
            if t1 and name not in ("transpose", "offset", "latent5d"):
                continue
            out.append((f"{prefix}view_{name}_{dt}.pth", save_bytes(torch, make(dt))))
    big = torch.arange(6, dtype=torch.int64) * (1 << 40) - (1 << 42)
    if not t1:
        out.append(("int64_large.pth", save_bytes(torch, big)))
        for proto in (2, 3, 4, 5):
            x = base(torch, "bfloat16", (3, 4), 50 + proto)[:, 1:]
            out.append((f"pth_protocol{proto}.pth", save_bytes(torch, x, pickle_protocol=proto)))
    for proto in (2, 3, 4, 5) if not t1 else (2, 4):
        for dt in ("bfloat16", "float16", "float32"):
            x = base(torch, dt, (1, 6, 4), 60 + proto)
            if dt == "bfloat16":
                x = x[:, 1:]  # a view: offset into the storage
            out.append((f"{prefix}pickle_p{proto}_{dt}.pickle", pickle.dumps(x, protocol=proto)))
    x = base(torch, "bfloat16", (2, 5), 70).t()
    out.append((f"{prefix}legacy_bfloat16.pth", save_bytes(torch, x, _use_new_zipfile_serialization=False)))
    if not t1:
        out.append(("legacy_float64.pth", save_bytes(torch, base(torch, "float64", (3, 2), 71),
                                                     _use_new_zipfile_serialization=False)))
        out.append(("zip64_extra.pth", zip64_rezip(save_bytes(torch, base(torch, "bfloat16", (3, 5), 74)[1:]))))
        for dt, size in (("float32", 4), ("bfloat16", 2)):
            # as a big-endian machine writes it: byteorder "big", storages byte-swapped (torch.load swaps back)
            def big(name, payload, size=size):
                if name.endswith("/byteorder"):
                    return b"big"
                if "/data/" in name:
                    return b"".join(payload[i:i + size][::-1] for i in range(0, len(payload), size))
                return payload
            out.append((f"byteorder_big_{dt}.pth", zip64_rezip(save_bytes(torch, base(torch, dt, (2, 3), 75).t()), big)))
        out.append(("parameter.pth", save_bytes(torch, torch.nn.Parameter(base(torch, "float32", (2, 2), 72)))))
        torch.serialization.set_crc32_options(False)
        out.append(("no_crc.pth", save_bytes(torch, base(torch, "bfloat16", (2, 3), 73))))
        torch.serialization.set_crc32_options(True)
    return out


def state_dict_cases(torch, prefix):
    nn = torch.nn
    torch.manual_seed(5)
    m = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2, bias=False))
    m(torch.randn(5, 4))  # running stats and num_batches_tracked become non-trivial
    sd = m.state_dict()
    out = [(f"{prefix}sd_module.pth", save_bytes(torch, sd))]
    if prefix:
        return out
    out.append(("sd_module_bf16_p4.pth", save_bytes(torch, {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                                                            for k, v in sd.items()}, pickle_protocol=4)))
    x = base(torch, "float32", (4, 4), 80)
    out.append(("sd_shared.pth", save_bytes(torch, {"a": x, "b": x[1:], "c": x.t(), "d": x[:, 2]})))
    nested = {"model": sd, "epoch": 3, "name": "tiny", "ema": [x[0], base(torch, "float16", (3,), 81)],
              7: base(torch, "int32", (2,), 82)}
    out.append(("sd_nested.pth", save_bytes(torch, nested)))
    # a dict whose key 'b' is patched into a second 'a': Python keeps the first position, the last value
    data = pickle.dumps({"a": x[0], "b": x[1], "c": x[2]}, protocol=4)
    assert data.count(b"\x8c\x01b\x94") == 1
    out.append(("sd_repeated_key.pickle", data.replace(b"\x8c\x01b\x94", b"\x8c\x01a\x94")))
    return out


def read_back(torch, data, kind):
    """What Python reads from the bytes: torch.load for torch files (weights_only=False: torch 2.x's safe
    loader rejects FRAME, which torch.save(pickle_protocol=4) writes; these files are our own), pickle for pickles."""
    if kind == "pickle":
        return pickle.loads(data)
    return torch.load(io.BytesIO(data), weights_only=False)


def flatten(obj, prefix=""):
    """The C reader's naming: dotted dict keys and list indices; non-tensors counted as skipped."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)], 0
    if isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    else:
        return [], 1
    out, skipped = [], 0
    for k, v in items:
        o, s = flatten(v, prefix + "." + k if prefix else k)
        out += o
        skipped += s
    return out, skipped


def write_files(torch, out_dir, prefix):
    """Writes this torch's single-tensor and state-dict files; returns their expected entries."""
    entries = []
    for sub, cases in (("tensors", tensor_cases(torch, prefix)), ("state_dicts", state_dict_cases(torch, prefix))):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
        for name, data in cases:
            rel = f"{sub}/{name}"
            with open(os.path.join(out_dir, rel), "wb") as f:
                f.write(data)
            obj = read_back(torch, data, "pickle" if name.endswith(".pickle") else "pth")
            e = {"file": rel, "torch": torch.__version__}
            if sub == "tensors":
                e["kind"] = "tensor"
                e.update(describe(obj))
            else:
                tensors, skipped = flatten(obj)
                e["kind"] = "state_dict"
                e["tensors"] = [describe(t, n) for n, t in tensors]
                e["skipped"] = skipped
            entries.append(e)
    return entries


# ---------------------------------------------------------------- malicious pickles


def legacy_stream(obj):
    """A legacy torch.save stream around an arbitrary object (no storages)."""
    b = io.BytesIO()
    for part in (0x1950A86A20F9469CFC6C, 1001,
                 {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}},
                 obj, []):
        pickle.dump(part, b, protocol=2)
    return b.getvalue()


def malicious_cases(torch):
    """(file, bytes, the global the C reader must name, marker, how Python loads it)."""
    out = []

    def marker(name):
        return MARKER + name

    m = marker("os_system")
    out.append(("os_system.pickle", pickle.dumps(Reduce(os.system, (f"touch {m}",)), protocol=4), "posix.system", m, "pickle"))
    m = marker("eval")
    out.append(("eval.pickle", pickle.dumps(Reduce(eval, (f"open({m!r}, 'w').close()",)), protocol=3), "builtins.eval", m,
                "pickle"))
    m = marker("subprocess")
    out.append(("subprocess.pickle", pickle.dumps(Reduce(subprocess.Popen, (["touch", m],)), protocol=2),
                "subprocess.Popen", m, "pickle"))
    m = marker("nested_reduce")
    nested = Reduce(torch._utils._rebuild_tensor_v2,
                    (Reduce(os.system, (f"touch {m}",)), 0, (1,), (1,), False, collections.OrderedDict()))
    out.append(("nested_reduce.pickle", pickle.dumps(nested, protocol=4), "posix.system", m, "pickle"))
    m = marker("state_dict_pth")
    evil_sd = {"w": torch.zeros(2), "evil": Reduce(os.system, (f"touch {m}",))}
    out.append(("state_dict.pth", save_bytes(torch, evil_sd), "posix.system", m, "torch"))
    m = marker("nested_blob")
    blob = legacy_stream(Reduce(os.system, (f"touch {m}",)))
    out.append(("nested_blob.pickle", pickle.dumps(Reduce(torch.storage._load_from_bytes, (blob,)), protocol=4),
                "posix.system", m, "pickle"))
    return out


def write_malicious(torch, out_dir):
    os.makedirs(os.path.join(out_dir, "malicious"), exist_ok=True)
    entries = []
    for name, data, glob, marker, how in malicious_cases(torch):
        rel = f"malicious/{name}"
        with open(os.path.join(out_dir, rel), "wb") as f:
            f.write(data)
        # prove the payload is real: Python's own loader runs it
        if os.path.exists(marker):
            os.remove(marker)
        try:
            if how == "pickle":
                pickle.loads(data)
            else:
                torch.load(io.BytesIO(data), weights_only=False)
        except Exception:
            pass  # the call ran before whatever failed afterwards
        for _ in range(50):  # Popen returns before its child has run
            if os.path.exists(marker):
                break
            import time
            time.sleep(0.05)
        if not os.path.exists(marker):
            sys.exit(f"{rel}: Python loading it did not create {marker}: the payload is not real")
        os.remove(marker)
        entries.append({"file": rel, "kind": "malicious", "global": glob, "marker": marker})
    return entries


# ---------------------------------------------------------------- DFM shards


def dfm_tensors(torch, i, thw, L=16, d=32, channels=16):
    """DFM's latent and T5 embedding for sample i: bf16 [1,C,T,H,W] and [1,L,d] zero past its real length."""
    g = torch.Generator().manual_seed(1000 + i)
    t, h, w = thw
    if i % 4 == 3:  # a view into a batch of two: torch.save keeps the whole storage and an offset
        latent = torch.randn(2, channels, t, h, w, generator=g).to(torch.bfloat16)[1:]
    else:
        latent = torch.randn(1, channels, t, h, w, generator=g).to(torch.bfloat16)
    real = 3 + i % 9
    emb = torch.randn(1, L, d, generator=g)
    emb[:, real:] = 0  # zeroed past the real length, truncated, re-padded with zeros (as DFM)
    emb = torch.nn.functional.pad(emb[:, :real], (0, 0, 0, L - real)).to(torch.bfloat16)
    return latent, emb


DFM_SHAPES = [(1, 8, 8), (1, 4, 8), (2, 4, 4), (1, 8, 4)]


def write_shard(pattern, samples):
    import webdataset as wds

    w = wds.ShardWriter(pattern, maxcount=10000, verbose=0)
    for s in samples:
        w.write(s)
    w.close()


def energon_prepare(path):
    energon = os.path.join(os.path.dirname(sys.executable), "energon")
    subprocess.run([energon, "prepare", path, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type",
                    "CrudeWebdataset", "--no-progress"], check=True, stdout=subprocess.DEVNULL)


def part_entries(torch, shard_rel, samples, latent_part, text_part):
    out = []
    for s in samples:
        for part, kind in ((latent_part, "pth"), (text_part, "pickle")):
            t = read_back(torch, s[part], kind)
            e = {"shard": shard_rel, "key": s["__key__"], "part": part, "kind": "part"}
            e.update(describe(t))
            e.pop("values", None)  # the bytes say it all; float32 conversion is checked on the tensor files
            out.append(e)
    return out


def shard_rows(path):
    """The samples of a shard as Python's tarfile reads them: [{"__key__": k, part: bytes}]."""
    rows = []
    with tarfile.open(path) as tf:
        for m in tf:
            key, part = m.name.split(".", 1)
            if not rows or rows[-1]["__key__"] != key:
                rows.append({"__key__": key})
            rows[-1][part] = tf.extractfile(m).read()
    return rows


def write_dfm(torch, out_dir):
    import numpy as np

    entries = []
    for r in range(2):
        samples = []
        for k in range(4):
            i = r * 4 + k
            t, h, w = DFM_SHAPES[k]
            latent, emb = dfm_tensors(torch, i, (t, h, w))
            # as the butterfly script: the latent tensor itself (webdataset's encoder torch.saves it),
            # pickle.dumps of the embedding, the json dict with DFM's image_height = T quirk
            samples.append({"__key__": "%06d" % i, "pth": latent, "pickle": pickle.dumps(emb),
                            "json": {"image_height": t, "image_width": h}})
        os.makedirs(os.path.join(out_dir, "dfm"), exist_ok=True)
        write_shard(os.path.join(out_dir, "dfm", f"rank{r}-%06d.tar"), samples)
        rows = shard_rows(os.path.join(out_dir, "dfm", f"rank{r}-000000.tar"))
        twins = [{"__key__": row["__key__"],
                  "latent.npy": read_back(torch, row["pth"], "pth").float().numpy().astype(np.float32),
                  "text.npy": read_back(torch, row["pickle"], "pickle").float().numpy().astype(np.float32),
                  "json": row["json"]} for row in rows]
        os.makedirs(os.path.join(out_dir, "dfm_npy"), exist_ok=True)
        write_shard(os.path.join(out_dir, "dfm_npy", f"rank{r}-%06d.tar"), twins)
        entries += part_entries(torch, f"dfm/rank{r}-000000.tar", rows, "pth", "pickle")
    energon_prepare(os.path.join(out_dir, "dfm"))
    return entries


def write_dfm_torch1(torch, out_dir, raw_dir):
    """Wraps the parts torch 1.13 wrote (raw_dir) into a shard with DFM's older dotted part names."""
    with open(os.path.join(raw_dir, "dfm_samples.json")) as f:
        listing = json.load(f)
    samples = []
    for s in listing:
        row = {"__key__": s["key"]}
        for part in (".pth", ".pickle", ".json"):
            with open(os.path.join(raw_dir, s["key"] + part), "rb") as f:
                row[part] = f.read()
        samples.append(row)
    os.makedirs(os.path.join(out_dir, "dfm_torch1"), exist_ok=True)
    write_shard(os.path.join(out_dir, "dfm_torch1", "rank0-%06d.tar"), samples)
    energon_prepare(os.path.join(out_dir, "dfm_torch1"))
    # read back by torch 2 here; torch 1.13's own reading is checked in --torch1 (it must agree)
    entries = part_entries(torch, "dfm_torch1/rank0-000000.tar", samples, ".pth", ".pickle")
    for e, s in zip(entries, [x for x in listing for _ in (0, 1)]):
        if e["hex"] != s["hex"][e["part"]]:
            sys.exit(f"torch 1.13 and torch 2 read {e['key']}{e['part']} differently")
    return entries


def write_dfm_broken(torch, out_dir, evil_pickle):
    rows = []
    for i in range(10):
        latent, emb = dfm_tensors(torch, 100 + i, (1, 4, 4))
        meta = json.dumps({"image_height": 1, "image_width": 4}).encode()
        if i == 1:
            latent[0, 0, 0, 0, 0] = float("nan")
        if i == 2:
            meta = b'{"image_height": 1, "image_width": '
        if i == 4:
            latent = latent.reshape(16, 16)
        text = evil_pickle if i == 7 else pickle.dumps(emb)
        rows.append({"__key__": "%06d" % i, "pth": save_bytes(torch, latent), "pickle": text, "json": meta})
    d = os.path.join(out_dir, "dfm_broken")
    os.makedirs(d, exist_ok=True)
    write_shard(os.path.join(d, "rank0-%06d.tar"), rows[:6])
    write_shard(os.path.join(d, "rank1-%06d.tar"), rows[6:])
    # cut rank1's shard in the middle of the last sample's pth member (an interrupted copy)
    path = os.path.join(d, "rank1-000000.tar")
    with tarfile.open(path) as tf:
        last = [m for m in tf.getmembers() if m.name == "000009.pth"][0]
    with open(path, "r+b") as f:
        f.truncate(last.offset_data + last.size // 2)


# ---------------------------------------------------------------- torch 1.13 (Debian), run as a subprocess


def torch1_main(raw_dir):
    import torch

    entries = write_files(torch, raw_dir, "t1_")
    listing = []
    for i in range(3):
        latent, emb = dfm_tensors(torch, 200 + i, DFM_SHAPES[i])
        if i == 2:
            emb = emb.to(torch.float16)
        key = "%06d" % i
        parts = {".pth": save_bytes(torch, latent), ".pickle": pickle.dumps(emb),
                 ".json": json.dumps({"image_height": latent.shape[2], "image_width": latent.shape[3]}).encode()}
        for p, data in parts.items():
            with open(os.path.join(raw_dir, key + p), "wb") as f:
                f.write(data)
        listing.append({"key": key, "hex": {".pth": describe(read_back(torch, parts[".pth"], "pth"))["hex"],
                                            ".pickle": describe(read_back(torch, parts[".pickle"], "pickle"))["hex"]}})
    with open(os.path.join(raw_dir, "dfm_samples.json"), "w") as f:
        json.dump(listing, f)
    with open(os.path.join(raw_dir, "entries.json"), "w") as f:
        json.dump(entries, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/torch")
    ap.add_argument("--torch1", help=argparse.SUPPRESS)  # internal: run under Debian's torch 1.13
    ap.add_argument("--python1", default="/usr/bin/python3", help="a Python with torch 1.x")
    args = ap.parse_args()
    if args.torch1:
        torch1_main(args.torch1)
        return
    import torch

    if args.out and os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    entries = write_files(torch, args.out, "")
    entries += write_malicious(torch, args.out)
    with tempfile.TemporaryDirectory() as raw:
        subprocess.run([args.python1, os.path.abspath(__file__), "--torch1", raw], check=True)
        with open(os.path.join(raw, "entries.json")) as f:
            t1 = json.load(f)
        for e in t1:
            src = os.path.join(raw, e["file"])
            os.makedirs(os.path.dirname(os.path.join(args.out, e["file"])), exist_ok=True)
            shutil.copyfile(src, os.path.join(args.out, e["file"]))
            # torch 2 must read torch 1.13's bytes as torch 1.13 did
            with open(src, "rb") as f:
                data = f.read()
            obj = read_back(torch, data, "pickle" if e["file"].endswith(".pickle") else "pth")
            again = describe(obj)["hex"] if e["kind"] == "tensor" else [describe(t)["hex"] for _, t in flatten(obj)[0]]
            want = e["hex"] if e["kind"] == "tensor" else [t["hex"] for t in e["tensors"]]
            if again != want:
                sys.exit(f"{e['file']}: torch {torch.__version__} reads other values than torch 1.13")
        entries += t1
        entries += write_dfm_torch1(torch, args.out, raw)
    entries += write_dfm(torch, args.out)
    with open(os.path.join(args.out, "malicious/os_system.pickle"), "rb") as f:
        write_dfm_broken(torch, args.out, f.read())
    with open(os.path.join(args.out, "expected.json"), "w") as f:  # one entry a line
        f.write('{"torch": %s, "entries": [\n' % json.dumps(torch.__version__))
        f.write(",\n".join(json.dumps(e) for e in entries))
        f.write("\n]}\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(args.out) for n in ns)
    print(f"{args.out}: {len(entries)} entries, {total} bytes")


if __name__ == "__main__":
    main()
