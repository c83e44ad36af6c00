"""A run as GitHub Actions shows it: an ``::error`` annotation per failing case, and a Markdown
job summary (for the file ``$GITHUB_STEP_SUMMARY`` names).

Escaping follows GitHub's workflow-command rules (``escapeData`` / ``escapeProperty`` of the
Actions toolkit's ``@actions/core``, undone by the runner's ``ActionCommand``): in a message ``%``,
``\\r`` and ``\\n`` are written ``%25``, ``%0D``, ``%0A``; in a property value ``:`` and ``,`` also,
as ``%3A`` and ``%2C``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from harness.outcomes import WAIVED, Outcome
from harness.results.result import Result

from . import markdown

# GitHub shows at most 10 error annotations per step; the rest are counted in one more.
MAX_ANNOTATIONS = 10
_WHERE = re.compile(r"(?P<file>.+?):(?P<line>\d+)(?::(?P<col>\d+))?")


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: str) -> str:
    props = ",".join(f"{k}={escape_property(v)}" for k, v in properties.items())
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def failing(records: list[Result]) -> list[Result]:
    return [r for r in records if r.outcome.fails_run]


def _claim_position(where: str, workspace: Path | None) -> dict[str, str]:
    """``file`` and ``line`` of the matrix rule that made the claim, relative to the checkout
    (GitHub places an annotation only on a file of the repository); {} when it is elsewhere."""
    m = _WHERE.fullmatch(where or "")
    if not m:
        return {}
    path = Path(m["file"])
    if path.is_absolute():
        if workspace is None or not path.is_relative_to(workspace):
            return {}
        path = path.relative_to(workspace)
    return {"file": path.as_posix(), "line": m["line"]}


def error_annotations(records: list[Result], env: Mapping[str, str] | None = None) -> list[str]:
    """One ``::error`` per failing case (title: outcome and case id; message: the reason), placed
    on the matrix rule that claimed it when that file is in the checkout."""
    env = os.environ if env is None else env
    workspace = Path(env["GITHUB_WORKSPACE"]) if env.get("GITHUB_WORKSPACE") else None
    bad = failing(records)
    out = [
        command(
            "error",
            r.reason,
            title=f"{r.outcome.value} {r.case}",
            **_claim_position(r.expectation.where, workspace),
        )
        for r in bad[:MAX_ANNOTATIONS]
    ]
    if len(bad) > MAX_ANNOTATIONS:
        out.append(
            command(
                "error",
                "the job summary lists every failing case with its reason",
                title=f"{len(bad) - MAX_ANNOTATIONS} more failing cases",
            )
        )
    return out


def run_url(env: Mapping[str, str]) -> str | None:
    """This workflow run's page, where its artifacts (the report) are listed."""
    if all(env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")):
        return f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return None


def job_summary(suite: str, records: list[Result], report: Path, env: Mapping[str, str] | None = None) -> str:
    """Markdown for the job summary: the counts per outcome, every failing case with its reason,
    every waived case with its waiver's owner and expiry, and where the report is. Text a run
    recorded renders as itself (``reports.markdown``)."""
    env = os.environ if env is None else env
    counts = Counter(r.outcome for r in records)
    bad = failing(records)
    verdict = f"**{len(bad)} failing**" if bad else "**no failures**"
    lines = [
        f"## ppconf: {markdown.text(suite)}",
        "",
        f"{len(records)} cases, {verdict}",
        "",
        "| outcome | cases | fails the run |",
        "|---|---:|---|",
    ]
    lines += [f"| {o.value} | {counts[o]} | {'yes' if o.fails_run else 'no'} |" for o in Outcome if counts[o]]
    if bad:
        lines += ["", "### Failing cases", "", "| outcome | case | reason |", "|---|---|---|"]
        lines += [f"| {r.outcome.value} | {markdown.text(r.case)} | {markdown.text(r.reason)} |" for r in bad]
    waived = [r for r in records if r.outcome in WAIVED]
    if waived:
        lines += ["", "### Waived cases", "", "| outcome | case | waiver | owner | until |", "|---|---|---|---|---|"]
        lines += [
            f"| {r.outcome.value} | {markdown.text(r.case)} | {markdown.text(r.expectation.link or '')} "
            f"| {markdown.text(r.expectation.owner or '')} "
            f"| {r.expectation.until.isoformat() if r.expectation.until else 'no expiry'} |"
            for r in waived
        ]
    url = run_url(env)
    lines += ["", f"Report: {markdown.code(report)}" + (f" — in the artifacts of [this run]({url})" if url else "")]
    return "\n".join(lines) + "\n"


def write_job_summary(text: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to the file ``$GITHUB_STEP_SUMMARY`` names (GitHub concatenates what each command of
    the step appends); None when it is not set."""
    env = os.environ if env is None else env
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as f:
        f.write(text)
    return Path(target)
