"""Every file ppconf writes goes through ``harness.safe_write``: for each writer a symbolic link,
a hand-written file and a read-only file planted where it writes survive (the link's target
untouched, a clean error naming the path, exit 2 from the CLI), while writing its own output
again works; and no module writes a file any other way."""

from __future__ import annotations

import ast
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import safe_write
from harness.cli import main
from harness.safe_write import MANIFEST, WriteRefused
from tests.records import record

ROOT = Path(__file__).resolve().parent.parent
HAND = "hand-written, keep me\n"
STACKED = {"versions": {"n1": {"vllm": "0.32.0"}}}


# ---- the helper itself ------------------------------------------------------------------------


def test_its_own_file_is_written_again_and_anyone_elses_is_refused(tmp_path):
    path = tmp_path / "out" / "a.txt"
    safe_write.write_text(path, "one")
    safe_write.write_text(path, "two")  # its own: replaced
    assert path.read_text() == "two" and safe_write.owns(path)
    path.write_text("edited by hand")  # no longer what ppconf wrote
    with pytest.raises(WriteRefused, match=f"{path} exists and is not a file ppconf wrote"):
        safe_write.write_text(path, "three")
    assert path.read_text() == "edited by hand"
    safe_write.write_text(path, "three", force=True)
    assert path.read_text() == "three" and safe_write.owns(path)


def test_a_link_at_the_file_or_a_folder_inside_the_root_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "a.txt").write_text(HAND)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").symlink_to(victim / "a.txt")
    (out / "sub").symlink_to(victim)
    for force in (False, True):
        with pytest.raises(WriteRefused, match="a.txt is a symbolic link"):
            safe_write.write_text(out / "a.txt", "x", force=force)
        with pytest.raises(WriteRefused, match="a.txt is a symbolic link"):
            safe_write.append_text(out / "a.txt", "x", force=force)
        with pytest.raises(WriteRefused, match="sub is a symbolic link"):
            safe_write.write_text(out / "sub" / "b.txt", "x", root=out, force=force)
    with pytest.raises(WriteRefused, match="a.txt is a symbolic link"):
        safe_write.open_stream(out / "a.txt")
    with pytest.raises(WriteRefused, match="sub is a symbolic link"):
        safe_write.open_stream(out / "sub" / "b.log", root=out)
    with pytest.raises(WriteRefused, match="out is a symbolic link"):
        (tmp_path / "linked-out").symlink_to(out)
        safe_write.write_text(tmp_path / "linked-out" / "c.txt", "x")
    assert sorted(p.name for p in victim.iterdir()) == ["a.txt"] and (victim / "a.txt").read_text() == HAND


def test_a_read_only_file_is_left_even_when_ppconf_wrote_it(tmp_path):
    path = tmp_path / "golden.json"
    safe_write.write_json(path, {"a": 1})
    path.chmod(0o444)
    with pytest.raises(WriteRefused, match="golden.json is read-only"):
        safe_write.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}


def test_appends_extend_their_own_file_and_a_torn_line_keeps_it_own(tmp_path):
    path = tmp_path / "results.jsonl"
    safe_write.append_text(path, "1\n")
    safe_write.append_text(path, "2\n")
    with path.open("a") as f:  # a run killed mid-line, after its manifest was last written
        f.write('{"torn')
    safe_write.append_text(path, "\n3\n")
    assert path.read_text() == '1\n2\n{"torn\n3\n'
    (tmp_path / "other.jsonl").write_text("someone else's\n")
    with pytest.raises(WriteRefused, match="other.jsonl exists and is not a file ppconf wrote"):
        safe_write.append_text(tmp_path / "other.jsonl", "x\n")


