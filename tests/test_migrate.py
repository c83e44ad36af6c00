"""Matrices survive an upgrade: older matrices (tests/data/old-matrices, private matrices as
they were written before keys moved) fail to load with errors naming where each setting lives
now, and `ppconf lint --migrate` rewrites them, comments kept, to a form that loads and lints
clean. A file may state its format; a newer one than this ppconf's is refused."""

import re
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.matrix import changes
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.migrate import migrate
from harness.matrix.source import MatrixError

OLD = Path(__file__).parent / "data" / "old-matrices"


@pytest.fixture
def old(tmp_path):
    """A copy of the old matrices, each to be layered over the shipped ones."""
    shutil.copytree(OLD, tmp_path / "old")
    return tmp_path / "old"


def load_errors(*roots):
    with pytest.raises(MatrixError) as err:
        load_matrix([DEFAULT_MATRICES, *roots])
    return [str(e) for e in err.value.errors]


def comments(folder):
    return sorted(
        m[0].strip() for p in folder.rglob("*.yaml") for m in re.finditer(r"#.*$", p.read_text(), re.M) if "#" in m[0]
    )


def test_each_moved_or_removed_key_names_its_new_place_or_why_it_went(old):
    errs = load_errors(old / "tolerances")
    assert any(
        "tolerances/suite.yaml:11:7: suites.mine-cpu.accuracy.logprob_tolerance: 'logprob_tolerance' moved to "
        "suites.mine-cpu.accuracy.compare.logprob_tolerance"
        in e
        and "lint --migrate" in e
        for e in errs
    ), errs
    assert any(
        "tolerances/suite.yaml:12:7: suites.mine-cpu.accuracy.embedding_tolerance: 'embedding_tolerance' is no "
        "longer a setting"
        in e
        and "compare.cosine_min" in e
        for e in errs
    ), errs
    assert any("suite.yaml:8:5: suites.mine-cpu.partition_rules" in e for e in errs), errs
    assert not any("unknown key" in e or "did you mean" in e for e in errs), errs
    waived = load_errors(old / "waivers")
    assert len(waived) == 2 and all(
        "needs waives" in e and "once covered every check" in e and "lint --migrate" in e for e in waived
    ), waived
    assert "waivers/rules.yaml:16:5: rules.0" in waived[0]


def test_migrated_old_matrices_keep_their_comments_and_load(old):
    for name in ("tolerances", "waivers"):
        folder = old / name
        before = comments(folder)
        assert migrate(folder)
        # every comment kept, but the one on the line of a key that went
        assert comments(folder) == [c for c in before if c != "# nothing ever read it"]
        load_matrix([DEFAULT_MATRICES, folder])
        assert f"ppconf: {{format: {changes.FORMAT}}}" in (next(folder.glob("*.yaml"))).read_text()
    out = (old / "tolerances" / "suite.yaml").read_text()
    assert "compare:\n        logprob_tolerance: 0.001 # float32 on one host" in out
    assert "tolerance: 0.0001" not in out and "partition_rules" not in out
    assert "    # the dense model, split two ways\n    groups:" in out
    rules = (old / "waivers" / "rules.yaml").read_text()
    checks = ", ".join(changes.FORMAT_1_CHECKS)
    # the new key sits in its rule, before the comment that heads the next one
    assert f"issues/1\n    waives: [{checks}]\n  # tracked upstream\n" in rules, rules


def test_migrate_says_what_it_changed_and_a_second_time_nothing(old):
    done = [str(c) for c in migrate(old / "tolerances")]
    assert done == [
        "tolerances/suite.yaml:1:1: ppconf.format: 2 stated",
        "tolerances/suite.yaml:8:5: suites.mine-cpu.partition_rules removed: " + changes.KEY_CHANGES[2].why,
        "tolerances/suite.yaml:11:7: suites.mine-cpu.accuracy.logprob_tolerance -> "
        "suites.mine-cpu.accuracy.compare.logprob_tolerance",
        "tolerances/suite.yaml:12:7: suites.mine-cpu.accuracy.embedding_tolerance removed: "
        + changes.KEY_CHANGES[1].why,
    ]
    assert migrate(old / "tolerances") == []


@pytest.mark.slow  # lints every shipped suite's cases, twice
def test_lint_migrate_rewrites_and_lints_clean(old, capsys):
    for name in ("tolerances", "waivers"):
        folder = old / name
        code = main(["lint", "--matrices", str(DEFAULT_MATRICES), "--matrices", str(folder), "--migrate", str(folder)])
        out = capsys.readouterr().out
        assert code == 0, out
        assert re.search(r"^migrated: " + name + r"/\S+\.yaml:\d+:\d+: ", out, re.M), out
        assert f"{folder}: " in out and "change(s) in 1 file(s), now matrix format 2" in out
        assert re.search(r"^\d+ rules, \d+ cases in \d+ suites: 0 errors, 0 warnings$", out, re.M), out


def test_a_key_at_its_old_and_new_place_is_not_guessed(tmp_path):
    (tmp_path / "m").mkdir()
    path = tmp_path / "m" / "suite.yaml"
    text = "suites:\n  s:\n    accuracy:\n      logprob_tolerance: 0.1\n      compare: {logprob_tolerance: 0.2}\n"
    path.write_text(text)
    with pytest.raises(MatrixError, match=r"suite.yaml:4:7: .*logprob_tolerance is set, and .*compare"):
        migrate(tmp_path / "m")
    assert path.read_text() == text


def test_a_newer_format_is_refused_and_an_older_one_loads(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    newer = root / "newer.yaml"
    newer.write_text(f"ppconf: {{format: {changes.FORMAT + 1}}}\nsuites:\n  s: {{future_key: 1}}\n")
    (err,) = load_errors_of(root)  # that one error alone: the newer keys are not misread
    assert f"newer.yaml:1:18: ppconf.format: written for matrix format {changes.FORMAT + 1}" in err
    assert "upgrade ppconf" in err
    with pytest.raises(MatrixError, match="newer.yaml.*written for matrix format"):
        migrate(root)
    newer.write_text("ppconf: {format: 1}\nplatforms: {}\n")  # nothing in it changed since format 1
    load_matrix(root)
    newer.write_text("ppconf: {format: two}\n")
    (err,) = load_errors_of(root)
    assert "newer.yaml:1:18: ppconf.format must be a format number" in err
    newer.write_text("ppconf: 2\n")
    (err,) = load_errors_of(root)
    assert "newer.yaml:1:1: ppconf must be a mapping with one key, format" in err


def load_errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


def test_the_shipped_matrices_are_in_this_format(tmp_path):
    shutil.copytree(DEFAULT_MATRICES, tmp_path / "m")
    assert migrate(tmp_path / "m") == []


def test_what_the_loader_refuses_migrate_refuses_too_naming_it(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "dup.yaml").write_text("suites:\n  a: {}\n  a: {}\n")
    (tmp_path / "m" / "bytes.yaml").write_bytes(b"\xff\xfe suites: 1\n")
    assert main(["lint", "--migrate", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert any("m/dup.yaml:3:3: duplicate key 'a'" in e for e in err), err
    assert any("m/bytes.yaml:1:1: cannot read file" in e for e in err), err
    assert "Traceback" not in "".join(err)
