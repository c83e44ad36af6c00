"""A shape of ``ppconf shrink`` (``harness.shrink.search``) as a case a run can launch: the
failing case's shape read from its matrix, and a candidate written as a matrix layer over it.

The layer keeps every name the case's claim is matched on: it replaces the case's suite (same
name) by one with a single group, the candidate's own, whose workload is the candidate's
phases and whose sequential prompts are the first of the suite's, as many as the candidate's;
with fewer layers it also replaces the case's family (same name) by one whose variant serves a
tiny zoo model rebuilt with that many layers (``zoo:PATH.json``), and a custom partition refit
to them and to the topology's PP size (``partition_of``). The rule that
decides the case's claim is the original's, unless the rule itself declares the workload (then
the layer could not change it, and ``shape_of`` refuses).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from harness import safe_write
from harness.cases.case import Case, case_id
from harness.cases.partition import fit_partition
from harness.cases.workload import declared, kind_of
from harness.matrix.load import Matrix
from harness.shrink.search import SEQUENTIAL
from harness.target.zoo import ZooError, spec_of

LAYER = "shrink.yaml"


class ShapeError(ValueError):
    """A case ``ppconf shrink`` cannot rewrite, and why."""


def _raw(m: Matrix, section: str, name: str) -> dict[str, Any]:
    """An entry of the matrix as its file writes it (the last layer that defines it)."""
    where = m.where.get((section, name))
    if where is None:
        raise ShapeError(f"{section} {name!r}: not found in the matrix files")
    path = m.files.get(where.file) or Path(where.file)
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))[section][name]


def _zoo(m: Matrix, case: Case) -> str | None:
    model = m.variant(case.family, case.variant).model
    return model[4:] if model.startswith("zoo:") else None


def shape_of(m: Matrix, case: Case) -> dict[str, Any]:
    """The failing case's shape: its phases with every size written out (a kind's defaults
    too), its features, topology, partition and, for a tiny zoo model with an auto partition or a
    custom one vLLM accepts, its layers (a partition vLLM refuses is not refit: its sum against
    the layers is the failure).
    The first phase is always the sequential one: the suite's prompts (``accuracy``), which
    every case is sent whether its workload names the phase or not, as requests and max_tokens."""
    phases, at = declared(m, case)
    if at is not None and at[0] == "rules":
        raise ShapeError(f"{case.id}: its workload is its rule's ({case.expectation.where}); shrink rewrites a suite's")
    pp = m.topologies[case.topology].pp
    accuracy = m.suite(case.suite).accuracy
    out = [{"kind": SEQUENTIAL, "requests": len(accuracy.prompts), "max_tokens": accuracy.max_tokens}]
    for p in phases:
        data = p.model_dump(mode="json", exclude_defaults=True)
        kind = kind_of(p)
        if p.kind == SEQUENTIAL:
            continue
        if kind.planned and p.explicit is None:
            s = kind.sizes(p, pp)
            data.update(requests=s.requests, prompt_tokens=s.prompt_tokens, max_tokens=s.max_tokens)
        out.append(data)
    layers = m.variant(case.family, case.variant).hidden_layers
    zoo = _zoo(m, case)
    return {
        "phases": out,
        "features": list(case.features),
        "topology": case.topology,
        "partition": case.partition,
        "layers": layers if zoo and not case.attrs.get("partition_error") else None,
    }


def smaller_topologies(m: Matrix, shape: dict[str, Any]) -> list[str]:
    """The matrix's topologies smaller than the shape's (fewer PP x TP ranks, neither larger) of
    the same nodes, data parallelism and executor (any executor for a single rank, which needs
    none), largest first."""
    cur = m.topologies[shape["topology"]]
    if cur.decode is not None:
        return []
    found = [
        (t.pp * t.tp, name)
        for name, t in m.topologies.items()
        if t.decode is None
        and t.pp <= cur.pp
        and t.tp <= cur.tp
        and t.pp * t.tp < cur.pp * cur.tp
        and (t.dp, t.nnodes, t.dp_mode) == (cur.dp, cur.nnodes, cur.dp_mode)
        and (t.backend == cur.backend or t.pp * t.tp == 1)
    ]
    return [name for _, name in sorted(found, reverse=True)]


def partition_of(m: Matrix, case: Case, shape: dict[str, Any]) -> str:
    """The candidate's partition: the shape's (refit to its layers by the search), refit again to
    the PP size of a smaller topology (auto for one stage: a matrix names no partition there);
    one the search does not refit (auto, or a partition vLLM refuses) as the case has it."""
    partition = shape.get("partition", case.partition)
    if partition == "auto" or shape.get("layers") is None:
        return partition
    counts = [int(e) for e in partition.split(",")]
    pp = m.topologies[shape["topology"]].pp
    if pp == 1:
        return "auto"
    return ",".join(map(str, fit_partition(counts, shape["layers"], pp))) if pp != len(counts) else partition


def case_of(m: Matrix, case: Case, shape: dict[str, Any]) -> str:
    """The id of the candidate's case."""
    partition = partition_of(m, case, shape)
    return case_id(case.family, case.variant, shape["topology"], partition, tuple(shape["features"]))


