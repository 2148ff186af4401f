"""Writes the data-layer fixtures under tests/fixtures/data/ (read by tests/unit/test_tar.c, test_npy.c).

    python3 reference/make_data_fixtures.py [--out tests/fixtures/data]

Needs numpy. Optional: ml_dtypes (the bfloat16 .npy is then written by np.save; without it the same
bytes are built by hand) and webdataset (tar/webdataset.tar; kept as it is when webdataset is missing).
Both install from PyPI into any venv: `pip install numpy ml_dtypes webdataset`.

tar/<name>.tar           shards: Python tarfile in GNU, PAX and USTAR formats, one built block by block
                         (V7 and old-style headers, base-256 and pax sizes, 'g'/'K'/'D'/FIFO entries, no
                         end-of-archive blocks), and one written by webdataset.TarWriter
tar/<name>.tar.idx       the index Energon's prepare writes (its algorithm, re-run here on tarfile)
tar/<name>.expected.json per sample: key, byte range, parts (name, size, FNV-1a 64 of the bytes, later
                         duplicates win) — Energon's grouping, computed with its two regexes
npy/*.npy + npy/expected.json   one array per dtype / byte order / layout / header version, with the
                         values numpy's astype(float32) gives in C order
"""
import argparse
import io
import json
import os
import re
import struct
import tarfile

import numpy as np

# Energon config.py
SPLIT_NAME_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
SKIP_META_RE = re.compile(r"__[^/]*__($|/)")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


# ---------------------------------------------------------------- Energon's index, and the expected grouping


def energon_index(path):
    """prepare.py's loop: offsets of each sample's first member, then tar.offset at the end."""
    offsets, samples, last_key = [], [], None
    with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
        for member in tar:
            if not member.isreg() or SKIP_META_RE.match(member.name):
                continue
            m = SPLIT_NAME_RE.match(member.name)
            if m is None:
                continue
            key, part = m.group(1), m.group(2)
            if key != last_key:
                offsets.append(member.offset)
                samples.append({"key": key, "parts": {}})
                last_key = key
            data = tar.extractfile(member).read()
            samples[-1]["parts"][part] = data  # a repeated part: the later wins, first position kept
        offsets.append(tar.offset)
    return offsets, samples


