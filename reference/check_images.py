#!/usr/bin/env python3
"""Checks PNG and GIF files written by vfm (src/data/media/image_io.c) with independent decoders.

    python3 reference/check_images.py out/demo/*.png out/demo/*.gif

PNG: walks the chunks, verifies every CRC-32, inflates the IDAT stream with Python's zlib
(which also verifies Adler-32), checks the row filters and the byte count; with PIL, also
compares PIL's pixels with our own decode. GIF: needs PIL; prints the frame count, loop count
and delay, decodes every frame. Not part of CI; exits 1 on the first bad file.
"""
import struct
import sys
import zlib

try:
    from PIL import Image
except ImportError:  # the pyenv python has no PIL; Debian's /usr/bin/python3 has
    Image = None


def check_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("bad signature")
    pos, idat, width = 8, b"", None
    chunks = []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        ctype = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise ValueError("chunk %r: CRC mismatch" % ctype)
        chunks.append(ctype)
        if ctype == b"IHDR":
            width, height, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", body)
            if (depth, colour, comp, filt, interlace) != (8, 2, 0, 0, 0):
                raise ValueError("not 8-bit RGB, non-interlaced")
        elif ctype == b"IDAT":
            idat += body
        pos += 12 + length
    if chunks[0] != b"IHDR" or chunks[-1] != b"IEND":
        raise ValueError("chunk order %r" % chunks)
    raw = zlib.decompress(idat)  # raises on a bad Adler-32
    row = 3 * width + 1
    if len(raw) != row * height:
        raise ValueError("%d raw bytes, want %d" % (len(raw), row * height))
    if any(raw[y * row] != 0 for y in range(height)):
        raise ValueError("a row filter is not 0 (None)")
    pixels = b"".join(raw[y * row + 1:(y + 1) * row] for y in range(height))
    note = ""
    if Image is not None:
        img = Image.open(path).convert("RGB")
        if img.tobytes() != pixels:
            raise ValueError("PIL decodes different pixels")
        note = ", PIL agrees"
    print("%s: PNG %dx%d, %d IDAT bytes%s" % (path, width, height, len(idat), note))


def check_gif(path):
    data = open(path, "rb").read()
    if data[:6] != b"GIF89a":
        raise ValueError("not GIF89a")
    if Image is None:
        print("%s: GIF (no PIL: header only)" % path)
        return
    img = Image.open(path)
    frames = 0
    for i in range(img.n_frames):
        img.seek(i)
        img.convert("RGB").load()
        frames += 1
    print("%s: GIF %dx%d, %d frames, loop %s, %s ms per frame" % (
        path, img.size[0], img.size[1], frames, img.info.get("loop"), img.info.get("duration")))


def main(paths):
    if not paths:
        print(__doc__.strip())
        return 2
    for path in paths:
        try:
            if path.lower().endswith(".png"):
                check_png(path)
            elif path.lower().endswith(".gif"):
                check_gif(path)
            else:
                print("%s: skipped (not .png or .gif)" % path)
        except Exception as e:  # report which file, then stop
            print("%s: BAD: %s" % (path, e))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