def write_layer(m: Matrix, case: Case, shape: dict[str, Any], out: Path) -> Path:
    """The candidate as a matrix layer in the directory ``out`` (over the case's matrices)."""
    out.mkdir(parents=True, exist_ok=True)
    suite = dict(_raw(m, "suites", case.suite))
    groups = suite.get("groups") or []
    group = dict(groups[case.group]) if case.group is not None and case.group < len(groups) else {}
    group.pop("toggles", None)
    sequential = next((p for p in shape["phases"] if p["kind"] == SEQUENTIAL), None)
    group.update(
        families=[case.family],
        topologies=[shape["topology"]],
        partitions=[partition_of(m, case, shape)],
        features=["+".join(sorted(shape["features"])) or "none"],
        workload=[{"kind": SEQUENTIAL}, *(p for p in shape["phases"] if p is not sequential)],
    )
    suite.update(groups=[group], mode="full")
    if sequential is not None:  # a shape without one keeps the suite's prompts as they are
        accuracy = m.suite(case.suite).accuracy
        n = sequential["requests"]
        suite["accuracy"] = {
            **(suite.get("accuracy") or {}),
            "prompts": accuracy.prompts[:n],
            "max_tokens": sequential["max_tokens"],
            "streamed": min(accuracy.streamed, n),
        }
    layer: dict[str, Any] = {"suites": {case.suite: suite}}
    layers = m.variant(case.family, case.variant).hidden_layers
    if shape.get("layers") is not None and shape["layers"] != layers:
        family = json.loads(json.dumps(_raw(m, "families", case.family)))
        variant = family["variants"][case.variant]
        variant["hidden_layers"] = shape["layers"]
        variant["model"] = f"zoo:{_rebuilt(_zoo(m, case) or '', shape['layers'], out).resolve()}"
        layer["families"] = {case.family: family}
    path = out / LAYER
    safe_write.write_text(path, yaml.safe_dump(layer, sort_keys=False))
    return path


def _rebuilt(name: str, layers: int, out: Path) -> Path:
    """A zoo spec file: the tiny model ``name`` with ``layers`` hidden layers (per-layer lists cut
    to them), the same seed, dtype and weights."""
    try:
        spec = spec_of(name)
    except ZooError as err:
        raise ShapeError(str(err)) from None
    config = spec.config_json()
    config["num_hidden_layers"] = layers
    for key in ("layer_types",):
        if isinstance(config.get(key), list):
            config[key] = config[key][:layers]
    config["ppconf"] = {"seed": spec.seed, "weights": spec.weights, "runner": spec.runner}
    path = out / f"{spec.name}-l{layers}.json"
    safe_write.write_text(path, json.dumps(config, indent=2) + "\n")
    return path