def write_expected(path):
    offsets, samples = energon_index(path)
    with open(path + ".idx", "wb") as f:
        f.write(struct.pack("<%dQ" % len(offsets), *offsets))
    out = []
    for i, s in enumerate(samples):
        start = 0 if i == 0 else offsets[i]
        out.append({
            "key": s["key"],
            "range": [start, offsets[i + 1]],
            "parts": [{"name": n, "size": len(d), "fnv1a64": fnv1a64(d)} for n, d in s["parts"].items()],
        })
    with open(path[: -len(".tar")] + ".expected.json", "w") as f:
        json.dump({"num_samples": len(samples), "end": offsets[-1], "samples": out}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("%s: %d samples, %d bytes" % (path, len(samples), os.path.getsize(path)))


# ---------------------------------------------------------------- shards written by tarfile


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


LONG_DIR_NAME = "long/" + "p" * 60 + "/" + "q" * 70  # 136 chars: fits ustar's prefix/name split
LONG_FILE_NAME = "x/" + "f" * 120  # the file name alone is over 100: ustar cannot store it
VERY_LONG_NAME = "deep/" + ("r" * 50 + "/") * 5 + "s" * 40  # over 255


USTAR_MEMBERS = [
    ("000000.txt", "file", b"ustar"),
    (LONG_DIR_NAME + ".txt", "file", b"long name in a deep directory: ustar prefix field"),
    (LONG_DIR_NAME + ".json", "file", b'{"long": true}'),
    ("000002.txt", "file", b"last"),
]


def members():
    """(name, kind, payload) in tar order; kind: file, dir, symlink, hardlink."""
    m = [
        ("__meta__", "file", b'{"about": "fixture"}'),
        ("samples", "dir", b""),
        ("000000.json", "file", json.dumps({"image_height": 1, "image_width": 8, "caption": "a red square", "fps": 24}).encode()),
        ("000000.latent.npy", "file", npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)),
        ("000000.txt", "file", b"a red square\n"),
        ("000001..pth", "file", bytes(range(200))),
        ("000001..json", "file", b'{"image_height": 1, "image_width": 4}'),
        ("a/b.c", "dir", b""),
        ("a/b.c/d.e.f", "file", b"nested dots"),
        ("a/b.c/link.txt", "symlink", b"d.e.f"),
        ("a/b.c/d.json", "file", b"{}"),
        ("noext", "file", b"no dot: skipped"),
        ("__dir__/x.txt", "file", b"meta directory: skipped"),
        (LONG_DIR_NAME + ".txt", "file", b"long name in a deep directory"),
        (LONG_DIR_NAME + ".json", "file", b'{"long": true}'),
        (LONG_FILE_NAME + ".txt", "file", b"long file name"),
        (VERY_LONG_NAME + ".bin", "file", bytes(range(256)) * 3),
        (VERY_LONG_NAME + ".cls", "file", b"7"),
        ("dir/.hidden", "file", b"key 'dir/', part 'hidden'"),
        ("000002.txt", "file", b"first"),
        ("000002.json", "file", b'{"n": 2}'),
        ("000002.txt", "file", b"second, which wins"),
        ("000003.txt", "file", b"three"),
        ("000004.txt", "file", b"four"),
        ("000005.txt", "hardlink", b"000004.txt"),
        ("000003.cls", "file", b"3"),
        ("000006.empty", "file", b""),
        ("\u00fc/000007.txt", "file", "non-ASCII directory \u00fc".encode()),
        ("__meta__/end.json", "file", b"{}"),
    ]
    return m


def write_tarfile_shard(path, fmt, pax_headers=None):
    ustar = fmt == tarfile.USTAR_FORMAT
    with tarfile.open(path, "w", format=fmt, pax_headers=pax_headers or {}, encoding="utf-8") as tar:
        for name, kind, payload in (USTAR_MEMBERS if ustar else members()):
            ti = tarfile.TarInfo(name)
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
            if kind == "file":
                ti.size, ti.mode = len(payload), 0o644
                tar.addfile(ti, io.BytesIO(payload))
            else:
                ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[kind]
                ti.mode = 0o755 if kind == "dir" else 0o777
                ti.linkname = payload.decode()
                tar.addfile(ti)
        end = tar.offset
    with open(path, "r+b") as f:  # drop tarfile's padding to a 10 KiB record: two zero blocks end it
        f.truncate(end + 1024)
    write_expected(path)


# ---------------------------------------------------------------- a shard built block by block


def header(name, size, typeflag, magic=b"ustar\x0000", size_field=None, linkname=b""):
    h = bytearray(512)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = size_field if size_field is not None else b"%011o\x00" % size
    h[136:148] = b"00000000000\x00"
    h[156:157] = typeflag
    h[157 : 157 + len(linkname)] = linkname
    h[257 : 257 + len(magic)] = magic
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\x00 " % sum(h)
    return bytes(h)


def padded(data):
    return data + b"\x00" * (-len(data) % 512)


def pax_data(**records):
    out = b""
    for key, value in records.items():
        body = b" %s=%s\n" % (key.encode(), value)
        n = len(body) + 1
        while len(b"%d" % n) + len(body) != n:
            n = len(b"%d" % n) + len(body)
        out += b"%d" % n + body
    return out


