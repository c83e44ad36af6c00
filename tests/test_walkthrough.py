"""The docs' walk-through (docs/release-manager/walkthrough.md), done as a newcomer would do it:
the files it shows, the commands it gives, and the output it says they print. A change that makes
the page wrong fails here."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "release-manager" / "walkthrough.md"
MARK = "# walkthrough: "
# a fenced block whose first line is the marker: "```LANG\n# walkthrough: WHAT\nBODY```"
BLOCK = re.compile(r"^```\w*\n" + re.escape(MARK) + r"(?P<what>[^\n]+)\n(?P<body>.*?)^```$", re.M | re.S)


def walkthrough() -> dict[str, str]:
    blocks = {m["what"].strip(): m["body"] for m in BLOCK.finditer(PAGE.read_text())}
    assert {"commands", "expand prints"} <= set(blocks), (
        f"{PAGE.relative_to(ROOT)}: walk-through blocks missing, found {sorted(blocks)}"
    )
    return blocks


def commands(blocks: dict[str, str]) -> list[list[str]]:
    """The block's `ppconf ...` lines as argv lists (comments dropped), without the program name."""
    argvs = [shlex.split(line, comments=True) for line in blocks["commands"].splitlines()]
    argvs = [a for a in argvs if a]
    assert all(a[0] == "ppconf" for a in argvs), argvs
    return [a[1:] for a in argvs]


@pytest.fixture
def walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], dict[str, str]]:
    """The walk-through's blocks, with its files written into a checkout-like folder made current."""
    blocks = walkthrough()
    files = {what: body for what, body in blocks.items() if what.endswith(".yaml")}
    assert files, f"{PAGE.relative_to(ROOT)}: the walk-through shows no matrix file"
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    (tmp_path / "matrices").symlink_to(ROOT / "matrices")  # the commands run from the checkout
    monkeypatch.chdir(tmp_path)
    return blocks, files


def run(argv: list[str], capsys) -> str:
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, f"ppconf {shlex.join(argv)} exited {rc}: {out}"
    return out.out


def test_the_walkthrough_expands_and_plans_as_written(walked, capsys) -> None:
    blocks, files = walked
    argvs = {a[0]: a for a in commands(blocks)}
    assert set(argvs) == {"lint", "expand", "plan"}
    expanded = run(argvs["expand"], capsys)
    assert expanded == blocks["expand prints"]  # what the page says expand prints
    case = argvs["plan"][argvs["plan"].index("--case") + 1]
    assert re.search(rf"^{re.escape(case)} +supported$", expanded, re.M)
    # the launch carries the private feature's flag and the case's partition
    planned = run(argvs["plan"], capsys)
    assert "--max-num-batched-tokens 64" in planned
    assert "VLLM_PP_LAYER_PARTITION=2,3" in planned
    # the claim on the case with the private feature is the private rule's, not a shipped one
    (suite,) = json.loads(run([*argvs["expand"], "--format", "json"], capsys))
    claims = {c["id"]: c["expectation"] for c in suite["cases"]}
    assert claims[case]["kind"] == "supported"
    assert claims[case]["where"].startswith(next(iter(files)) + ":")


@pytest.mark.slow  # lint expands every shipped suite besides the private one: over 2 s
def test_the_walkthrough_lints_clean(walked, capsys) -> None:
    blocks, _ = walked
    (lint,) = [a for a in commands(blocks) if a[0] == "lint"]
    assert run(lint, capsys).strip().endswith(": 0 errors, 0 warnings")
