"""Expanding a suite into cases, and resolving each case's expectation from the rules.

A suite is a list of groups; each group is a product of dimensions — model variant, topology,
partition, explicit feature stack, and one on/off dimension per toggled feature — expanded in
full, or as a pairwise covering array. Combinations that cannot exist (more devices than the
suite allows, a world size the node count does not divide, a custom partition without PP, a
feature without the feature it requires, two features that conflict) are left out; combinations
that can exist but are expected to fail (a wrong partition, a model without SupportsPP) stay in
and are judged against the rules.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.cases import pairwise
from harness.cases.case import UNSPECIFIED, Case, case_id, claim_of, stack_id
from harness.cases.merge import instance_features, matrix_layers, merge, pcp_size
from harness.cases.partition import partition_error
from harness.matrix import condition as cond
from harness.matrix.attributes import ATTRIBUTES
from harness.matrix.load import Matrix
from harness.matrix.schema import Feature, Group, Suite, Variant
from harness.matrix.source import MatrixError, SourceError, suggest
from harness.target.hf_config import layers_in
from harness.target.model_config import LayerCounts

FULL_LIMIT = 1_000_000


@dataclass(frozen=True)
class Expansion:
    suite: str
    cases: tuple[Case, ...]
    summary: str
    pairs_covered: int = 0
    pairs_possible: int = 0
    full_product: int = 0


@dataclass(frozen=True)
class _Dims:
    variants: list[tuple[str, str]]
    topologies: list[str]
    partitions: list[str]
    stacks: list[tuple[str, ...]]
    toggles: list[str]

    @property
    def sizes(self) -> list[int]:
        return [len(self.variants), len(self.topologies), len(self.partitions), len(self.stacks)] + [2] * len(
            self.toggles
        )


def _group_dims(m: Matrix, suite_name: str, suite: Suite, gi: int, group: Group) -> _Dims:
    variants: list[tuple[str, str]] = []
    for ref in group.families:
        fams = sorted(m.families) if ref == "*" else [ref.partition("/")[0]]
        for fam in fams:
            wanted = ref.partition("/")[2]
            for vname, v in m.families[fam].variants.items():
                if wanted not in ("", "*") and vname != wanted:
                    continue
                if v.platforms and suite.platform not in v.platforms:
                    continue
                if (fam, vname) not in variants:
                    variants.append((fam, vname))
    stacks = [tuple(sorted(set() if s == "none" else set(s.split("+")))) for s in group.features]
    dims = _Dims(variants, list(group.topologies), list(group.partitions), stacks, list(group.toggles))
    if not variants:
        raise MatrixError(
            [
                SourceError(
                    m.where.get(("suites", suite_name)),
                    f"suites.{suite_name}.groups[{gi}]: no variant of {group.families} "
                    f"runs on platform '{suite.platform}'",
                )
            ]
        )
    return dims


def _allowed(m: Matrix, suite_name: str, suite: Suite, gi: int, dims: _Dims) -> Callable[[Mapping[int, int]], bool]:
    features = m.features
    group = suite.groups[gi]
    sides = [set(side.skip_features) if side else set() for side in (group.prefill, group.decode)]

    def allowed(p: Mapping[int, int]) -> bool:
        on: set[str] = set()
        known_off: set[str] = set()
        if 3 in p:
            on.update(dims.stacks[p[3]])
        for i, name in enumerate(dims.toggles):
            if 4 + i in p:
                (on if p[4 + i] else known_off).add(name)
        if 1 in p:
            topo = m.topologies[dims.topologies[p[1]]]
            # PCP multiplies the world (features switched on so far can only add to it)
            pcp = _pcp(m, suite_name, suite, gi, tuple(sorted(on))) if on or suite.args or suite.groups[gi].args else 1
            if suite.max_devices is not None and _devices(topo, pcp) > suite.max_devices:
                return False
            if (topo.world * pcp) % topo.nnodes:
                return False
            if 2 in p and topo.pp == 1 and dims.partitions[p[2]] != "auto":
                return False
        all_known = 3 in p and all(4 + i in p for i in range(len(dims.toggles)))
        # exclusive and conflicting features are checked where they run together: on one
        # instance (a P/D side runs the stack without its skip_features), so an eager prefill
        # and a graph-mode decode make one case; before the topology is known, per side
        pd = 1 not in p or m.topologies[dims.topologies[p[1]]].decode is not None
        if not all(_compatible(features, stack) for stack in ([on - skip for skip in sides] if pd else [on])):
            return False
        for name in on:
            f = features[name]
            for req in f.requires:
                # decidable early when no toggle could still switch the requirement on
                can_come = req in dims.toggles and req not in known_off
                if req not in on and (not can_come and (3 in p or req in known_off) or all_known):
                    return False
        return True

    return allowed


def _compatible(features: Mapping[str, Feature], stack: set[str]) -> bool:
    """No two features of one instance's stack conflict or share an exclusive group."""
    groups: set[str] = set()
    for name in stack:
        f = features[name]
        if any(c in stack for c in f.conflicts):
            return False
        if f.exclusive:
            if f.exclusive in groups:
                return False
            groups.add(f.exclusive)
    return True


