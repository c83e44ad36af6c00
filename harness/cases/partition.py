"""The partition oracle: which [start, end) of the target model's hidden layers each PP rank builds.

Two rule sets, because implementation and documentation disagree:
  * ``upstream``   — exactly vLLM's ``get_pp_indices`` (vllm/distributed/utils.py): the
    ``VLLM_PP_LAYER_PARTITION`` string is parsed with Python's ``int()`` per comma-separated
    entry, its count must equal the PP size and its sum the number of hidden layers. Zero and
    negative entries are accepted. Auto split gives ``L // P`` layers per stage and hands the
    remainder to stages P-2, P-3, … so the last stage (norm, LM head, sampler) never gets more.
  * ``ascend-doc`` — the vllm-ascend PP guide additionally requires every entry to be a positive
    integer.

Error texts are vLLM's own, so an expected-rejection rule can match the server's log line with
the same words the oracle produces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Rules = Literal["upstream", "ascend-doc"]
RULE_SETS: tuple[str, ...] = ("upstream", "ascend-doc")


class PartitionError(ValueError):
    """A partition the chosen rule set rejects; the message is the text vLLM (or the guide) uses."""


# Far beyond any real model or cluster; past them the oracle would only build huge lists.
MAX_LAYERS = 100_000
MAX_PP = 4096


def auto_partition(num_layers: int, pp_size: int) -> list[int]:
    if not 1 <= pp_size <= MAX_PP:
        raise PartitionError(f"pp_size must be from 1 to {MAX_PP}, got {pp_size}.")
    if num_layers < 0:
        raise PartitionError(f"num_hidden_layers must not be negative, got {num_layers}.")
    parts = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        parts[-i] += 1
    return parts


def parse_partition(text: str, num_layers: int, pp_size: int, rules: Rules = "upstream") -> list[int]:
    """Layer counts per stage for a custom partition string, validated as ``rules`` says."""
    if rules not in RULE_SETS:
        raise ValueError(f"unknown partition rule set {rules!r}; expected one of {', '.join(RULE_SETS)}")
    try:
        # int() per entry, as vLLM does: " 3" and "+3" pass, "3.0", "" and a trailing comma fail.
        parts = [int(entry) for entry in text.split(",")]
    except ValueError as err:
        raise PartitionError(f"Invalid partition string: {text}") from err
    if len(parts) != pp_size:
        raise PartitionError(f"len(partitions)={len(parts)} does not match pp_size={pp_size}.")
    if sum(parts) != num_layers:
        raise PartitionError(f"sum(partitions)={sum(parts)} does not match num_hidden_layers={num_layers}.")
    if rules == "ascend-doc":
        bad = [p for p in parts if p <= 0]
        if bad:
            raise PartitionError(f"every partition entry must be a positive integer, got {bad[0]} in {text!r}.")
    return parts


def layer_counts(num_layers: int, pp_size: int, partition: str | None = None, rules: Rules = "upstream") -> list[int]:
    if partition is None or partition == "auto":
        return auto_partition(num_layers, pp_size)
    return parse_partition(partition, num_layers, pp_size, rules)


def stage_ranges(
    num_layers: int, pp_size: int, partition: str | None = None, rules: Rules = "upstream"
) -> list[tuple[int, int]]:
    """Per-rank ``[start, end)``; ``partition`` is None/"auto" or a VLLM_PP_LAYER_PARTITION string."""
    ranges = []
    start = 0
    for count in layer_counts(num_layers, pp_size, partition, rules):
        ranges.append((start, start + count))
        start += count
    return ranges


def partition_error(num_layers: int, pp_size: int, partition: str | None, rules: Rules = "upstream") -> str:
    """The rejection text for this partition under ``rules``, or "" when it is accepted."""
    try:
        stage_ranges(num_layers, pp_size, partition, rules)
    except PartitionError as err:
        return str(err)
    return ""


def least_layers(counts: Sequence[int]) -> int:
    """The fewest hidden layers ``fit_partition`` can refit ``counts`` to: one per positive entry,
    and what the others (zero or negative) hold as they are."""
    return sum(1 if c > 0 else c for c in counts)


def fit_partition(counts: Sequence[int], num_layers: int, pp_size: int) -> list[int]:
    """``counts`` (a valid custom partition) refit to ``num_layers`` layers over ``pp_size <=
    len(counts)`` stages, keeping what sets it apart from an auto split: an entry of zero (or
    below) stays as it is for as long as a stage with layers is left, and every positive entry
    keeps at least one layer, the rest shared in proportion (largest remainders first). Fewer
    stages merge the last positive entry into the one before it while there are two, else drop
    the last non-positive one: ``[0, 5]`` to 3 layers is ``[0, 3]``, over one stage ``[3]``."""
    parts = list(counts)
    if not 1 <= pp_size <= len(parts):
        raise PartitionError(f"pp_size={pp_size}: a partition of {len(parts)} stages refits to 1 to {len(parts)}.")
    while len(parts) > pp_size:
        positive = [i for i, c in enumerate(parts) if c > 0]
        if len(positive) > 1:
            last = positive[-1]
            parts[positive[-2]] += parts.pop(last)
        else:
            parts.pop(max(i for i, c in enumerate(parts) if c <= 0))
    positive = [i for i, c in enumerate(parts) if c > 0]
    held = sum(c for c in parts if c <= 0)
    if not positive or num_layers < least_layers(parts):
        raise PartitionError(f"{','.join(map(str, counts))} cannot be refit to {num_layers} layers.")
    total, want = sum(parts[i] for i in positive), num_layers - held
    shares = {i: parts[i] * want / total for i in positive}
    for i in positive:
        parts[i] = max(1, int(shares[i]))
    by_remainder = sorted(positive, key=lambda i: (-(shares[i] - int(shares[i])), i))
    while sum(parts) < num_layers:
        parts[by_remainder[0]] += 1
        by_remainder = by_remainder[1:] + by_remainder[:1]
    while sum(parts) > num_layers:  # the floor of one per entry overshot: take from the largest
        parts[max(positive, key=lambda i: (parts[i], -i))] -= 1
    return parts


def propose_rebalance(counts: list[int], stage_cost: list[float]) -> list[int] | None:
    """The guide's tuning step: move one layer from the slowest stage toward a cheaper neighbour.

    ``stage_cost`` is a per-stage measure (peak memory or step latency). Returns the next layer
    counts to try, or None when the slowest stage cannot give a layer away.
    """
    if len(counts) != len(stage_cost) or len(counts) < 2:
        raise ValueError("need one cost per stage and at least two stages")
    slowest = max(range(len(counts)), key=lambda i: (stage_cost[i], i))
    if counts[slowest] <= 1:
        return None
    neighbours = [i for i in (slowest - 1, slowest + 1) if 0 <= i < len(counts)]
    target = min(neighbours, key=lambda i: (stage_cost[i], -i))
    proposal = list(counts)
    proposal[slowest] -= 1
    proposal[target] += 1
    return proposal


BALANCED = 0.05  # stages within 5% of each other are left as they are


def _costliest(costs: Sequence[float | int | None]) -> int:
    return max(range(len(costs)), key=lambda i: (costs[i] or 0, i))


def _receiver(counts: list[int], proposal: str) -> int:
    """The stage a proposed partition gives the moved layer to."""
    return next(i for i, (n, m) in enumerate(zip(counts, map(int, proposal.split(",")), strict=True)) if m > n)


def reconcile(
    counts: list[int],
    step_s: list[float | None],
    peak_bytes: list[int | None],
    by_time: dict,
    by_memory: dict,
) -> dict:
    """One next partition from the two advices, or why there is none. Agreeing advices, or one
    where the other measure is balanced or unmeasured, give their move. Two different moves: the
    forward time's, unless it hands the layer to the stage holding the most memory (the slowest
    stage bounds the pipeline, and the guide warns against choosing a partition by memory alone);
    then the memory's, unless that hands it to the slowest stage; else they disagree, and the
    advice says how."""
    t, m = by_time.get("next"), by_memory.get("next")
    if t and t == m:
        return {"next": t, "why": f"forward time and memory agree: {by_time['why']}"}
    if not (t and m):
        if not (t or m):
            return {"next": None, "why": f"no move: by forward time {by_time['why']}; by memory {by_memory['why']}"}
        basis, chosen, other = ("forward time", by_time, by_memory) if t else ("memory", by_memory, by_time)
        return {"next": t or m, "why": f"by {basis}: {chosen['why']} (by the other measure: {other['why']})"}
    slowest, heaviest = _costliest(step_s), _costliest(peak_bytes)
    if _receiver(counts, t) != heaviest:
        return {
            "next": t,
            "why": f"by forward time {t} (stage {slowest} is the slowest), not memory's {m}: the move leaves stage "
            f"{heaviest}, which holds the most memory, as it is, and the slowest stage bounds the pipeline",
        }
    if _receiver(counts, m) != slowest:
        return {
            "next": m,
            "why": f"by memory {m} (stage {heaviest} holds the most), not forward time's {t}, which would give "
            f"stage {heaviest} another layer; the memory move leaves the slowest stage {slowest} as it is",
        }
    return {
        "next": None,
        "why": f"the advices disagree: by forward time stage {slowest} is the slowest and should give a layer to "
        f"stage {heaviest} ({t}), by memory stage {heaviest} holds the most and should give one to stage "
        f"{slowest} ({m}); each move worsens the other measure. Decide by what limits the deployment (an OOM: "
        f"memory; throughput: forward time) and measure again",
    }


def tuning_advice(counts: list[int], step_s: list[float | None], peak_bytes: list[int | None]) -> dict:
    """The guide's tuning advice for one served partition, from each stage's mean forward time and
    peak memory: the stages, the next partition to try by time (a stage slower than the others by
    more than BALANCED gives one layer to its cheaper neighbour) and by memory (the same for the
    stage holding the most), and the two reconciled into one (``reconcile``)."""
    stages = [
        {
            "stage": i,
            "layers": n,
            "step_ms": round(t * 1000, 3) if t is not None else None,
            "peak_mib": round(m / 2**20, 1) if m is not None else None,
        }
        for i, (n, t, m) in enumerate(zip(counts, step_s, peak_bytes, strict=True))
    ]
    out: dict = {"stages": stages, "partition": ",".join(map(str, counts))}
    for key, measured in (("by_step_time", step_s), ("by_memory", peak_bytes)):
        costs: list[float] = [c for c in measured if c is not None]
        if len(counts) < 2 or len(costs) < len(measured) or not min(costs):
            out[key] = {"next": None, "why": "not measured on every stage"}
            continue
        spread = max(costs) / min(costs) - 1
        if spread <= BALANCED:
            out[key] = {"next": None, "why": f"balanced: stages within {spread:.1%} of each other"}
            continue
        nxt = propose_rebalance(counts, [float(c) for c in costs])
        slowest = max(range(len(costs)), key=lambda i: (costs[i], i))
        if nxt is None:
            out[key] = {"next": None, "why": f"stage {slowest} is the costliest but has a single layer"}
        else:
            out[key] = {
                "next": ",".join(map(str, nxt)),
                "why": f"stage {slowest} is the costliest ({spread:.1%} above the cheapest): "
                f"try VLLM_PP_LAYER_PARTITION={','.join(map(str, nxt))}",
            }
    out["advice"] = reconcile(counts, step_s, peak_bytes, out["by_step_time"], out["by_memory"])
    return out
