"""The published feature table, read from the matrix's claims: one row per feature (or aliased
topology family such as P/D) that the docs name, per platform, with its symbol and one sentence
in the docs' terms. ``ppconf report --claims-only`` renders it; docs-drift weighs the same cases."""

from __future__ import annotations

from dataclasses import dataclass

from harness.outcomes import WAIVER_KINDS

from .cells import EXPERIMENTAL, REJECTED, SUPPORTED, claim_symbol
from .drift import cases_about, subject_of


@dataclass
class FeatureClaim:
    platform: str
    name: str  # as the published docs name it (first alias), else the title
    symbol: str
    text: str


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def feature_claims(matrix, cases) -> list[FeatureClaim]:
    """One row per row of the published feature table (a feature, or an aliased topology family
    such as P/D, that the cases exercise), per platform, in the docs' terms: a symbol and one
    sentence with its qualifiers ("MiniMax-M3 only", an exception the guide is silent about, a
    known issue). Features the docs do not name as rows (no aliases) get no row."""
    rows = []
    titles = {k: f.title for k, f in matrix.families.items()}
    rules = {e.index: e.rule for e in matrix.rules}
    for platform in sorted({c.platform for c in cases}):
        mine = [c for c in cases if c.platform == platform]
        subjects = [(f.aliases[0], "feature", {name}) for name, f in matrix.features.items() if f.aliases]
        aliased: dict[str, set[str]] = {}
        for name, t in matrix.topologies.items():
            for alias in t.aliases[:1]:
                aliased.setdefault(alias, set()).add(name)
        subjects += [(alias, "topology", names) for alias, names in aliased.items()]
        for label, kind, keys in subjects:
            about = cases_about(matrix, kind, keys, mine)
            if not about:
                continue
            per: dict[str, list] = {}
            for c in about:
                per.setdefault(c.family, []).append(c)
            ok = sorted(f for f, cs in per.items() if any(claim_symbol(c.expectation) != REJECTED for c in cs))
            refused = sorted(f for f in per if f not in ok)
            silent = sorted(f for f in refused if all(c.expectation.undocumented for c in per[f]))
            rule_about = subject_of(matrix, kind, keys)[1]
            own = [c for c in about if c.expectation.rule is not None and rule_about(rules[c.expectation.rule].when)]
            waived = [c.expectation for c in own if c.expectation.kind in WAIVER_KINDS]
            # a refusal the guide does not state, where the row is otherwise supported
            unstated = [c for c in own if c.family in ok and c.expectation.undocumented]
            # the row's own claims say whether it is experimental (all of them), or in part (some)
            serving = [c for c in own if claim_symbol(c.expectation) != REJECTED]
            tentative = [c for c in serving if c.expectation.experimental]
            experimental = bool(tentative) and len(tentative) == len(serving)
            if not ok:
                symbol, text = REJECTED, "Not supported."
            else:
                symbol = EXPERIMENTAL if experimental else SUPPORTED
                named = [titles[f] for f in ok]
                documented_refusals = [f for f in refused if f not in silent]
                text = f"{_and(named)} only." if documented_refusals else "Supported."
                if silent:
                    text = text.rstrip(".") + (
                        f"; the guide is silent about {_and([titles[f] for f in silent])}, where it is refused."
                    )
                if tentative and not experimental:
                    text = text.rstrip(".") + f"; experimental in part ({tentative[0].expectation.why.rstrip('.')})."
                if unstated:
                    text = text.rstrip(".") + (
                        f"; not a claim of the guide: refused for {_and(sorted({titles[c.family] for c in unstated}))}"
                        f" ({unstated[0].expectation.why.rstrip('.')})."
                    )
                if waived:
                    w = waived[0]
                    text = text.rstrip(".") + (f"; {w.kind} (waives {', '.join(w.waives)}): {w.link}.")
            rows.append(FeatureClaim(platform, label, symbol, text))
    return rows