def test_a_kill_between_any_two_steps_leaves_the_file_its_own(tmp_path):
    path = tmp_path / "live.json"
    safe_write.write_text(path, "old")
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    # killed after the manifest took the new content, before the rename: the old content still counts
    safe_write.write_text(tmp_path / "scratch", "new")
    both = manifest["files"]["live.json"] + json.loads((tmp_path / MANIFEST).read_text())["files"]["scratch"]
    (tmp_path / MANIFEST).write_text(json.dumps({"format": 1, "files": {"live.json": both}}))
    assert safe_write.owns(path)
    path.write_text("new")  # ...and after the rename, before the manifest forgot the old one
    assert safe_write.owns(path)


@pytest.mark.parametrize("manifest", ["not json", '{"format": 99, "files": {}}', '{"format": 1, "files": []}'])
def test_a_manifest_ppconf_cannot_read_owns_nothing(tmp_path, manifest):
    path = tmp_path / "a.txt"
    safe_write.write_text(path, "x")
    (tmp_path / MANIFEST).write_text(manifest)
    with pytest.raises(WriteRefused, match="not a file ppconf wrote"):
        safe_write.write_text(path, "y")


def test_a_linked_manifest_is_neither_read_nor_written_through(tmp_path):
    forged = tmp_path / "forged.json"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.txt").write_text(HAND)
    digest = __import__("hashlib").sha256(HAND.encode()).hexdigest()
    forged.write_text(json.dumps({"format": 1, "files": {"a.txt": [[len(HAND), digest]]}}))
    (tmp_path / "out" / MANIFEST).symlink_to(forged)
    with pytest.raises(WriteRefused, match="not a file ppconf wrote"):
        safe_write.write_text(tmp_path / "out" / "a.txt", "x")
    with pytest.raises(WriteRefused, match="not ppconf's manifest"):
        safe_write.write_text(tmp_path / "out" / "b.txt", "x")
    assert (tmp_path / "out" / "a.txt").read_text() == HAND and "a.txt" in forged.read_text()


def test_files_are_written_whole_with_an_ordinary_mode_and_no_temporary_left(tmp_path):
    path = tmp_path / "report.md"
    safe_write.write_text(path, "x\udcff")  # a lone surrogate is written as its escape
    assert path.read_text() == "x\\udcff"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "report.md"]


def test_a_fifo_or_a_folder_at_the_file_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    with pytest.raises(WriteRefused, match="fifo is not a regular file"):
        safe_write.write_text(tmp_path / "fifo", "x", force=True)
    with pytest.raises(WriteRefused, match="fifo is not a regular file"):
        safe_write.open_stream(tmp_path / "fifo")
    with pytest.raises(WriteRefused, match="dir is a directory"):
        safe_write.write_text(tmp_path / "dir", "x", force=True)


# ---- every writer, with a link, a hand-written file and a read-only file planted --------------


def _run(tmp_path: Path) -> Path:
    from harness.results import store

    run = tmp_path / "run"
    store.append(run, record("qwen3-tiny/pp2-tp1-mp/auto/none", **STACKED))
    safe_write.write_json(run / "run.json", {"suite": "smoke-cpu"})
    return run


