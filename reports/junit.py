"""junit.xml as the JUnit readers of Jenkins, GitLab and GitHub read it (the Ant/Surefire format
of Jenkins' ``junit-10.xsd``): a ``<testsuites>`` root, one ``<testsuite>`` per model family with
its counts, time and timestamp, one ``<testcase>`` per case.

The outcome says which element a case gets (``Outcome.junit``): a verified rejection (XFAIL) is a
passed test, a known issue, a flaky case or a skip is ``<skipped>`` with its reason, ERROR is
``<error>``. Each case's ``<system-out>`` holds its evidence and the path of its repro bundle; the
claim and outcome of each case are properties of its family's suite (the schema allows
properties on suites only).

Jenkins splits a classname at its last dot into package and class, so a family's dots (``qwen3.6``)
are written as ``_``: every case's classname is ``ppconf.<family>``, read as package ``ppconf``,
class ``qwen3_6``.
"""

from __future__ import annotations

import datetime
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.outcomes import Outcome
from harness.results import store as results
from harness.results.result import LogLine, Observation

from . import links, markdown
from .cells import Entry, claim_text, waiver_text

# characters XML 1.0 cannot hold at all, not even escaped
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MESSAGE_CHARS = 2000  # a message attribute is shown on one line; the whole text is in the element


def xml_text(value: Any) -> str:
    """Text an XML 1.0 document can hold: colour codes dropped, other forbidden characters
    written as \\xNN."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}", markdown.ANSI.sub("", str(value)))


def classname(family: str) -> str:
    """``ppconf.<family>`` with the family's dots as ``_``: one package, one class per family."""
    return "ppconf." + family.replace(".", "_")


def _seconds(value: float) -> str:
    return f"{value:.3f}"  # the schema's time allows three decimals


def _utc(started: str) -> str:
    """An ISO 8601 time as the Ant format writes a timestamp: UTC, no offset, whole seconds."""
    t = datetime.datetime.fromisoformat(started)
    if t.tzinfo is not None:
        t = t.astimezone(datetime.UTC).replace(tzinfo=None)
    return t.replace(microsecond=0).isoformat()


def _line(name: str, line: LogLine | None) -> list[str]:
    return [f"{name}: {line.log} line {line.line}: {line.text}"] if line else []


def evidence(e: Entry, run_dir: Path | None) -> str:
    """A case's evidence as plain text lines: the verdict, the claim and its waiver, what was
    observed, the log lines it rests on, where the full logs and the repro bundle are."""
    r = e.record
    obs = r.observation if r else Observation()
    lines = [f"{e.outcome or 'not run'}: {e.reason}" if e.reason else f"{e.outcome or 'not run'}"]
    lines.append(f"claim: {claim_text(e.expectation)}")
    if waiver := waiver_text(e.expectation):
        lines.append(f"waiver: {waiver}")
    if obs.partition:
        lines.append(f"partition observed {obs.partition} ({obs.partition_source}); oracle {obs.partition_expected}")
    if obs.accuracy:
        lines.append(f"accuracy ({obs.accuracy.mode or 'exact'}): {obs.accuracy.summary}")
    if obs.score:
        lines.append(f"task score: {'ok' if obs.score.ok else 'FAILED'} — {obs.score.detail}")
    lines += [f"check {name}: {'ok' if c.ok else 'FAILED'} — {c.detail}" for name, c in obs.feature_checks.items()]
    lines += _line("expected error", obs.expected_error_line) + _line("root cause", obs.root_cause)
    lines += [f"note: {n}" for n in obs.notes]
    if r and r.diagnosis:
        lines.append(f"diagnosis: {r.diagnosis.symptom} — {r.diagnosis.advice}")
    for name, ref in obs.logs.items():
        found = results.log_path(run_dir, ref) if run_dir else None
        shown = Path(run_dir) / found.relative_to(Path(run_dir).resolve()) if run_dir and found else None
        lines.append(f"log {name}: {shown or f'{ref} (not in the run directory)'}")
    if r and r.repro:
        where = links.bundle(run_dir, r)
        inside = Path(run_dir) / where.relative_to(Path(run_dir).resolve()) if run_dir and where else None
        lines.append(f"repro bundle: {inside or r.repro.dir}")
        if r.repro.rerun:
            lines.append(f"re-run: {r.repro.rerun}")
    return "\n".join(lines) + "\n"


def _testcase(suite: ET.Element, e: Entry, run_dir: Path | None) -> tuple[str | None, float]:
    r = e.record
    seconds = r.duration_s if r and r.duration_s else 0.0
    tc = ET.SubElement(suite, "testcase", name=xml_text(e.case), classname=classname(e.family), time=_seconds(seconds))
    # the outcome says which element it gets; a case not run (claims only) is skipped, with its claim
    element = Outcome(e.outcome).junit if e.outcome is not None else "skipped"
    if e.outcome is None:
        message = f"not run: the matrix claims {claim_text(e.expectation)}"
    else:
        message = f"{e.outcome}: {e.reason or Outcome(e.outcome).label}"
    if element in ("failure", "error"):
        node = ET.SubElement(tc, element, message=xml_text(message[:MESSAGE_CHARS]), type=str(e.outcome))
        node.text = xml_text(e.reason + (f"\n\n{r.harness_error}" if r and r.harness_error else ""))
    elif element == "skipped":
        ET.SubElement(tc, "skipped", message=xml_text(message[:MESSAGE_CHARS]))
    ET.SubElement(tc, "system-out").text = xml_text(evidence(e, run_dir))
    return element, seconds


def write_junit(entries: list[Entry], path: Path, run_dir: Path | None = None, force: bool = False) -> None:
    suites = {e.record.suite for e in entries if e.record}
    root = ET.Element("testsuites", name="ppconf" + (f" {suites.pop()}" if len(suites) == 1 else ""))
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for family in sorted({e.family for e in entries}):
        mine = [e for e in entries if e.family == family]
        suite = ET.SubElement(root, "testsuite", name=xml_text(family))
        props = ET.SubElement(suite, "properties")
        for e in mine:
            for key, value in (("outcome", e.outcome or "not run"), ("claim", claim_text(e.expectation))):
                ET.SubElement(props, "property", name=xml_text(f"{e.case} {key}"), value=xml_text(value))
        elements = [_testcase(suite, e, run_dir) for e in mine]
        counts = {
            "tests": len(mine),
            "failures": sum(el == "failure" for el, _ in elements),
            "errors": sum(el == "error" for el, _ in elements),
            "skipped": sum(el == "skipped" for el, _ in elements),
        }
        seconds = sum(s for _, s in elements)
        for key, n in counts.items():
            suite.set(key, str(n))
            if key in totals:
                totals[key] += n
        suite.set("time", _seconds(seconds))
        total_time += seconds
        started = [e.record.started for e in mine if e.record and e.record.started]
        if started:
            suite.set("timestamp", min(_utc(s) for s in started))
    for key, n in totals.items():  # the schema gives the root no `skipped`
        root.set(key, str(n))
    root.set("time", _seconds(total_time))
    ET.indent(root)
    xml = "<?xml version='1.0' encoding='utf-8'?>\n" + ET.tostring(root, encoding="unicode") + "\n"
    safe_write.write_text(path, xml, force=force)
