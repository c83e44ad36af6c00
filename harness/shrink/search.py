"""The greedy search of ``ppconf shrink``, pure: it runs nothing itself.

A case's **shape** is what can be made smaller: each phase's sizes (requests, prompt_tokens,
max_tokens), the phases themselves, the stacked features, the topology (a smaller PP x TP among
the matrix's) and the model's hidden layers (a custom partition refit to them: a zero entry
stays zero, ``harness.cases.partition.fit_partition``). Every candidate changes one dimension
of the current shape:

- the whole traffic at its least at once (every phase but the sequential one dropped, one
  request of one token), first, when the original failed before any request was sent (a crash
  at startup): no traffic can matter then, and one run says so instead of one per size;
- a phase (not the sequential one, which every case is sent) or a feature dropped, or the
  topology swapped for a smaller one; a part whose drop did not fail the same way is needed,
  and is not dropped again from a smaller shape;
- a number bisected between the largest value known not to fail (its floor; one below its
  minimum at first) and its current, failing value: the midpoint is tried, and it becomes the
  new value if it fails the same way, the new floor if not. A number is done when no whole
  number lies between floor and value, or when the gap is within ``resolution`` of the value
  (0: exact; 0.25 stops a 192-token prompt within 48 tokens of its least failing length).

The oracle runs a candidate for real and says whether it **fails the same way** as the
original (``harness.shrink.failure``), or that it cannot tell (an ERROR, a launch refused),
which counts as not failing: a phase too small to be exercised shows nothing smaller would be.
Smaller in one dimension is assumed to make a failure no likelier, so a floor or a needed part
found once stays so. The search keeps the first candidate that fails the same way and starts
over from it; it stops when no candidate of the current shape is left untried. Every try is
kept in the state (``Shrink``), saved after each, so a search that stopped resumes where it
was: a candidate already tried is never run again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.cases.partition import fit_partition, least_layers

STATE = "shrink.json"
# The suite's sequential requests are sent to every case: that phase is made smaller (fewer
# prompts, fewer tokens), never dropped.
SEQUENTIAL = "sequential"
SIZES = ("requests", "prompt_tokens", "max_tokens")  # of a phase, each at least 1
LEAST = {"requests": 1, "prompt_tokens": 1, "max_tokens": 1, "layers": 1}


def shape_key(shape: dict[str, Any]) -> str:
    """One string per shape: the state's key for a candidate already tried."""
    return json.dumps(shape, sort_keys=True)


@dataclass(frozen=True)
class Candidate:
    """One smaller shape and what it changed, in words (``phase concurrent: requests 8 -> 4``);
    ``dim`` names what it changed: a number it bisects (``phase concurrent: requests``,
    ``layers``) with its new ``value``, or a part it drops (``feature fault``, ``topology
    pp1-tp1``, ``phase long-prompt``)."""

    shape: dict[str, Any]
    change: str
    dim: str | None = None
    value: int | None = None


def label(phase: dict[str, Any]) -> str:
    """A phase's name in its workload (its kind unless named): dimensions are keyed by it, so
    dropping another phase moves nothing."""
    return phase.get("name") or phase["kind"]


def _numbers(shape: dict[str, Any]) -> list[tuple[str, int]]:
    out = [(f"phase {label(p)}: {k}", p[k]) for p in shape["phases"] for k in SIZES if isinstance(p.get(k), int)]
    if isinstance(shape.get("layers"), int):
        out.append(("layers", shape["layers"]))
    return out


def _counts(shape: dict[str, Any]) -> list[int] | None:
    """The shape's custom partition as layer counts (None for an auto split)."""
    partition = shape.get("partition")
    return [int(e) for e in partition.split(",")] if partition and partition != "auto" else None


