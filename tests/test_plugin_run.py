"""The pytest plugin runs a suite as `ppconf run` does: the launch plans are checked before
anything launches, and its run directory gets a run.json naming its suite, so `ppconf report`
and `ppconf signoff` read it as any run. Nothing launches here: the private suite's cases are
claimed unsupported on this platform (recorded without a launch), or their plans are refused."""

import json
import textwrap

import pytest

from conformance.plugin import Session
from harness.cli import main
from harness.matrix.load import DEFAULT_MATRICES

FAMILY = """
families:
  tiny:
    title: tiny
    variants:
      default:
        architecture: Qwen3ForCausalLM
        hidden_layers: 4
        supports_pp: true
        model: /models/tiny
        platforms: [cpu]
        serve_args: [--max-model-len, "256"]
suites:
  s:
    title: private suite
    platform: cpu
    groups:
      - {families: [tiny], topologies: [pp1-tp1], features: [FEATURES]}
"""
UNSUPPORTED = """
rules:
  - when: 'family == "tiny"'
    expect: unsupported-on-platform
    reason: no kernel for it here
    why: a test claim
"""
# two features set one flag to different values: the plan check refuses it (no engine needed)
CONFLICT = """
features:
  long: {title: long, args: [--max-num-seqs, "8"]}
  short: {title: short, args: [--max-num-seqs, "4"]}
rules:
  - when: 'family == "tiny"'
    expect: supported
    why: a test claim
"""


class Config:
    def __init__(self, out, matrices, suites):
        self.options = {
            "--ppconf-matrices": [str(DEFAULT_MATRICES), str(matrices)],
            "--ppconf-resume": None,
            "--ppconf-out": str(out),
            "--ppconf-cluster": None,
            "--ppconf-suite": suites,
        }

    def getoption(self, name):
        return self.options[name]


@pytest.fixture
def private(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    def write(text: str, features: str) -> Config:
        root = tmp_path / "private"
        root.mkdir(exist_ok=True)
        (root / "private.yaml").write_text(textwrap.dedent(FAMILY.replace("FEATURES", features) + text))
        return Config(tmp_path / "run", root, ["s"])

    return write


def test_the_plugins_run_directory_names_its_suite_and_signoff_reads_it(private, tmp_path, capsys):
    session = Session(private(UNSUPPORTED, "none"))
    try:
        record = session.record("s", "tiny/pp1-tp1/auto/none")
    finally:
        session.close()
    assert record.outcome.value == "SKIP"
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["suite"] == "s" and meta["cluster"] == "local"
    assert meta["matrices"] == [str(DEFAULT_MATRICES.resolve()), str((tmp_path / "private").resolve())]
    capsys.readouterr()
    main(["signoff", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert "names no suite" not in out.out + out.err
    assert out.out.startswith("# Sign-off: ") and "suite s · cluster local" in out.out, out.out


def test_the_plugin_checks_the_plans_before_anything_launches(private, tmp_path):
    session = Session(private(CONFLICT, "long+short"))
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            session.record("s", "tiny/pp1-tp1/auto/long+short")
    finally:
        session.close()
    assert "flag --max-num-seqs has different values from two features entries" in str(failed.value)
    assert "nothing was launched" in str(failed.value)
    run = tmp_path / "run"
    assert not (run / "run.json").exists() and not (run / "results.jsonl").exists()
    assert not (run / "logs").exists()


def test_the_plugin_refuses_to_write_over_another_run(private, tmp_path):
    config = private(UNSUPPORTED, "none")
    Session(config).close()
    first = Session(config)
    try:
        first.record("s", "tiny/pp1-tp1/auto/none")
    finally:
        first.close()
    again = Session(config)
    try:
        with pytest.raises(pytest.fail.Exception, match="already holds a run"):
            again.record("s", "tiny/pp1-tp1/auto/none")
    finally:
        again.close()


def test_with_several_suites_each_runs_in_a_directory_of_its_own(private, tmp_path):
    config = private(UNSUPPORTED, "none")
    config.options["--ppconf-suite"] = ["s", "smoke-cpu"]
    session = Session(config)
    try:
        session.record("s", "tiny/pp1-tp1/auto/none")
    finally:
        session.close()
    assert json.loads((tmp_path / "run" / "s" / "run.json").read_text())["suite"] == "s"
