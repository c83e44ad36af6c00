"""Property-based fuzz of ppconf's input readers: the matrix loader, the importer of vllm-ascend's
configs and the readers of a run directory (report, diff, signoff, ingest, resume). Whatever
they are given, each answers with a result or ppconf's own clean error (positioned where it has a
position): never a traceback, never a hang past ``BOUND_S``, never a file written outside the
output it was given, never a planted secret printed.

The contributors' loop runs a small fixed set of examples (``PPCONF_FUZZ`` unset: derandomized,
``FAST_EXAMPLES`` each); CI runs ``PPCONF_FUZZ=ci``, more examples drawn afresh each time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import string
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.importers.vllm_ascend import import_configs
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError, SourceError
from harness.results.store import RunDirError
from harness.run_dir import RunRefused, open_resumed
from tests.records import record

PROFILE = os.environ.get("PPCONF_FUZZ", "fast")
FAST_EXAMPLES = 8
EXAMPLES = {"fast": FAST_EXAMPLES, "ci": 150}[PROFILE]
BOUND_S = 5.0  # CPU seconds one example may take: every input here is small or refused by its size
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the bound is asserted in CPU time, which other work on the machine does not inflate
    derandomize=PROFILE == "fast",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
CANARY = "ppconfCanary7f3e1d"  # a planted secret: it must never be printed
DEEP = 3000
DATA = Path(__file__).parent / "data" / "vllm-ascend"
PD = DATA / "Qwen3-235B-disagg-pd.yaml"

# hostile scalars, as YAML text
YAML_SCALARS = st.sampled_from(
    [
        ".nan",
        ".inf",
        "-.inf",
        "1e999",
        "-1",
        "0",
        "100000000",
        "99999999999999999999999",
        "'x'",
        "''",
        "null",
        "true",
        "[]",
        "{}",
        "[1, [2, [3]]]",
        "'" + "[" * 200 + "'",
        "[" * 80 + "]" * 80,
        "{a: " * 70 + "1" + "}" * 70,
        "&a [x, *a]",
        "'a\\nb'",
        '"\\x1b[2J"',
        "!!binary aGVsbG8=",
        "'../../../etc/passwd'",
        "/dev/zero",
        f"'http://user:{CANARY}@host/x'",
    ]
)
KEYS = st.sampled_from(
    ["requests", "prompt_tokens", "max_tokens", "deadline_s", "kind", "<<", "pp", "tp", "env", "x", "seed"]
)


def cpu_bounded(fn):
    """Call ``fn``, asserting it took at most ``BOUND_S`` of CPU time."""
    t0 = time.process_time()
    out = fn()
    assert time.process_time() - t0 < BOUND_S, "over the bound"
    return out


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def clean_errors(errors: list[SourceError]) -> None:
    assert errors
    for e in errors:
        assert e.where is None or (e.where.line >= 1 and e.where.column >= 1), e
        assert CANARY not in str(e), e


# ---- the matrix loader ---------------------------------------------------------------------------


@st.composite
def phase_lines(draw) -> str:
    """A suite whose workload and settings carry hostile values."""
    fields = draw(st.lists(st.tuples(KEYS, YAML_SCALARS), max_size=4))
    phase = ", ".join(["kind: " + draw(st.sampled_from(["concurrent", "long-prompt", "batch", "abort", "nope"]))])
    phase += "".join(f", {k}: {v}" for k, v in fields if k not in ("kind", "<<"))
    setting = draw(st.sampled_from(["startup_timeout_s", "request_timeout_s", "max_devices", "title"]))
    return (
        "suites:\n  fuzzed:\n    title: x\n    platform: cpu\n"
        f"    {setting}: {draw(YAML_SCALARS)}\n"
        f"    env: {{HF_TOKEN: {CANARY}}}\n"
        f"    workload:\n      - {{{phase}}}\n"
        "    groups:\n      - {families: [qwen3-tiny], topologies: [pp2-tp1-mp]}\n"
        'rules:\n  - when: suite == "fuzzed"\n    expect: supported\n    why: x\n'
    )


@fuzz
@given(
    text=st.one_of(
        phase_lines(),
        st.lists(st.tuples(KEYS, YAML_SCALARS), max_size=6).map(
            lambda kv: "features:\n  f:\n    title: x\n" + "".join(f"    {k}: {v}\n" for k, v in kv)
        ),
    )
)
def test_the_matrix_loader_and_lint_answer_any_matrix_cleanly(base, text):
    with tempfile.TemporaryDirectory() as tmp:
        layer = Path(tmp) / "layer"
        layer.mkdir()
        (layer / "fuzz.yaml").write_text(text)
        before = files_under(Path(tmp))
        try:
            cpu_bounded(lambda: load_matrix([base, layer]))
        except MatrixError as err:
            clean_errors(err.errors)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cpu_bounded(lambda: main(["--matrices", str(base), "--matrices", str(layer), "lint"]))
        assert code in (0, 1, 2)
        assert CANARY not in out.getvalue() + err.getvalue()
        assert files_under(Path(tmp)) == before  # lint writes nothing


# ---- the importer --------------------------------------------------------------------------------

PD_TEXT = PD.read_text()
# places in the P/D config to put a hostile value (each occurs once in the file's first node)
PLACES = [
    "num_nodes: 2",
    "npu_per_node: 16",
    "  enabled: true",
    "  prefiller_host_index: [0]",
    "  decoder_host_index: [1]",
    "    max_out_len: 1500",
    "    batch_size: 700",
    "    baseline: 2424.6267",
    "    threshold: 0.97",
    "    request_rate: 11.2",
    "  HCCL_BUFFSIZE: 1024",
]
SERVE_TOKENS = st.sampled_from(
    [
        "'unbalanced",
        '"',
        "\\",
        "--seed",
        "--tensor-parallel-size 0",
        "--tensor-parallel-size 99999999",
        "--additional-config '" + "[" * 500 + "]" * 500 + "'",
        "--additional-config '{\"a\": NaN}'",
        "--kv-transfer-config '[]'",
        "$UNKNOWN",
        f"--api-key {CANARY}",
        "-x",
        "--",
    ]
)


@st.composite
def configs(draw) -> str:
    text = PD_TEXT
    for place in draw(st.lists(st.sampled_from(PLACES), max_size=3, unique=True)):
        key = place.split(":")[0]
        text = text.replace(place, f"{key}: {draw(YAML_SCALARS)}", 1)
    if draw(st.booleans()):
        text = text.replace("--seed 1024", f"--seed 1024 {draw(SERVE_TOKENS)}", 1)
    if draw(st.booleans()):
        text = text.replace("  SERVER_PORT: 8080", f"  SERVER_PORT: 8080\n  HF_TOKEN: {CANARY}", 1)
    return text


@pytest.fixture(scope="module")
def shipped():
    return load_matrix()


# The shipped matrices a fuzzed suite needs (its platform, model family and topology): linting
# every shipped suite beside it would take most of each example's time.
BASE_FILES = (
    "platforms.yaml",
    "ascend/vllm-ascend-facts.json",  # named by platforms.yaml
    "features.yaml",
    "topologies.yaml",
    "cpu/families.yaml",
)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("base") / "matrices"
    for name in BASE_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text((DEFAULT_MATRICES / name).read_text())
    return root


@fuzz
@given(text=configs())
def test_the_importer_answers_any_config_cleanly(shipped, text):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config, out = root / "pd.yaml", root / "out"
        config.write_text(text)
        before = files_under(root)
        try:
            imported = cpu_bounded(lambda: import_configs([config], shipped, None))
        except MatrixError as err:
            clean_errors(err.errors)
            assert files_under(root) == before
            return
        written = imported.write(out)
        assert all(out in p.parents for p in written)
        assert all(out in (p, *p.parents) for p in files_under(root) - before)
        try:
            load_matrix([DEFAULT_MATRICES, out])
        except MatrixError as err:
            clean_errors(err.errors)


# ---- run directories -----------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(string.printable, max_size=8),
    st.just({"HF_TOKEN": CANARY}),  # a secret's name: its value is never printed
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=10,
)
JSON_TEXT = st.one_of(
    JSON_VALUES.map(json.dumps),
    st.sampled_from(["", "{", "[" * DEEP + "]" * DEEP, '{"a": ' + "[" * DEEP + "]" * DEEP + "}", "\x00", "\ud800"]),
)


@st.composite
def records(draw) -> str:
    rec = record(draw(st.sampled_from(["qwen3-tiny/pp2-tp1-mp/auto/none", "a/b", ""])))
    for _ in range(draw(st.integers(0, 3))):
        rec[draw(st.sampled_from([*rec, "observation", "x"]))] = draw(JSON_VALUES)
    line = json.dumps(rec)
    return draw(st.sampled_from([line, line[: len(line) // 2], draw(JSON_TEXT)]))


@fuzz
@given(
    results=st.lists(records(), max_size=3),
    meta=st.one_of(
        st.none(), JSON_TEXT, st.just(json.dumps({"suite": "smoke-cpu", "matrices": str(DEFAULT_MATRICES)}))
    ),
    live=st.one_of(st.none(), JSON_TEXT),
)
def test_the_run_directory_readers_answer_any_run_cleanly(results, meta, live):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run, base = root / "run", root / "base"
        for d in (run, base):
            d.mkdir()
            (d / "results.jsonl").write_text("".join(r + "\n" for r in results), errors="surrogatepass")
        if meta is not None:
            (run / "run.json").write_text(meta, errors="surrogatepass")
        if live is not None:
            (run / "live.json").write_text(live, errors="surrogatepass")
        report, index = root / "report", root / "index.sqlite"
        before = files_under(root)
        for argv in (
            ["report", str(run), "--out", str(report)],
            ["diff", str(run), str(base)],
            ["signoff", str(run)],
            ["ingest", str(run), "--index", str(index)],
        ):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cpu_bounded(lambda argv=argv: main(argv))  # an exception here is a traceback a user sees
            assert code in (0, 1, 2), argv
            if code == 2:
                assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1, (argv, err.getvalue())
            assert CANARY not in out.getvalue() + err.getvalue(), argv
        new = files_under(root) - before
        outside = [p for p in new if not (report in (p, *p.parents) or p.name.startswith("index.sqlite"))]
        # signoff writes its page beside the run, and the writer its record of what it wrote
        outside = [p for p in outside if p not in (run / "signoff.md", run / ".ppconf-owned")]
        assert not outside, outside
        try:
            cpu_bounded(lambda: open_resumed(run))
        except (RunRefused, RunDirError) as err:
            assert CANARY not in str(err)
