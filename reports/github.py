"""A run as GitHub Actions shows it: an ``::error`` annotation per failing case, a ``::warning``
per waived case, and a Markdown job summary with the support tables (for the file
``$GITHUB_STEP_SUMMARY`` names).

Escaping follows GitHub's workflow-command rules (``escapeData`` / ``escapeProperty`` of the
Actions toolkit's ``@actions/core``, undone by the runner's ``ActionCommand``): in a message ``%``,
``\\r`` and ``\\n`` are written ``%25``, ``%0D``, ``%0A``; in a property value ``:`` and ``,`` also,
as ``%3A`` and ``%2C``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from harness import safe_write
from harness.outcomes import WAIVED, Outcome
from harness.results.result import Result

from . import markdown
from .cells import LEGEND, build_tables, entries_from_results, waiver_text
from .render import environment

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


def _annotations(
    name: str, chosen: list[Result], message: Callable[[Result], str], what: str, ws: Path | None
) -> list[str]:
    """One ``::NAME`` per record (title: outcome and case id), placed on the matrix rule that
    claimed it when that file is in the checkout; past GitHub's limit, one more counts the rest."""
    out = [
        command(name, message(r), title=f"{r.outcome.value} {r.case}", **_claim_position(r.expectation.where, ws))
        for r in chosen[:MAX_ANNOTATIONS]
    ]
    if len(chosen) > MAX_ANNOTATIONS:
        out.append(
            command(
                name,
                f"the job summary lists every {what} case",
                title=f"{len(chosen) - MAX_ANNOTATIONS} more {what} cases",
            )
        )
    return out


def _workspace(env: Mapping[str, str] | None) -> Path | None:
    env = os.environ if env is None else env
    return Path(env["GITHUB_WORKSPACE"]) if env.get("GITHUB_WORKSPACE") else None


def error_annotations(records: list[Result], env: Mapping[str, str] | None = None) -> list[str]:
    """One ``::error`` per failing case, its reason as the message."""
    return _annotations("error", failing(records), lambda r: r.reason, "failing", _workspace(env))


def warning_annotations(records: list[Result], env: Mapping[str, str] | None = None) -> list[str]:
    """One ``::warning`` per waived case (known issue, flaky): its reason and what waived it."""
    waived = [r for r in records if r.outcome in WAIVED]
    return _annotations(
        "warning", waived, lambda r: f"{r.reason} — waived: {waiver_text(r.expectation)}", "waived", _workspace(env)
    )


def all_annotations(records: list[Result], env: Mapping[str, str] | None = None) -> list[str]:
    """Every annotation of a run: the failing cases' errors, then the waived cases' warnings."""
    return error_annotations(records, env) + warning_annotations(records, env)


def run_url(env: Mapping[str, str]) -> str | None:
    """This workflow run's page, where its artifacts (the report) are listed."""
    if all(env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")):
        return f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return None


def job_summary(suite: str, records: list[Result], report: Path, env: Mapping[str, str] | None = None) -> str:
    """Markdown for the job summary: the counts per outcome, the support table of each model
    family, every failing case with its reason, every waived case with its waiver's owner and
    expiry, and where the report is. Text a run recorded renders as itself (``reports.markdown``)."""
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
    tables = build_tables(entries_from_results(records))
    if tables:
        support = environment(False).get_template("tables.md.j2").module.support_tables(tables, "###")  # type: ignore[attr-defined]
        lines += ["", f"Support ({LEGEND}):", "", str(support).rstrip("\n")]
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
    with safe_write.open_stream(Path(target)) as f:  # the runner's file: appended to, never through a link
        f.write(text.encode("utf-8", errors="backslashreplace"))
    return Path(target)
