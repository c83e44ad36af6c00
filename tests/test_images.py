"""Images in chat requests: OpenAI's content parts, and ppconf's generated image, a seeded PNG of
random pixels sent as an ``image_url`` part (the same bytes to a case and its reference). What is
kept of an image (evidence, a reference's key) is its description, never its bytes."""

import base64
import hashlib
import json
import struct
import zlib

import pytest

from harness.cases.expand import expand
from harness.cases.phases.explicit import KIND as EXPLICIT
from harness.check.references.goldens import cache_key, shape_for
from harness.check.traffic.compare import request_shape
from harness.matrix import images
from harness.matrix.requests import ChatRequest, TokenizeRequest
from harness.matrix.schema import Accuracy, Compare, Phase
from harness.plan.cluster import load_cluster
from harness.plan.resolved import Planner
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


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_generated_image_is_kept_as_its_seed_size_and_digest(shipped):
    """multimodal-cpu as planned: its reference's key, its plan and its claim name each image by
    seed, size and the digest of its PNG; what is sent holds the PNG itself."""
    (case,) = expand(shipped, "multimodal-cpu").cases
    rc = Planner(shipped, load_cluster(None)).resolved(case)
    kept = json.dumps([shape_for(rc), [p.to_json() for p in rc.phases], case.expectation.to_json()])
    assert "base64" not in kept and "data:image" not in kept and "iVBOR" not in kept  # no PNG, in any form
    explicit = [r for p in rc.phases for r in p.explicit]
    first = explicit[0].model_dump()["messages"][0]["content"][0]
    png = images.noise_png(0, 32, 32)
    assert first == {"type": "generated_image", "seed": 0, "width": 32, "height": 32, "digest": _sha256(png)}
    # the same on every host, for as long as the image's bytes are the same
    assert first["digest"] == "sha256:51856296da6ad49cb9b98ff7e1fc85e13099eeb0d089e8959bbdfcd19fc2a7fb"
    sent = explicit[0].body()["messages"][0]["content"][0]
    assert sent == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }


def _key(*parts) -> str:
    """The reference key's part that a phase of one chat request with ``parts`` makes."""
    req = _chat(*parts, {"type": "text", "text": "what is it?"})
    plan = EXPLICIT.plan(Phase(kind="explicit", explicit=[req]), 2)
    return cache_key(request_shape(Accuracy(), Compare(), False, [plan.to_json()]))


USERS_PNG = images.noise_png(5, 8, 8)
USERS_URL = "data:image/png;base64," + base64.b64encode(USERS_PNG).decode()


def test_reference_keys_are_stable_and_tell_images_apart():
    generated = {"type": "generated_image", "seed": 1, "width": 48, "height": 40}
    assert _key(generated) == _key(dict(generated))  # the same image, the same key
    given = {"type": "image_url", "image_url": {"url": USERS_URL}}
    others = [
        generated | {"seed": 2},
        generated | {"width": 40, "height": 48},
        {"type": "generated_image"},
        given,
        {"type": "image_url", "image_url": {"url": USERS_URL, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + USERS_URL.split(",")[1]}},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(USERS_PNG[:-1]).decode()},
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/dog.png"}},
    ]
    keys = [_key(generated), *(_key(p) for p in others)]
    assert len(set(keys)) == len(keys)
    # a data: URL holding the generated image's bytes is the same image, but not the same request
    assert _key({"type": "image_url", "image_url": {"url": images.noise_url(1, 48, 40)}}) != _key(generated)


def test_a_users_data_url_is_kept_as_its_media_type_length_and_digest():
    part = {"type": "image_url", "image_url": {"url": USERS_URL, "detail": "high"}}
    kept = _chat(part).model_dump(exclude_none=True)["messages"][0]["content"][0]
    data = {"media_type": "image/png", "bytes": len(USERS_PNG), "digest": _sha256(USERS_PNG), "base64": True}
    assert kept == {"type": "image_url", "image_url": {"data": data, "detail": "high"}}
    assert _chat(part).body()["messages"][0]["content"] == [part]  # sent as written
    # not base64: the payload as written, its escapes undone; base64 that does not decode, as written
    assert images.describe_data_url("data:image/svg+xml,%3Csvg%2F%3E") == {
        "media_type": "image/svg+xml",
        "bytes": 6,
        "digest": _sha256(b"<svg/>"),
        "base64": False,
    }
    broken = images.describe_data_url("data:image/png;base64,not*base64")
    assert broken == {"media_type": "image/png", "bytes": 10, "digest": _sha256(b"not*base64"), "base64": False}
    # a URL the server fetches is kept as it is
    real = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    assert _chat(real).model_dump(exclude_none=True)["messages"][0]["content"] == [real]