def _set(shape: dict[str, Any], dim: str, value: int) -> dict[str, Any]:
    new = json.loads(json.dumps(shape))
    if dim == "layers":
        new["layers"] = value
        counts = _counts(shape)
        if counts is not None:  # the same stages, refit to the layers
            new["partition"] = ",".join(map(str, fit_partition(counts, value, len(counts))))
    else:
        name, k = dim[len("phase ") :].split(": ")
        next(p for p in new["phases"] if label(p) == name)[k] = value
    return new


def least(shape: dict[str, Any], dim: str) -> int:
    """The least value of ``dim``: one, or for the layers under a custom partition the fewest it
    refits to (one per stage with layers)."""
    counts = _counts(shape)
    if dim == "layers" and counts is not None:
        return max(1, least_layers(counts))
    return LEAST[dim.rsplit(" ", 1)[-1]]


def floor_of(dim: str, floors: dict[str, int], shape: dict[str, Any]) -> int:
    """The largest value of ``dim`` known not to fail (one below its least value at first)."""
    return floors.get(dim, least(shape, dim) - 1)


TRAFFIC = "traffic"  # the dimension of the candidate that sets the whole traffic to its least


def least_traffic(shape: dict[str, Any]) -> dict[str, Any]:
    """``shape`` with every phase but the sequential one dropped and that one one request of one
    token."""
    phases = [{**p, "requests": 1, "max_tokens": 1} for p in shape["phases"] if p["kind"] == SEQUENTIAL]
    return {**shape, "phases": phases}


def done(value: int, floor: int, resolution: float) -> bool:
    """Whether a number needs no more bisecting: nothing whole between floor and value, or a gap
    within ``resolution`` of the value."""
    return value - floor <= 1 or (value - floor) <= resolution * value


def candidates(
    shape: dict[str, Any],
    floors: dict[str, int],
    smaller_topologies: list[str],
    resolution: float = 0.0,
    needed: frozenset[str] = frozenset(),
    before_traffic: bool = False,
) -> list[Candidate]:
    """The candidates one step smaller than ``shape``, in the order they are tried: with
    ``before_traffic`` (the failure came before any request) the least traffic first, then whole
    parts dropped (they shrink the most per launch), then each number's midpoint. A part in
    ``needed`` (dropping it did not fail the same way before) is not dropped again."""
    out = []
    quiet = least_traffic(shape)
    if before_traffic and quiet != shape:
        out.append(Candidate(quiet, "traffic at its least (the failure came before any request)", TRAFFIC))
    phases = shape["phases"]
    droppable = [p for p in phases if p["kind"] != SEQUENTIAL]
    if len(droppable) > 1 or len(phases) > len(droppable):
        for p in droppable:
            new = {**shape, "phases": [q for q in phases if q is not p]}
            out.append(Candidate(new, f"phase {label(p)} dropped", f"phase {label(p)}"))
    for f in shape["features"]:
        new = {**shape, "features": [g for g in shape["features"] if g != f]}
        out.append(Candidate(new, f"feature {f} dropped", f"feature {f}"))
    for t in smaller_topologies:
        out.append(Candidate({**shape, "topology": t}, f"topology {shape['topology']} -> {t}", f"topology {t}"))
    out = [c for c in out if c.dim not in needed]
    for dim, value in _numbers(shape):
        floor = floor_of(dim, floors, shape)
        if done(value, floor, resolution):
            continue
        mid = (floor + 1 + value) // 2 if value - floor > 2 else floor + 1
        out.append(Candidate(_set(shape, dim, mid), f"{dim} {value} -> {mid}", dim, mid))
    return out


@dataclass(frozen=True)
class Try:
    """One candidate run: what it changed, its shape, whether it failed the same way, why, and
    where its run is."""

    change: str
    shape: dict[str, Any]
    same: bool | None  # None: the run said nothing of the product (a launch refused, an ERROR)
    why: str
    run_dir: str = ""
    dim: str | None = None
    value: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Try:
        return cls(**data)