def _pcp(m: Matrix, suite_name: str, suite: Suite, gi: int, feats: tuple[str, ...]) -> int:
    # the variant's flags cannot change the PCP size a stack gives; any variant of the suite will do

    fam = next(
        f
        for f, fam in m.families.items()
        for v in fam.variants.values()
        if not v.platforms or suite.platform in v.platforms
    )
    var = next(n for n, v in m.families[fam].variants.items() if not v.platforms or suite.platform in v.platforms)
    return pcp_size(m, suite.platform, fam, var, feats, suite_name, gi)


def _devices(t, pcp: int) -> int:
    return t.world * pcp + (t.decode.tp * t.decode.pp * t.decode.dp if t.decode else 0)


def _attrs(
    m: Matrix,
    suite_name: str,
    suite: Suite,
    gi: int,
    fam: str,
    var: str,
    topo_name: str,
    partition: str,
    feats: tuple[str, ...],
    layers: Callable[[Variant], int | None],
    network: str,
) -> dict:

    v = m.variant(fam, var)
    t = m.topologies[topo_name]
    part = None if partition == "auto" else partition
    merged = merge(matrix_layers(m, suite.platform, fam, var, feats, suite_name, gi))
    # a model shrunk with --hf-overrides {"num_hidden_layers": N} is partitioned as N layers
    n = layers_in(merged.configs.get("hf-overrides", {})) or layers(v) or 0  # 0: unknown, only auto can be claimed
    if part is not None and not n:
        where = getattr(layers, "where", {}).get(v.model, f"{v.model}/config.json")
        raise MatrixError(
            [
                SourceError(
                    m.where.get(("suites", suite_name)),
                    f"suites.{suite_name}: {fam}/{var} with the custom partition {partition!r}: "
                    f"its hidden-layer count is unknown (no hidden_layers in the matrix, and none "
                    f"in {where}); state hidden_layers, make the config readable, or claim only "
                    f"the auto partition",
                )
            ]
        )
    pcp = merged.pcp
    return {
        "suite": suite_name,
        "platform": suite.platform,
        "family": fam,
        "variant": var,
        "arch": v.architecture,
        "origin": v.origin,
        "supports_pp": v.supports_pp,
        "mla": v.mla,
        "layers": n,
        "topology": topo_name,
        "tp": t.tp,
        "pp": t.pp,
        "dp": t.dp,
        "pcp": pcp,
        "nnodes": t.nnodes,
        "backend": t.backend or "default",
        "devices": _devices(t, pcp),
        "pd": t.decode is not None,
        "decode_tp": t.decode.tp if t.decode else 0,
        "decode_pp": t.decode.pp if t.decode else 0,
        "decode_dp": t.decode.dp if t.decode else 0,
        "dp_mode": t.dp_mode or "",
        "decode_dp_mode": (t.decode.dp_mode or "") if t.decode else "",
        "pd_tp_multiple": t.decode is None or (t.tp >= t.decode.tp and t.tp % t.decode.tp == 0),
        "partition": partition,
        "custom_partition": part is not None,
        "partition_error": partition_error(n, t.pp, part, "upstream") if n else "",
        "partition_doc_error": partition_error(n, t.pp, part, "ascend-doc") if n else "",
        "features": list(feats),
        "feature": stack_id(feats),
        # what each instance of a P/D pair runs: the stack without that side's skip_features
        "prefill_features": instance_features(m, feats, suite_name, gi, "prefill") if t.decode else [],
        "decode_features": instance_features(m, feats, suite_name, gi, "decode") if t.decode else [],
        "network": network,
    }


def _case(
    m: Matrix,
    suite_name: str,
    suite: Suite,
    gi: int,
    dims: _Dims,
    row: tuple[int, ...],
    layers: Callable[[Variant], int | None],
    network: str,
) -> Case:
    fam, var = dims.variants[row[0]]
    topo = dims.topologies[row[1]]
    partition = dims.partitions[row[2]]
    feats = set(dims.stacks[row[3]])
    feats.update(name for i, name in enumerate(dims.toggles) if row[4 + i])
    features = tuple(sorted(feats))
    return Case(
        id=case_id(fam, var, topo, partition, features),
        suite=suite_name,
        platform=suite.platform,
        family=fam,
        variant=var,
        topology=topo,
        partition=partition,
        features=features,
        attrs=_attrs(m, suite_name, suite, gi, fam, var, topo, partition, features, layers, network),
        group=gi,
    )


