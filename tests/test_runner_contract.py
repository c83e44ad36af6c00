"""The stage probe reads what vLLM's model runners hold by attribute name (``RUNNER_LAYOUTS`` in
harness/target/worker_probe.py); these tests tie each name to the installed engine's V1 and V2
runner source, read with ``ast`` (nothing imported), so a rename upstream fails here rather than
as "no worker of the last PP stage holds a drafter" on a cluster."""

import pytest

from tests.runner_layout import SOURCES, extract, installed, probe_layouts, problems, vllm_root

pytestmark = pytest.mark.needs_vllm


def test_the_probe_reads_what_the_installed_runners_hold():
    assert problems(probe_layouts(), installed()) == []


def test_the_probe_knows_both_runners_and_tells_v2_first():
    # V2 assigns its speculator on every rank (None where there is none), V1 its drafter on the last only
    layouts = installed()
    assert list(probe_layouts()) == ["v2", "v1"]
    assert "speculator" in layouts["v2"].always and set(layouts["v2"].drafters) == {"speculator"}
    assert "drafter" not in layouts["v1"].always and set(layouts["v1"].drafters) == {"drafter"}


def _planted(version: str, file: str, old: str, new: str) -> dict:
    """The installed layouts, with ``version``'s runner (or drafter base) read from a copy of its source
    where ``old`` is renamed ``new``."""
    root, src = vllm_root(), SOURCES[version]
    text = {"runner": (root / src.runner).read_text(), "drafter": (root / src.drafter).read_text()}
    assert old in text[file]
    text[file] = text[file].replace(old, new)
    layouts = installed(root)
    layouts[version] = extract(text["runner"], src.runner_class, text["drafter"], src.drafter_class, "copy")
    return layouts


@pytest.mark.parametrize(
    "version, file, old, new, reason",
    [
        (
            "v2",
            "runner",
            "self.speculator",
            "self.proposer",
            "copy:GPUModelRunner: the probe tells the v2 runner by `speculator`, which its __init__ no longer "
            "assigns on every path",
        ),
        ("v1", "runner", "self.drafter =", "self.proposer =", "the probe reads the drafter from `drafter`;"),
        ("v2", "runner", "self.model = model or", "self.target = model or", "the probe reads the model from `model`;"),
        ("v1", "runner", "self.input_batch = InputBatch(", "self.batch = InputBatch(", "by `input_batch`"),
        ("v1", "drafter", "self.model = self._get_model()", "self.net = self._get_model()", "draft model from `model`"),
        ("v1", "runner", "self.max_num_reqs =", "self.speculator =", "would take this v1 runner for v2"),
    ],
)
def test_a_planted_rename_in_a_copy_of_the_runner_fails(version, file, old, new, reason):
    found = problems(probe_layouts(), _planted(version, file, old, new))
    assert found and any(reason in p for p in found), found