@dataclass
class Shrink:
    """The state of one shrink: the original failure, the current smallest shape that fails the
    same way, and every try so far."""

    run_dir: str
    case: str
    signature: list[str]  # the original failure (``harness.shrink.failure.signature``)
    original: dict[str, Any]
    resolution: float = 0.0
    # the original failed before any request was sent (it never became ready): traffic is moot
    before_traffic: bool = False
    current: dict[str, Any] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)
    needed: list[str] = field(default_factory=list)  # parts whose drop did not fail the same way
    tries: list[Try] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.current = self.current or json.loads(json.dumps(self.original))

    def tried(self, shape: dict[str, Any]) -> Try | None:
        key = shape_key(shape)
        return next((t for t in self.tries if shape_key(t.shape) == key), None)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "tries": [t.to_json() for t in self.tries]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Shrink:
        return cls(**{**data, "tries": [Try.from_json(t) for t in data.get("tries", [])]})


Oracle = Callable[[Candidate, int], Try]  # a candidate and the try's number -> its try, run for real
Smaller = Callable[[dict[str, Any]], list[str]]  # a shape -> the topologies smaller than its own


def step(s: Shrink, oracle: Oracle, smaller: Smaller) -> Try | None:
    """Run the first untried candidate of the current shape and learn from it; None when every
    candidate has been tried (the search is over). A candidate tried before (a resumed search,
    or the same shape reached another way) is not run again: its try is taken as it was."""
    while True:
        found = candidates(s.current, s.floors, smaller(s.current), s.resolution, frozenset(s.needed), s.before_traffic)
        for c in found:
            t = s.tried(c.shape)
            fresh = t is None
            if t is None:
                t = oracle(c, len(s.tries) + 1)
                s.tries.append(t)
            if t.same:
                s.current = c.shape
                return t
            learn(s, c, t)
            if fresh:
                return t
            break  # learnt from a try made before: the candidates are not the same any more
        else:
            return None


def learn(s: Shrink, c: Candidate, t: Try) -> None:
    """What a candidate that did not fail the same way teaches: a dropped part is needed; a
    number's value is its new floor. A run that said nothing of the product (``t.same`` is None:
    an ERROR such as a phase not exercised, a launch refused) counts as not failing there too:
    a size too small to exercise the phase shows nothing smaller would."""
    if c.dim is None:
        return  # a change no later candidate repeats: nothing to learn
    if c.value is None:
        s.needed.append(c.dim)
    else:
        s.floors[c.dim] = max(floor_of(c.dim, s.floors, s.current), c.value)


def shrink(s: Shrink, oracle: Oracle, smaller: Smaller, save: Callable[[Shrink], None]) -> dict[str, Any]:
    """Step until nothing smaller is left to try, saving the state after each try; the smallest
    shape that failed the same way, and what the search did."""
    while step(s, oracle, smaller) is not None:
        save(s)
    save(s)
    kept = [t for t in s.tries if t.same]
    return {
        "case": s.case,
        "signature": s.signature,
        "original": s.original,
        "smallest": s.current,
        "run_dir": kept[-1].run_dir if kept else s.run_dir,
        "runs": len(s.tries),
        "kept": [t.change for t in kept],
    }


def load_or_start(directory: Path, fresh: Shrink) -> Shrink:
    """The saved state of a shrink of the same case in ``directory``, else ``fresh``."""
    path = directory / STATE
    if not path.is_file():
        return fresh
    saved = Shrink.from_json(json.loads(path.read_text(encoding="utf-8")))
    if (saved.run_dir, saved.case) != (fresh.run_dir, fresh.case):
        raise ValueError(f"{path} shrinks {saved.case} of {saved.run_dir}, not {fresh.case} of {fresh.run_dir}")
    return saved


def save(directory: Path, s: Shrink, force: bool = False) -> None:
    safe_write.write_text(directory / STATE, json.dumps(s.to_json(), indent=2) + "\n", force=force)
