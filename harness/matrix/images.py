"""Images a request carries, made where the request is sent: a seeded image of random pixels as a
PNG in a ``data:`` URL, the same bytes for the same seed and size on every host (standard library
only: no imaging package is needed where ppconf runs).

What is kept of an image (in evidence, in a reference's key) is its description, not its bytes: a
generated image's seed, size and digest; an image given as a ``data:`` URL, its media type, length
and digest (``describe_data_url``). Only what is sent to a server holds the bytes."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import random
import struct
import urllib.parse
import zlib
from typing import Any

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


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=256)
def noise_digest(seed: int, width: int, height: int) -> str:
    """The digest of ``noise_png(seed, width, height)`` (kept per image: a key is built often)."""
    return digest(noise_png(seed, width, height))


def describe_data_url(url: str) -> dict[str, Any]:
    """A ``data:`` URL as kept instead of its bytes: its media type, the length of its data and
    their digest. The data are the decoded bytes (``base64``: true) where the URL says base64 and
    its payload decodes, else the payload as written, percent-escapes undone."""
    head, _, payload = url.partition(",")
    params = head.removeprefix("data:").split(";")
    data = urllib.parse.unquote_to_bytes(payload)
    decoded = False
    if "base64" in params[1:]:
        try:
            data, decoded = base64.b64decode(payload, validate=True), True
        except (binascii.Error, ValueError):
            pass
    return {"media_type": params[0] or "text/plain", "bytes": len(data), "digest": digest(data), "base64": decoded}
