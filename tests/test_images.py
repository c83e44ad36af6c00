"""Images in chat requests: OpenAI's content parts, and ppconf's generated image, a seeded PNG of
random pixels sent as an ``image_url`` part (the same bytes to a case and its reference)."""

import base64
import struct
import zlib

import pytest

from harness.matrix import images
from harness.matrix.requests import ChatRequest, TokenizeRequest
from tests.test_requests_schema import SUITE, errors_of


def _pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and raw rows of an 8-bit RGB PNG, read with the standard library only."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (size,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data, crc = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + size], png[pos + 8 + size : pos + 12 + size]
        assert struct.unpack(">I", crc)[0] == zlib.crc32(kind + data) & 0xFFFFFFFF
        chunks[kind] = data
        pos += 12 + size
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2) and b"IEND" in chunks
    return width, height, zlib.decompress(chunks[b"IDAT"])


def test_a_generated_image_is_a_valid_png_of_its_size_and_seed():
    width, height, rows = _pixels(images.noise_png(7, 48, 40))
    assert (width, height) == (48, 40) and len(rows) == 40 * (1 + 3 * 48)
    assert images.noise_png(7, 48, 40) == images.noise_png(7, 48, 40)
    assert images.noise_png(8, 48, 40) != images.noise_png(7, 48, 40)
    pixels = {rows[i : i + 3] for i in range(1, 1 + 3 * 48, 3)}
    assert len(pixels) > 40  # random pixels, not a flat image


def _chat(*parts):
    return ChatRequest.model_validate({"endpoint": "chat", "messages": [{"role": "user", "content": list(parts)}]})


def test_a_generated_image_is_sent_as_an_image_url_part_holding_its_png():
    sent = _chat({"type": "generated_image", "seed": 3, "width": 20, "height": 10}, {"type": "text", "text": "hi"})
    image, text = sent.body()["messages"][0]["content"]
    assert text == {"type": "text", "text": "hi"}
    assert image["type"] == "image_url" and set(image) == {"type", "image_url"}
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == images.noise_png(3, 20, 10)
    # a part as OpenAI's clients write it is sent as written
    given = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    assert _chat(given).body()["messages"][0]["content"] == [given]


def test_a_tokenize_request_takes_image_parts_too():
    r = TokenizeRequest.model_validate(
        {"endpoint": "tokenize", "messages": [{"role": "user", "content": [{"type": "generated_image"}]}]}
    )
    assert r.body()["messages"][0]["content"][0]["image_url"]["url"] == images.noise_url(0, 32, 32)


@pytest.mark.parametrize(
    "part, message",
    [
        ("{type: generated_image, sede: 1}", "unknown key 'sede' (did you mean 'seed'?)"),
        ("{type: generated_image, width: 0}", "greater than or equal to 1"),
        ("{type: generated_image, width: 100000}", "less than or equal to 4096"),
        ("{type: image_url, image_url: {url: /etc/passwd}}", "should match pattern"),
        ("{type: picture}", "picture"),
    ],
)
def test_a_bad_image_part_is_a_positioned_error(matrix_dir, part, message):
    request = f"[{{endpoint: chat, messages: [{{role: user, content: [{part}]}}]}}]"
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit=request))
    errs = errors_of(matrix_dir.root)
    assert any("cpu/mine.yaml:8:" in e and message in e for e in errs), errs
