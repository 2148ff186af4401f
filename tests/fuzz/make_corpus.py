#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (committed; run again
only to change the seeds). Standard library only: the .npy, safetensors and tar bytes are laid out
by hand the way numpy, safetensors and Python's tarfile lay them out. Small fixtures from
tests/fixtures are copied in as well."""
import io
import json
import os
import pickle
import shutil
import struct
import tarfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def npy(descr, shape, data, fortran=False, version=1):
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    prefix = 10 if version == 1 else 12
    pad = 64 - (prefix + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + data


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def safetensors(tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def shard(members, fmt):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tf.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    return data[:sample_offsets(data)[-1] + 1024]  # the two zero blocks, without tarfile's record padding


def sample_offsets(tar_bytes):
    """Energon's .tar.idx: the offset of each sample's first member, then the end."""
    offsets, last = [], None
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tf:
        members = tf.getmembers()
        for m in members:
            key = m.name.split(".", 1)[0]
            if key != last:
                offsets.append(m.offset)
                last = key
        end = members[-1].offset_data + (members[-1].size + 511) // 512 * 512
    return offsets + [end]


def write(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data)


def copy_file(target, path, name):
    with open(os.path.join(ROOT, path), "rb") as f:
        write(target, name, f.read())


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    # ---- npy
    write("npy", "f4_2x3.npy", npy("<f4", (2, 3), f32([1, 2, 3, 4, 5, 6])))
    write("npy", "f4_fortran.npy", npy("<f4", (2, 3), f32([1, 4, 2, 5, 3, 6]), fortran=True))
    write("npy", "f2_be_v2.npy", npy(">f2", (3,), struct.pack(">3H", 0x3C00, 0x0001, 0x7C00), version=2))
    write("npy", "bf16_v3.npy", npy("<V2", (2, 1), struct.pack("<2H", 0x3F80, 0xFFC0), version=3))
    write("npy", "i8_scalar.npy", npy("<i8", (), struct.pack("<q", -7)))
    write("npy", "u1_empty.npy", npy("|u1", (0, 4), b""))
    write("npy", "b1_4d.npy", npy("|b1", (1, 2, 1, 2), bytes([0, 1, 1, 0])))
    for n in ["f8_be.npy", "i2_fortran_3d.npy", "u4.npy", "c8.npy"]:
        copy_file("npy", "tests/fixtures/data/npy/" + n, "fixture_" + n)
    # ---- safetensors
    write("safetensors", "f32.safetensors", safetensors([("w", "F32", [2, 3], f32([1, 2, 3, 4, 5, 6]))]))
    write("safetensors", "mixed_meta.safetensors", safetensors(
        [("a", "BF16", [2, 2], struct.pack("<4H", 0x3F80, 0x4000, 0xBF80, 0x0000)),
         ("b", "I64", [1], struct.pack("<q", 42)),
         ("c", "F64", [], struct.pack("<d", 0.5)),
         ("d", "I32", [0, 3], b"")],
        metadata={"format": "pt", "step": "12"}))
    # ---- json (sample metadata parts)
    for name, obj in [
        ("caption.json", {"caption": "a red circle", "fps": 24, "class": 3}),
        ("pixel_space.json", {"caption": "a blue cross moving left", "fps": 12.5,
                              "pixel_space": {"height": 32, "width": 48, "frames": 8}}),
        ("dfm.json", {"image_height": 1, "image_width": 8, "caption": "a red square", "fps": 24}),
        ("nulls.json", {"caption": None, "fps": None, "class": 30.0, "extra": [1, True, "x"]}),
    ]:
        write("json", name, json.dumps(obj).encode())
    write("json", "escapes.json", b'{"caption": "caf\\u00e9 \\"q\\" \\ud83d\\ude00", "fps": 1e1}')
    # ---- yaml (config files, then NUL-separated overrides)
    for path in ["configs/tiny-mock.yaml", "configs/demo.yaml", "tests/fixtures/dfm/dit_pretrain.yaml"]:
        copy_file("yaml", path, os.path.basename(path))
    for path in ["meta.yaml", "prepared/.nv-meta/split.yaml", "prepared/.nv-meta/split_excl.yaml",
                 "prepared/.nv-meta/dataset.yaml"]:  # Energon's dataset YAML
        copy_file("yaml", "tests/fixtures/energon/" + path, "energon_" + os.path.basename(path).lstrip("."))
    write("yaml", "flow.yaml", b"model: {preset: tiny, hidden_size: 64}\ntrain:\n  lr: 1.0e-4\n"
          b"dataset:\n  path: \"data/x\"\n  split: [8, 1, 1]\n")
    write("yaml", "overrides.yaml", b"model:\n  preset: tiny\n\x00model.hidden_size=128\x00"
          b"dataset.path='a b'\x00train.lr=[1, 2]\x00+optim.weight_decay=0.1")
    write("yaml", "anchors.yaml", b"a: &x 1\nb: *x\n---\nc: 2\n")
    # ---- tar: shards with a sample the encoder takes (latent [2,1,4,4], text [3,4], json)
    latent = npy("<f4", (2, 1, 4, 4), f32([i / 8.0 for i in range(32)]))
    text = npy("<f4", (3, 4), f32([1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]))
    meta = json.dumps({"caption": "a green diamond", "fps": 24}).encode()
    st_latent = safetensors([("latent", "F32", [1, 2, 2, 4, 4], f32([0.25] * 64))])
    members = [("000000.latent.npy", latent), ("000000.text.npy", text), ("000000.json", meta),
               ("000001.latent.safetensors", st_latent), ("000001.json", b'{"caption": "x", "class": 2}')]
    with open(os.path.join(ROOT, "tests/fixtures/torch/tensors/view_latent5d_bfloat16.pth"), "rb") as f:
        pth = f.read()
    with open(os.path.join(ROOT, "tests/fixtures/torch/tensors/pickle_p4_float16.pickle"), "rb") as f:
        pkl = f.read()
    members += [("000003.pth", pth), ("000003.pickle", pkl)]
    for fmt, name in [(tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")]:
        long_members = members + [("d" * 120 + "/000002.latent.npy", latent)] if fmt != tarfile.USTAR_FORMAT else members
        data = shard(long_members, fmt)
        write("tar", name + ".tar", data)
        if fmt == tarfile.USTAR_FORMAT:
            idx = sample_offsets(data)
            write("tar", name + "_with_idx.tar", bytes([len(idx)]) + struct.pack("<%dQ" % len(idx), *idx) + data)
    for n in ["ustar.tar", "crafted.tar"]:
        copy_file("tar", "tests/fixtures/data/tar/" + n, "fixture_" + n)
    # ---- zip: torch.save archives (torch 2.x and 1.x, big-endian, Zip64 extras, views, state dicts)
    for n in ["tensors/float32.pth", "tensors/view_latent5d_bfloat16.pth", "tensors/zip64_extra.pth",
              "tensors/byteorder_big_float32.pth", "tensors/no_crc.pth", "tensors/view_expand_float32.pth",
              "tensors/t1_view_transpose_bfloat16.pth", "tensors/parameter.pth", "state_dicts/sd_nested.pth",
              "state_dicts/sd_shared.pth", "malicious/state_dict.pth"]:
        copy_file("zip", "tests/fixtures/torch/" + n, "fixture_" + n.replace("/", "_"))
    # ---- pickle: pickle.dumps of tensors (protocols 2-5, torch 2.x and 1.x), legacy torch.save
    # streams, refused globals, and plain values in every protocol
    for n in ["tensors/pickle_p2_float32.pickle", "tensors/pickle_p3_bfloat16.pickle",
              "tensors/pickle_p4_float16.pickle", "tensors/pickle_p5_float32.pickle",
              "tensors/t1_pickle_p2_float16.pickle", "tensors/legacy_float64.pth", "tensors/t1_legacy_bfloat16.pth",
              "state_dicts/sd_repeated_key.pickle", "malicious/os_system.pickle", "malicious/eval.pickle",
              "malicious/nested_reduce.pickle", "malicious/nested_blob.pickle", "malicious/subprocess.pickle"]:
        copy_file("pickle", "tests/fixtures/torch/" + n, "fixture_" + n.replace("/", "_"))
    shared = [1, 2]
    plain = {"a": [0, -1, 255, 65536, -2 ** 31, 2 ** 40, 2 ** 70, -(2 ** 70), 2.5, None, True, False],
             "s": ("x", "caf\u00e9", b"\x00\xff", bytearray(b"ab")), "shared": (shared, shared), 3: {1.0: ()}}
    for proto in range(0, 6):
        write("pickle", "plain_p%d.pickle" % proto, pickle.dumps(plain, protocol=proto))
    # ---- inputs that crashed a reader once (tests/fixtures/fuzz/<target>_*; tests/unit/test_fuzz_regressions.c)
    fixdir = os.path.join(ROOT, "tests", "fixtures", "fuzz")
    for n in sorted(os.listdir(fixdir)) if os.path.isdir(fixdir) else []:
        target = n.split("_", 1)[0]
        copy_file(target, "tests/fixtures/fuzz/" + n, "regression_" + n.split("_", 1)[1])


if __name__ == "__main__":
    main()