def write_crafted_shard(path):
    blocks = []

    def file(name, data, typeflag=b"0", **kw):
        blocks.append(header(name, len(data), typeflag, **kw) + padded(data))

    file(b"v7/000000.txt", b"version 7 header, no magic", magic=b"")
    blocks.append(header(b"olddir/", 0, b"\x00", magic=b""))  # old-style directory: regular type, trailing '/'
    file(b"v7/000000.json", b'{"v7": 1}', typeflag=b"\x00")
    file(b"000001.txt", b"contiguous file type", typeflag=b"7")
    data = bytes((i * 7) & 0xFF for i in range(700))
    blocks.append(header(b"000002.bin", 0, b"0", size_field=b"\x80" + (700).to_bytes(11, "big")) + padded(data))
    g = pax_data(comment=b"global header: belongs to no member")
    blocks.append(header(b"././@PaxHeader", len(g), b"g") + padded(g))
    x = pax_data(size=b"1000")
    data = bytes((i * 13) & 0xFF for i in range(1000))
    blocks.append(header(b"././@PaxHeader", len(x), b"x") + padded(x) +
                  header(b"000003.bin", 0, b"0") + padded(data))
    ll = b"000003.target-of-a-long-link\x00"
    blocks.append(header(b"././@LongLink", len(ll), b"K") + padded(ll) + header(b"000003.lnk", 0, b"2", linkname=b"t"))
    blocks.append(header(b"000003.fifo", 100, b"6"))  # a FIFO: its size field does not announce data
    dump = b"Ydirent\x00\x00"
    blocks.append(header(b"000003.dump", len(dump), b"D") + padded(dump))  # unknown type: data skipped
    x = pax_data(path=b"chain/000004.txt")
    name = b"chain/000004-from-gnu-longname.txt\x00"
    data = b"pax path wins over the GNU long name that follows it"
    blocks.append(header(b"././@PaxHeader", len(x), b"x") + padded(x) +
                  header(b"././@LongLink", len(name), b"L") + padded(name) +
                  header(b"ignored.txt", len(data), b"0") + padded(data))
    file(b"chain/000004.json", b'{"chain": true}')
    with open(path, "wb") as f:
        f.write(b"".join(blocks))  # no end-of-archive blocks: ends at the end of the file
    write_expected(path)


def write_webdataset_shard(path):
    try:
        import webdataset as wds
    except ImportError:
        print("webdataset not installed: keeping %s" % path)
        return
    with wds.TarWriter(path) as sink:
        for i in range(3):
            sink.write({
                "__key__": "%06d" % i,
                "json": {"image_height": 1, "image_width": 4 + i, "caption": "sample %d" % i},
                "npy": (np.arange(4 * (i + 1), dtype=np.float32) * 0.5).reshape(i + 1, 4),
                "txt": "caption %d" % i,
                "cls": i,
            })
    write_expected(path)


# ---------------------------------------------------------------- npy