def expand(
    m: Matrix, suite_name: str, layers: Callable[[Variant], int | None] | None = None, network: str | None = None
) -> Expansion:
    """All cases of a suite, each with its expectation resolved. ``layers`` gives a variant's
    hidden-layer count where the matrix does not (default: read from the model's config.json
    where this host can read it, ``harness.target.model_config``). ``network`` (default: that of
    the cluster ``layers`` reads from) is the cluster's link type; with no cluster it is
    "unknown", so a rule about a link type decides a case only where the rule also names "unknown"."""
    suite = m.suite(suite_name)
    layers = layers or LayerCounts()
    network = network or getattr(layers, "network", None) or "unknown"
    cases: dict[str, Case] = {}
    covered = possible = product = 0
    for gi, group in enumerate(suite.groups):
        dims = _group_dims(m, suite_name, suite, gi, group)
        allowed = _allowed(m, suite_name, suite, gi, dims)
        size = math.prod(dims.sizes)
        product += size
        if suite.mode == "pairwise":
            cov = pairwise.covering_array(dims.sizes, allowed, seed=suite.seed)
            rows = list(cov.rows)
            covered += cov.pairs_covered
            possible += cov.pairs_possible
        else:
            if size > FULL_LIMIT:
                raise MatrixError(
                    [
                        SourceError(
                            m.where.get(("suites", suite_name)),
                            f"suites.{suite_name}.groups[{gi}]: the full product has {size:,} "
                            f"combinations (limit {FULL_LIMIT:,}); use mode: pairwise",
                        )
                    ]
                )
            rows = [r for r in itertools.product(*(range(n) for n in dims.sizes)) if allowed(dict(enumerate(r)))]
        for row in rows:
            case = _case(m, suite_name, suite, gi, dims, row, layers, network)
            _same_sides(m, suite_name, cases.setdefault(case.id, case), case)
    resolved = tuple(resolve(m, c) for c in cases.values())
    if suite.mode == "pairwise":
        summary = (
            f"{suite_name}: pairwise, {len(resolved)} cases cover {covered}/{possible} possible pairs "
            f"(full product: {product:,})"
        )
    else:
        summary = f"{suite_name}: full, {len(resolved)} cases (product {product:,}, impossible ones left out)"
    return Expansion(suite_name, resolved, summary, covered, possible, product)


def _same_sides(m: Matrix, suite_name: str, kept: Case, case: Case) -> None:
    """One id is one case: two groups giving it with other features on a P/D side (one skips a
    feature the other runs there) would be two deployments under one name."""
    sides = ("prefill_features", "decode_features")
    if any(kept.attrs[k] != case.attrs[k] for k in sides):
        runs = "; ".join(
            f"groups[{c.group}] runs prefill {c.attrs['prefill_features']}, decode {c.attrs['decode_features']}"
            for c in (kept, case)
        )
        raise MatrixError(
            [
                SourceError(
                    m.where.get(("suites", suite_name)),
                    f"suites.{suite_name}: the case {case.id} comes from two groups with different P/D "
                    f"sides ({runs}); give one of them another feature stack or another topology",
                )
            ]
        )


def matching_rule(m: Matrix, case: Case):
    for entry in m.rules:
        if entry.condition.evaluate(case.attrs):
            return entry
    return None


def resolve(m: Matrix, case: Case) -> Case:
    entry = matching_rule(m, case)
    if entry is None:
        return case.model_copy(update={"expectation": UNSPECIFIED})
    r = entry.rule
    error = r.error
    if error is not None and "{partition_error}" in error:
        # the oracle's exact rejection text, escaped, where the rule asks for it
        text = case.attrs["partition_error"]
        if not text:
            # an empty pattern matches every log line: any failure would pass as this rejection
            raise MatrixError(
                [
                    SourceError(
                        entry.where,
                        f"rule {entry.index}: error {r.error!r} uses "
                        f"{{partition_error}}, but the case {case.id} has a partition "
                        f"vLLM accepts, so the pattern would match any line; narrow "
                        f'`when` to cases with partition_error != ""',
                    )
                ]
            )
        error = error.replace("{partition_error}", re.escape(text))
    return case.model_copy(update={"expectation": claim_of(r, entry.index, str(entry.where), error)})


def _case_hint(case_id: str, cases: list[Case]) -> str:
    """The closest id, else the ids it begins, else where the ids are listed."""
    ids = [c.id for c in cases]
    hint = suggest(case_id, ids) or next((f" (did you mean '{i}'?)" for i in ids if i.startswith(case_id)), "")
    suites = sorted({c.suite for c in cases})
    if hint or not suites:
        return hint
    return f"; `ppconf expand --suite {suites[0]}` lists its {len(ids)} cases" if len(suites) == 1 else ""


def select(cases: tuple[Case, ...] | list[Case], ids: list[str] | None = None, expr: str | None = None) -> list[Case]:
    """Cases by exact id and/or by a condition over case attributes (the rule language)."""
    chosen = list(cases)
    if ids:
        known = {c.id: c for c in chosen}
        missing = [i for i in ids if i not in known]
        if missing:
            raise MatrixError([SourceError(None, f"unknown case '{i}'{_case_hint(i, chosen)}") for i in missing])
        chosen = [known[i] for i in ids]
    if expr:
        condition = cond.parse(expr, dict(ATTRIBUTES))
        chosen = [c for c in chosen if condition.evaluate(c.attrs)]
    return chosen