def _plant(kind: str, target: Path, victim: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        target.unlink()
    if kind == "link":
        target.symlink_to(victim)
    else:
        target.write_text(HAND)
        if kind == "read-only":
            target.chmod(0o444)


def _survived(kind: str, target: Path, victim: Path) -> None:
    assert victim.read_text() == HAND, "the link's target was written"
    if kind == "link":
        assert target.is_symlink()
    else:
        assert not target.is_symlink() and target.read_text() == HAND


def _cli(argv: list[str]) -> Callable[[], int]:
    return lambda: main(argv)


def _report(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    run = _run(tmp_path)
    return run / "report" / "support.md", _cli(["report", str(run)])


def _report_as(name: str) -> Callable[[Path], tuple[Path, Callable[[], int]]]:
    def make(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
        target, call = _report(tmp_path)
        return target.with_name(name), call

    return make


def _claims(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    out = tmp_path / "claims"
    return out / "junit.xml", _cli(["report", "--claims-only", "--suite", "smoke-cpu", "--out", str(out), "-q"])


def _signoff(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    run = _run(tmp_path)
    return run / "signoff.md", lambda: 0 if main(["signoff", str(run)]) in (0, 1) else 2


def _history(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    run = _run(tmp_path)
    safe_write.write_json(run / "run.json", {"suite": "smoke-cpu", "run_id": "6f1d3c52-8d3e-4d8e-9a8c-2b1e0f4c7a11"})
    db = tmp_path / "index.sqlite"
    assert main(["ingest", str(run), "--index", str(db)]) == 0
    return tmp_path / "h" / "history.html", _cli(["history", "--index", str(db), "--out", str(tmp_path / "h")])


def _import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    from harness.commands import imports

    monkeypatch.setattr(imports, "engine", lambda: "no vLLM parser in this test")
    data = ROOT / "tests" / "data" / "vllm-ascend"
    config = sorted(data.glob("*.yaml"))[0]
    out = tmp_path / "layer"
    return out / "topologies.yaml", _cli(["import", "vllm-ascend-nightly", str(config), "--out", str(out)])


class _WouldLaunch(Exception):
    """Raised where a golden record would start launching: the fast loop launches nothing."""


def _golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    from harness.check.references import record as golden

    def stop(*args: object, **kwargs: object) -> None:
        raise _WouldLaunch

    monkeypatch.setattr(golden, "ensure_zoo", stop)
    monkeypatch.setattr(golden, "Launcher", stop)
    out = tmp_path / "goldens" / "case.json"
    argv = ["golden", "record", "--suite", "smoke-cpu", "--case", "qwen3-tiny/pp2-tp1-mp/auto/none", "--out", str(out)]

    def call() -> int:
        # a golden ppconf recorded there is replaced: the launch would start (checked, not run)
        try:
            return main(argv)
        except _WouldLaunch:
            if not out.exists():
                safe_write.write_json(out, {"case": "as a recording writes it"})
            return 0

    return out, call


def _results(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.results import store

    run = tmp_path / "run"
    return run / "results.jsonl", lambda: store.append(run, record("c")) or 0


def _meta(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.results.meta import write_meta

    run = tmp_path / "run"
    return run / "run.json", lambda: write_meta(run, "s", "local", [], {}) or 0


def _repro(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.check.verdict.repro import bundle_dir, write_bundle
    from tests.records import result

    run = tmp_path / "run"
    rec = result("c/1", "FAIL", reason="boom")
    return bundle_dir(run, "c/1") / "commands.sh", lambda: bool(write_bundle(run, rec, None, tmp_path, {})) and 0


def _payload(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.launch import LaunchSpec, Payload
    from runners import payload

    spec = LaunchSpec("n0", "api", "local", "localhost", ("true",), (), payload=(Payload("plug.py", "x = 1\n"),))
    directory = tmp_path / "launch.payload"
    return directory / "plug.py", lambda: payload.write(spec, directory) or 0


def _zoo(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.target import zoo

    folder = tmp_path / "model"
    return folder / "tokenizer.json", lambda: zoo.write_tokenizer(folder) or 0


def _lmeval(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.check.scores.lmeval import resolve_task

    task = tmp_path / "src" / "mytask.yaml"
    task.parent.mkdir()
    task.write_text("task: mytask\ndataset_path: json\n")
    out = tmp_path / "lm-eval"
    return out / "mytask.yaml", lambda: bool(resolve_task(task, None, out)) and 0


def _aisbench(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from harness.check.scores.aisbench import write_aisbench_configs

    (tmp_path / "src").mkdir()
    request, dataset = tmp_path / "src" / "req.py", tmp_path / "src" / "ds.py"
    request.write_text("models = []\n")
    dataset.write_text("ds_datasets = []\n")
    config = tmp_path / "configs"
    score = type("Score", (), {})()

    def call() -> int:
        write_aisbench_configs(config, request, dataset, "http://h:1/v1", "m", None, score)
        return 0

    return config / "models" / next(iter([f"{_aisbench_models()}.py"])), call


def _aisbench_models() -> str:
    from harness.check.scores.aisbench import AISBENCH_MODELS

    return AISBENCH_MODELS


def _workers(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    from conformance.workers import merge

    base = tmp_path / "base"
    for w in ("gw0", "gw1"):
        from harness.results import store

        store.append(base / w, record(f"c-{w}"))
        safe_write.write_json(base / w / "run.json", {"suite": "s", "run_id": "6f1d3c52-8d3e-4d8e-9a8c-2b1e0f4c7a11"})
    return base / "results.jsonl", lambda: merge(base) and 0


def _references_copy(tmp_path: Path) -> tuple[Path, Callable[[], int]]:
    run = tmp_path / "run"
    path = run / "references" / "k.json"
    return path, lambda: safe_write.write_json(path, {"outputs": []}, root=run) and 0


WRITERS: dict[str, Callable[..., tuple[Path, Callable[[], int]]]] = {
    "report": _report,
    "report support.html": _report_as("support.html"),
    "report summary.json": _report_as("summary.json"),
    "report junit.xml": _report_as("junit.xml"),
    "report --claims-only": _claims,
    "signoff": _signoff,
    "history": _history,
    "import": _import,
    "golden record": _golden,
    "results.jsonl": _results,
    "run.json": _meta,
    "repro bundle": _repro,
    "payload": _payload,
    "zoo model": _zoo,
    "lm-eval task copy": _lmeval,
    "aisbench configs": _aisbench,
    "merged worker runs": _workers,
    "reference copy in the run": _references_copy,
}


def _writer(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    make = WRITERS[name]
    return make(tmp_path, monkeypatch) if name in ("import", "golden record") else make(tmp_path)


def _outcome(call: Callable[[], int]) -> tuple[int, str]:
    try:
        return call(), ""
    except WriteRefused as err:
        return 2, str(err)


@pytest.mark.parametrize("kind", ["link", "hand-written", "read-only"])
@pytest.mark.parametrize("name", list(WRITERS))
def test_a_planted_file_survives_every_writer(name, kind, tmp_path, monkeypatch, capsys):
    target, call = _writer(name, tmp_path, monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text(HAND)
    _plant(kind, target, victim)
    code, why = _outcome(call)
    why = why or capsys.readouterr().err
    assert code == 2, f"{name} wrote over a {kind} file"
    assert target.name in why and ("symbolic link" in why if kind == "link" else "ppconf" in why), why
    _survived(kind, target, victim)


@pytest.mark.parametrize("name", list(WRITERS))
def test_every_writer_writes_its_own_output_again(name, tmp_path, monkeypatch, capsys):
    target, call = _writer(name, tmp_path, monkeypatch)
    assert _outcome(call)[0] == 0, capsys.readouterr().err
    assert target.is_file() and safe_write.owns(target) or target.name == "results.jsonl"
    assert _outcome(call)[0] == 0, capsys.readouterr().err


def test_force_replaces_a_hand_written_report_but_never_a_link(tmp_path, capsys):
    target, _ = _report(tmp_path)
    run = target.parent.parent
    target.parent.mkdir()
    target.write_text(HAND)
    assert main(["report", str(run)]) == 2
    assert f"{target} exists and is not a file ppconf wrote" in capsys.readouterr().err
    assert main(["report", str(run), "--force"]) == 0 and target.read_text() != HAND
    assert main(["report", str(run)]) == 0  # now its own


def test_import_refuses_to_write_into_a_layer_it_is_read_against(tmp_path, capsys):
    from harness.matrix.load import DEFAULT_MATRICES

    config = sorted((ROOT / "tests" / "data" / "vllm-ascend").glob("*.yaml"))[0]
    before = {p: p.read_bytes() for p in DEFAULT_MATRICES.rglob("*") if p.is_file()}
    for out, layers in (
        (DEFAULT_MATRICES, []),
        (DEFAULT_MATRICES / "cpu", []),
        (tmp_path / "private", ["--matrices", str(DEFAULT_MATRICES), "--matrices", str(tmp_path / "private")]),
    ):
        for force in ([], ["--force"]):
            assert main(["import", "vllm-ascend-nightly", str(config), "--out", str(out), *layers, *force]) == 2
            assert f"--out {out} is inside the matrix layer" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in DEFAULT_MATRICES.rglob("*") if p.is_file()} == before


def test_import_writes_nothing_when_one_of_its_files_is_not_its_own(tmp_path, monkeypatch, capsys):
    from harness.commands import imports

    monkeypatch.setattr(imports, "engine", lambda: "no vLLM parser in this test")
    config = sorted((ROOT / "tests" / "data" / "vllm-ascend").glob("*.yaml"))[0]
    out = tmp_path / "layer"
    out.mkdir()
    (out / "topologies.yaml").write_text("topologies: {}\n")  # the layer's own, hand-written
    assert main(["import", "vllm-ascend-nightly", str(config), "--out", str(out)]) == 2
    assert "topologies.yaml exists and is not a file ppconf wrote" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["topologies.yaml"]  # not one file written
    assert main(["import", "vllm-ascend-nightly", str(config), "--out", str(out), "--force"]) == 0
    assert main(["import", "vllm-ascend-nightly", str(config), "--out", str(out)]) == 0  # again: its own


def test_a_resume_of_a_run_another_writer_made_needs_force(tmp_path, capsys):
    from harness.run_dir import open_resumed

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"suite": "smoke-cpu"}))
    (run / "results.jsonl").write_text(json.dumps(record("c")) + "\n")
    from harness.results import store

    with pytest.raises(WriteRefused, match="results.jsonl exists and is not a file ppconf wrote"):
        store.append(run, record("d"))
    open_resumed(run, adopt=True)
    store.append(run, record("d"))
    assert [r.case for r in store.read_all(run)] == ["c", "d"]


def test_lint_migrate_never_writes_through_a_link(tmp_path):
    import shutil

    from harness.matrix.migrate import migrate
    from harness.matrix.source import MatrixError

    layer = tmp_path / "old"
    shutil.copytree(ROOT / "tests" / "data" / "old-matrices", layer)
    old = sorted(layer.rglob("*.yaml"))[0]
    victim = tmp_path / "victim.yaml"
    victim.write_bytes(old.read_bytes())
    old.unlink()
    old.symlink_to(victim)
    before = victim.read_bytes()
    with pytest.raises(MatrixError) as err:
        migrate(layer)
    assert any(f"{old.name} is a symbolic link" in str(e) for e in err.value.errors), err.value.errors
    assert victim.read_bytes() == before and old.is_symlink()


def test_streams_are_appended_to_but_never_through_a_link(tmp_path, monkeypatch):
    from harness.check.scores.tool import run_tool
    from harness.launch import LaunchSpec
    from harness.redact import Redactor
    from reports.github import write_job_summary
    from runners.local import LocalNodeRunner

    victim = tmp_path / "victim.txt"
    victim.write_text(HAND)
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("api.log", "tool.log", "summary.md", "scrubbed.log"):
        (logs / name).symlink_to(victim)
    spec = LaunchSpec("n0", "api", "local", "localhost", ("true",), ())
    with pytest.raises(WriteRefused, match="api.log is a symbolic link"):
        LocalNodeRunner().start(spec, logs / "api.log")
    with pytest.raises(WriteRefused, match="tool.log is a symbolic link"):
        run_tool(["true"], dict(os.environ), logs / "tool.log", 10)
    with pytest.raises(WriteRefused, match="summary.md is a symbolic link"):
        write_job_summary("hello", {"GITHUB_STEP_SUMMARY": str(logs / "summary.md")})
    victim.write_text("HF_TOKEN=hf_secret_value_1\n")
    with pytest.raises(WriteRefused, match="scrubbed.log is a symbolic link"):
        Redactor().scrub_file(logs / "scrubbed.log")
    assert victim.read_text() == "HF_TOKEN=hf_secret_value_1\n"
    # a log someone else started (the CI's summary) is appended to, not replaced
    (tmp_path / "summary.md").write_text("earlier step\n")
    write_job_summary("this step\n", {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    assert (tmp_path / "summary.md").read_text() == "earlier step\nthis step\n"


def test_the_results_index_is_never_written_through_a_link(tmp_path, capsys):
    run = _run(tmp_path)
    victim = tmp_path / "victim.sqlite"
    victim.write_text(HAND)
    (tmp_path / "index.sqlite").symlink_to(victim)
    assert main(["ingest", str(run), "--index", str(tmp_path / "index.sqlite")]) == 2
    assert "index.sqlite is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == HAND


# ---- no module writes a file another way ------------------------------------------------------

PACKAGES = ("harness", "runners", "reports", "conformance")
# (module, what): the writes that are not files of ppconf's output
ALLOWED = {
    ("harness.cli", "open(w)"),  # stdout pointed at os.devnull once the reader of a pipe is gone
    # a zoo model built whole in a fresh private folder (through safe_write) and renamed into the
    # cache: a directory's rename replaces no file and follows no link (onto a link: ENOTDIR)
    ("harness.target.zoo", "os.rename"),
}


def raw_writes(module: str, source: str) -> set[tuple[str, str]]:
    """Each way ``source`` writes a file other than through ``harness.safe_write``: ``open(...)``
    or ``Path.open(...)`` with a w/a/x mode, ``.write_text(``, ``.write_bytes(``, ``os.replace``,
    ``os.rename``, ``shutil.copy*``/``move``, ``tempfile.mkstemp``, ``.touch(``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        if name == "open" and owner not in ("os", "safe_write"):
            modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if isinstance(f, ast.Attribute):  # Path.open(mode)
                modes += [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
            if any(isinstance(m, str) and set(m) & set("wax+") for m in modes):
                found.add((module, "open(w)"))
        elif name in ("write_text", "write_bytes", "touch") and owner != "safe_write":
            found.add((module, f".{name}("))
        elif owner == "os" and name in ("replace", "rename"):
            found.add((module, f"os.{name}"))
        elif owner == "shutil" and name in ("copy", "copy2", "copyfile", "copytree", "move"):
            found.add((module, f"shutil.{name}"))
        elif owner == "tempfile" and name in ("mkstemp", "NamedTemporaryFile"):
            found.add((module, f"tempfile.{name}"))
    return found


def test_no_module_writes_a_file_but_through_the_safe_writer():
    found = set()
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            module = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if module != "harness.safe_write":
                found |= raw_writes(module, p.read_text())
    assert found - ALLOWED == set(), "write through harness.safe_write instead"


def test_the_write_scan_finds_planted_writes():
    planted = (
        "open(p, 'w')\nopen(p, mode='ab')\np.open('a')\np.write_text('x')\np.write_bytes(b'')\n"
        "os.replace(a, b)\nshutil.copyfile(a, b)\ntempfile.mkstemp()\np.touch()\n"
        "open(p)\np.open()\nsafe_write.write_text(p, 'x')\nos.open(p, os.O_RDONLY)\n"
    )
    assert {w for _, w in raw_writes("m", planted)} == {
        "open(w)",
        ".write_text(",
        ".write_bytes(",
        "os.replace",
        "shutil.copyfile",
        "tempfile.mkstemp",
        ".touch(",
    }
