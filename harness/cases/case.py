"""Cases and expectations: one point of an expanded matrix and what the matrix claims about it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, fields
from typing import Any

from harness.matrix.schema import Rule

# The attributes a rule condition may use, with their types (checked when the matrix loads).
ATTRIBUTES: dict[str, type] = {
    "suite": str,
    "platform": str,
    "family": str,
    "variant": str,
    "arch": str,
    "origin": str,
    "supports_pp": bool,
    "layers": int,
    "topology": str,
    "tp": int,
    "pp": int,
    "dp": int,
    "pcp": int,  # prefill context parallel size the case's flags give (1 without PCP)
    "nnodes": int,
    "backend": str,  # "mp", "ray", or "default" when vLLM chooses
    "devices": int,  # every device the case's launches use: TP x PP x PCP x DP (+ the decode instance)
    "pd": bool,
    "decode_tp": int,  # 0 when the case is not P/D
    "decode_pp": int,
    "decode_dp": int,
    "pd_tp_multiple": bool,  # prefill TP >= decode TP and a multiple of it (true when not P/D)
    "partition": str,  # "auto" or the VLLM_PP_LAYER_PARTITION string
    "custom_partition": bool,
    "partition_error": str,  # vLLM's rejection text for the partition, "" when accepted
    "partition_doc_error": str,  # the same under the Ascend guide's stricter rule
    "features": list,
    "feature": str,  # the whole stack, e.g. "mtp+graph-mode", or "none"
    # How the cluster's nodes are linked ("roce", "hccs", ... from the inventory's `network`),
    # "unknown" when the suite is expanded without a cluster (lint, claims-only reports).
    "network": str,
}


@dataclass(frozen=True)
class Expectation:
    """The claim for one case: the outcome of the first matching rule, with its reasons."""

    kind: str  # supported | rejected | unsupported-on-platform | known-issue | flaky | unspecified
    why: str = ""
    rule: int | None = None  # index of the rule in matrix order
    where: str = ""  # file:line of the rule
    link: str | None = None
    experimental: bool = False
    error: str | None = None
    phase: str | None = None
    within_s: float | None = None
    reason: str | None = None
    owner: str | None = None
    until: datetime.date | None = None
    waives: tuple[str, ...] = ()  # known-issue / flaky: the checks the waiver covers
    undocumented: bool = False  # the published guide is silent about this claim

    @classmethod
    def of_rule(cls, rule: Rule, index: int, where: str, error: str | None) -> Expectation:
        """The claim a rule makes: every field the rule shares with an expectation is taken as it
        is (a field added to both needs no copying here), then what is the case's own."""
        shared = {f.name: getattr(rule, f.name) for f in fields(cls) if f.name in Rule.model_fields}
        return cls(
            **shared
            | {
                "kind": rule.expect,
                "rule": index,
                "where": where,
                "error": error,
                "waives": tuple(rule.waives),
                "undocumented": not rule.documented,
            }
        )

    def to_json(self) -> dict[str, Any]:
        # only the unset defaults go: ``rule: 0`` (the first rule) and ``within_s: 0`` are values
        out = {k: v for k, v in self.__dict__.items() if not (v is None or v is False or v == "" or v == ())}
        if self.until is not None:
            out["until"] = self.until.isoformat()
        if self.waives:
            out["waives"] = list(self.waives)
        return out


UNSPECIFIED = Expectation(kind="unspecified", why="no rule of the matrix covers this case")


@dataclass(frozen=True)
class Case:
    id: str
    suite: str
    platform: str
    family: str
    variant: str
    topology: str
    partition: str
    features: tuple[str, ...]
    attrs: dict[str, Any] = field(hash=False, compare=False)
    expectation: Expectation = UNSPECIFIED
    group: int | None = None  # the suite group it was expanded from (its args and env apply)

    @property
    def model_key(self) -> str:
        """Cases of one model share its PP=1 accuracy baseline."""
        return f"{self.family}/{self.variant}"


def stack_id(features: tuple[str, ...] | list[str]) -> str:
    return "+".join(sorted(features)) if features else "none"


def case_id(family: str, variant: str, topology: str, partition: str, features: tuple[str, ...]) -> str:
    """Readable and stable: built only from the case's own coordinates, never from its position."""
    model = family if variant == "default" else f"{family}/{variant}"
    return f"{model}/{topology}/{partition}/{stack_id(features)}"
