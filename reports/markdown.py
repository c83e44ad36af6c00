"""Text a run recorded, made safe for Markdown that GitHub renders (support.md, signoff.md, the
job summary): one line, no raw HTML, no links or images, no table breaks, no terminal sequences,
control characters or lone surrogates. Whatever a log line, an error body or a matrix value holds,
it shows as the text it is."""

from __future__ import annotations

import re

# ANSI colour codes and other terminal sequences, as some log lines carry them
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
# C0 and C1 controls, DEL, and the line and paragraph separators; a surrogate alone is no character
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# what Markdown reads as markup that changes what is shown: HTML, links and images, table cells,
# escapes; `&` so that an entity shows as typed
_MARKUP = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]"}
_MARKUP_RE = re.compile("[" + re.escape("".join(_MARKUP)) + "]")


def _line(value: object) -> str:
    return " ".join(_CONTROL.sub(" ", ANSI.sub("", str(value))).split())


def text(value: object) -> str:
    """``value`` as one line of Markdown text that renders as itself."""
    return _MARKUP_RE.sub(lambda m: _MARKUP[m[0]], _line(value))


def code(value: object) -> str:
    """``value`` as an inline code span (a path, a command): nothing in it is markup, and a
    backtick, which would end the span, shows as a quote."""
    return "`" + _line(value).replace("`", "'") + "`"
