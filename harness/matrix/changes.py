"""What changed in the matrix format: keys that moved or went, and the format a file may state.

A matrix file may say which format it was written for, as a top-level ``ppconf: {format: N}``;
one without it is read as this format. A format newer than ``FORMAT`` is refused (a newer
ppconf wrote it); an older file loads where nothing it uses has changed, and each key that
moved or went is a load error saying where its setting lives now, or why it went.
``ppconf lint --migrate`` (harness.matrix.migrate) rewrites a matrix to this format.

Formats:
  1. the matrices before the mark: ``accuracy.logprob_tolerance`` and
     ``accuracy.embedding_tolerance`` on a suite, ``partition_rules`` on a suite, known-issue and
     flaky waivers that cover every check;
  2. ``accuracy.compare`` holds the comparison, embeddings compared by cosine, waivers name the
     checks they cover (``waives``).
"""

from __future__ import annotations

from dataclasses import dataclass

FORMAT = 2
MARK = "ppconf"  # the top-level key that states the format: ppconf: {format: N}

# The checks a known-issue or flaky waiver covered before waivers named theirs (format 1): every
# check of that time. Checks added since are not waived by a migrated rule.
FORMAT_1_CHECKS = ("startup", "request", "partition", "accuracy", "silent-disable", "feature-checks")


@dataclass(frozen=True)
class KeyChange:
    """A key of the schema model ``model`` (its class name) that moved to ``to`` (a path from
    the same entry) or, without ``to``, went; ``why`` says where its choice lives now."""

    model: str
    key: str
    why: str
    to: tuple[str, ...] = ()


KEY_CHANGES = (
    KeyChange(
        "Accuracy",
        "logprob_tolerance",
        "how outputs are compared with the reference is `compare`",
        ("compare", "logprob_tolerance"),
    ),
    KeyChange(
        "Accuracy",
        "embedding_tolerance",
        "a pooling case's embeddings are compared by cosine similarity with the reference's, "
        "bounded by `compare.cosine_min` (default 0.999), not by their largest difference per component",
    ),
    KeyChange(
        "Suite",
        "partition_rules",
        "a suite does not pick the partition rule set; each case carries both checks "
        "(`partition_error`: vLLM's, `partition_doc_error`: the Ascend guide's stricter one) "
        "and the rules say which one decides (see matrices/ascend/rules.yaml)",
    ),
)
_BY_KEY = {(c.model, c.key): c for c in KEY_CHANGES}


def key_change(model: str, key: str) -> KeyChange | None:
    return _BY_KEY.get((model, key))


def describe(change: KeyChange, dotted: str) -> str:
    """The load error for ``change`` met at ``dotted`` (the key's path in the file)."""
    if change.to:
        holder = dotted.rsplit(".", 1)[0]
        return (
            f"{dotted}: '{change.key}' moved to {holder}.{'.'.join(change.to)} ({change.why}); "
            f"`ppconf lint --migrate` moves it"
        )
    return f"{dotted}: '{change.key}' is no longer a setting: {change.why}; `ppconf lint --migrate` drops it"


def format_problem(body: object) -> tuple[str, str] | None:
    """What is wrong with a file's ``ppconf:`` mark, as (where in the mark, message), or None.
    The where is "" for the mark itself, "format" for its value."""
    if not isinstance(body, dict) or set(body) != {"format"}:
        return "", f"{MARK} must be a mapping with one key, format (the matrix format the file is written for)"
    n = body["format"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return "format", f"{MARK}.format must be a format number, 1 or more, got {n!r}"
    if n > FORMAT:
        return "format", (
            f"{MARK}.format: written for matrix format {n}, and this ppconf reads formats up to {FORMAT}: "
            f"a newer ppconf wrote it (upgrade ppconf to read it)"
        )
    return None
