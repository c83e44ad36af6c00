"""stacks.md: the table across stacks in Markdown — the cases that differ first, then the rest —
and each summary between two stacks."""

from __future__ import annotations

from reports import markdown
from reports.stacks import SUMMARY_KINDS, AcrossStacks, Row, StackReportFormat


def _cell_text(text: str, link: str | None) -> str:
    return f"[{text}]({link})" if link else text


def _table(report: AcrossStacks, rows: list[Row]) -> list[str]:
    head = "| case | " + " | ".join(markdown.text(c.stack) for c in report.columns) + " |"
    lines = [head, "|" + "---|" * (len(report.columns) + 1)]
    for r in rows:
        cells = [_cell_text(f"{c.symbol} {c.outcome or 'not run'}", c.evidence) for c in r.cells]
        lines.append(f"| {markdown.code(r.case)} | " + " | ".join(cells) + " |")
    return lines


def write(report: AcrossStacks) -> str:
    out = [f"# {markdown.text(report.suite)} across stacks", ""]
    out += [
        "Stacks: "
        + "; ".join(
            f"{markdown.text(c.stack)} (probed: {markdown.text(c.engine or 'not run')})" for c in report.columns
        ),
        "",
    ]
    differ = [r for r in report.rows if r.differs]
    same = [r for r in report.rows if not r.differs]
    out += [f"## Cases that differ between stacks ({len(differ)})", ""]
    out += [*_table(report, differ), ""] if differ else ["None: every case has the same outcome on every stack.", ""]
    for r in differ:
        out.append(f"- {markdown.code(r.case)}:")
        for col, c in zip(report.columns, r.cells, strict=True):
            extra = f" ({c.duration_s} s)" if c.duration_s is not None else ""
            repro = f"; repro: [bundle]({c.repro})" if c.repro else ""
            reason = f": {markdown.text(c.reason)}" if c.reason else ""
            out.append(f"  - {markdown.text(col.stack)}: {c.outcome or 'not run'}{extra}{reason}{repro}")
    if differ:
        out.append("")
    out += [f"## Same on every stack ({len(same)})", ""]
    out += [*_table(report, same), ""] if same else ["None.", ""]
    for b in report.summaries:
        counts = ", ".join(f"{n} {k}" for k, n in b.counts().items())
        out += [f"## {markdown.text(b.before)} → {markdown.text(b.after)}: {counts}", ""]
        for kind, label in SUMMARY_KINDS.items():
            for d in b.kinds.get(kind, []):
                out.append(f"- {label}: {markdown.text(str(d))}")
        if not any(b.kinds.values()):
            out.append("Nothing moved.")
        out.append("")
    return "\n".join(out)


FORMAT = StackReportFormat("stacks.md", write)