def write_npy(outdir):
    os.makedirs(outdir, exist_ok=True)
    expected = {}

    def save(name, a, version=None, data=None):
        path = os.path.join(outdir, name)
        if data is not None:
            open(path, "wb").write(data)
        elif version is None:
            np.save(path, a)
        else:
            with open(path, "wb") as f:
                np.lib.format.write_array(f, a, version=version, allow_pickle=False)
        ref = a if not isinstance(a, tuple) else a[0]
        expected[name] = {
            "shape": list(ref.shape),
            "values": [float(v) for v in np.asarray(ref, dtype=np.float32).ravel(order="C")],
        }

    base = np.array([[-1.5, -0.25, 0.0], [0.1, 3.5e7, -2e-30]])
    save("f4.npy", base.astype("<f4"))
    save("f8.npy", np.array([[1 / 3, -2.0], [1e300 * 0, 1e-40], [123456789.123, -0.5]], dtype="<f8"))
    save("f2.npy", np.array([[[65504, -65504], [6e-8, -0.0]], [[1.5, 1e-5], [2049, 0.333]]], dtype="<f2"))
    save("i1.npy", np.array([-128, 127, 0, -1, 5, 100], dtype="|i1"))
    save("u1.npy", np.array([[0, 255], [1, 128]], dtype="|u1"))
    save("i2.npy", np.array([-32768, 32767, -2, 300], dtype="<i2"))
    save("u2.npy", np.array([65535, 0, 4097], dtype="<u2"))
    save("i4.npy", np.array([-2147483648, 2147483647, 16777217, -7], dtype="<i4"))
    save("u4.npy", np.array([4294967295, 16777217, 3], dtype="<u4"))
    save("i8.npy", np.array([-(2**63), 2**63 - 1, 2**53 + 1, -12345], dtype="<i8"))
    save("u8.npy", np.array([2**64 - 1, 2**63, 2**24 + 1, 9], dtype="<u8"))
    save("b1.npy", np.array([True, False, True, True], dtype="|b1"))
    bf16_values = np.array([1.0, -2.5, 3.140625, 0.0010004, 65280.0, -1e-20], dtype=np.float32)
    try:
        import ml_dtypes

        save("bf16.npy", bf16_values.astype(ml_dtypes.bfloat16))
    except ImportError:  # the bytes np.save writes for ml_dtypes.bfloat16: descr '<V2', raw bf16
        bits = (bf16_values.view(np.uint32) + 0x7FFF + ((bf16_values.view(np.uint32) >> 16) & 1)) >> 16
        header = "{'descr': '<V2', 'fortran_order': False, 'shape': (6,), }" + " " * 20
        hlen = len(header) + 1
        header += " " * (64 - (10 + hlen) % 64) + "\n"
        data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bits.astype("<u2").tobytes()
        expected_values = bits.astype(np.uint32) << 16
        save("bf16.npy", expected_values.view(np.float32), data=data)
    save("f4_be.npy", base.astype(">f4"))
    save("f8_be.npy", base.astype(">f8"))
    save("f2_be.npy", np.array([[-1.5, -0.25], [0.1, 65504]], dtype=">f2"))
    save("i2_be.npy", np.array([-32768, 32767, -2, 300], dtype=">i2"))
    save("u8_be.npy", np.array([2**64 - 1, 2**24 + 1, 9], dtype=">u8"))
    save("f4_fortran.npy", np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4) * 0.25))
    save("i2_fortran_3d.npy", np.asfortranarray(np.arange(24, dtype="<i2").reshape(2, 3, 4) - 12))
    save("f4_v2.npy", np.array([1.0, 2.0, -3.0, 4.5], dtype="<f4"), version=(2, 0))
    save("f4_v3.npy", np.array([1.0, 2.0, -3.0, 4.5], dtype="<f4"), version=(3, 0))
    save("f8_scalar.npy", np.array(2.75, dtype="<f8"))
    save("f4_empty.npy", np.zeros((0, 3), dtype="<f4"))
    # for the writer's byte-for-byte comparison (np.save in C order, format 1.0)
    save("f4_write.npy", (np.arange(24, dtype="<f4").reshape(2, 3, 4) - 7.5) / 4)
    save("f4_write_1d.npy", np.arange(5, dtype="<f4"))
    save("f4_write_0d.npy", np.array(1.25, dtype="<f4"))
    save("i4_write.npy", np.arange(-6, 6, dtype="<i4").reshape(4, 3))
    np.save(os.path.join(outdir, "c8.npy"), np.array([1 + 2j], dtype="<c8"))  # an unsupported dtype
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print("%s: %d arrays" % (outdir, len(expected)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "data"))
    args = ap.parse_args()
    tar_dir = os.path.join(args.out, "tar")
    os.makedirs(tar_dir, exist_ok=True)
    write_tarfile_shard(os.path.join(tar_dir, "gnu.tar"), tarfile.GNU_FORMAT)
    write_tarfile_shard(os.path.join(tar_dir, "pax.tar"), tarfile.PAX_FORMAT, pax_headers={"comment": "vfm fixture"})
    write_tarfile_shard(os.path.join(tar_dir, "ustar.tar"), tarfile.USTAR_FORMAT)
    write_crafted_shard(os.path.join(tar_dir, "crafted.tar"))
    write_webdataset_shard(os.path.join(tar_dir, "webdataset.tar"))
    write_npy(os.path.join(args.out, "npy"))


if __name__ == "__main__":
    main()
