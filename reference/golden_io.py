"""Writes golden files for the C tests (reader: tests/unit/golden.c).

Format, little endian: b"VFMGOLD\\0", u32 version (1), u32 count, then per tensor: u16 name
length, utf-8 name, u8 dtype (0 f32, 1 f64, 3 i32, 4 i64 — vfm's DType numbering), u8 ndim,
i64 shape[ndim], raw data.
"""
import struct

import numpy as np

VERSION = 1
_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 3, np.dtype(np.int64): 4}


def _as_numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(x))


def write_golden(path, tensors):
    """tensors: dict name -> torch tensor / numpy array / python scalar (kept in order)."""
    with open(path, "wb") as f:
        f.write(b"VFMGOLD\0")
        f.write(struct.pack("<II", VERSION, len(tensors)))
        for name, value in tensors.items():
            a = _as_numpy(value)
            if a.dtype == np.float16 or a.dtype == np.bool_:
                a = a.astype(np.float32)
            if a.dtype not in _DTYPES:
                raise TypeError(f"{name}: unsupported dtype {a.dtype}")
            raw = name.encode()
            f.write(struct.pack("<H", len(raw)))
            f.write(raw)
            f.write(struct.pack("<BB", _DTYPES[a.dtype], a.ndim))
            f.write(struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())
