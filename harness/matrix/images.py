"""Images a request carries, made where the request is sent: a seeded image of random pixels as a
PNG in a ``data:`` URL, the same bytes for the same seed and size on every host (standard library
only: no imaging package is needed where ppconf runs)."""

from __future__ import annotations

import base64
import random
import struct
import zlib

MAX_SIDE = 4096


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def noise_png(seed: int, width: int, height: int) -> bytes:
    """An RGB PNG of ``width`` x ``height`` random pixels drawn from ``seed``."""
    rng = random.Random(seed)
    rows = b"".join(b"\x00" + rng.randbytes(3 * width) for _ in range(height))  # filter 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    chunks = _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, 9)) + _chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def noise_url(seed: int, width: int, height: int) -> str:
    return "data:image/png;base64," + base64.b64encode(noise_png(seed, width, height)).decode("ascii")
