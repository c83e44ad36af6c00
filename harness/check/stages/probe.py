"""Reading what the workers built, through the stage probe loaded into every worker
(``harness.target.worker_probe``): each rank's layer range, and per-stage cost for tuning."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.cases.partition import tuning_advice
from harness.check import logs
from harness.check.serving.live import LiveDeployment
from harness.check.stages.built import asked_drafter
from harness.results.result import Stages, Tuning, WorkerStage

PROBE_METHOD = "ppconf_stage_info"
TIMING_METHOD = "ppconf_stage_timing"
COST_METHOD = "ppconf_stage_cost"


@dataclass
class StageReading:
    """What the workers said they built and cost (or, without a probe, vLLM's log line of the split)."""

    partition: list[list[int]] | None = None
    source: str | None = None
    stages: Stages | None = None
    tuning: Tuning | None = None
    notes: list[str] = field(default_factory=list)


def start_timing(live: LiveDeployment) -> str | None:
    """Start timing every stage's forward passes; why it could not (None: started)."""
    try:
        live.stage_client.collective_rpc(TIMING_METHOD)
    except Exception as err:  # noqa: BLE001
        return f"stage timing unavailable ({type(err).__name__}: {err})"
    return None


def read_stages(live: LiveDeployment, timed: bool, tuning: bool) -> StageReading:
    """Each PP rank's [start, end) and what it built; with ``timed`` each worker's forward time
    since timing started, with ``tuning`` the advice for the next partition too."""
    reading = read_partition(live)
    if timed and reading.stages is not None:
        reading.stages, note = step_times(live, reading.stages)
        reading.notes += [note] if note else []
    if tuning and reading.partition:
        reading.tuning, note = stage_costs(live, reading.partition)
        reading.notes += [note] if note else []
    return reading


def read_partition(live: LiveDeployment) -> StageReading:
    """Each PP rank's [start, end) from the workers, with everything they said they built for
    ``harness.check.stages.built`` to judge; or from vLLM's log line when no probe answers."""
    try:
        stages = live.stage_client.collective_rpc(PROBE_METHOD)
        # one pipeline's split (DP rank 0's where several DP ranks answered; built.problems
        # compares the other ranks' with it)
        partition = [
            [s["start_layer"], s["end_layer"]]
            for s in sorted(stages, key=lambda s: s["rank"])
            if s["tp_rank"] == 0 and s.get("dp_rank") in (None, 0)
        ]
    except Exception as err:  # noqa: BLE001
        note = f"stage probe unavailable ({type(err).__name__}: {err}); partition from logs"
    else:
        reading = StageReading(partition, "workers (collective_rpc)")
        method, draft_tp = asked_drafter(live.deployment.launch(live.deployment.api).argv)
        try:
            workers = [WorkerStage.model_validate(s) for s in stages]
        except ValueError as err:  # pydantic's ValidationError: an answer of another probe version
            reading.notes.append(f"stage probe answers not judged ({err.__class__.__name__}: {err})")
            return reading
        reading.stages = Stages(workers=workers, draft_method=method, draft_tp=draft_tp)
        return reading
    reading = StageReading(notes=[note])
    line = logs.search(live.log_paths, r"Hidden layers were unevenly partitioned: \[")
    if line:
        counts = [int(x) for x in line.text.split("[", 1)[1].split("]", 1)[0].split(",")]
        starts = [sum(counts[:i]) for i in range(len(counts))]
        reading.partition = [[s, s + n] for s, n in zip(starts, counts, strict=True)]
        reading.source = f"log ({line.log}:{line.line})"
    return reading


def stage_costs(live: LiveDeployment, partition: list[list[int]]) -> tuple[Tuning | None, str | None]:
    """Each stage's mean forward time (its slowest TP rank) and peak memory over the requests
    just made, and the guide's advice for the next partition; or why there is none."""
    try:
        costs = live.stage_client.collective_rpc(COST_METHOD)
    except Exception as err:  # noqa: BLE001
        return None, f"partition tuning: stage costs unavailable ({type(err).__name__}: {err})"
    if any(start is None or end is None for start, end in partition):
        return None, None
    counts = [end - start for start, end in partition]
    step: list[float | None] = [None] * len(counts)
    peak: list[int | None] = [None] * len(counts)
    for c in costs:
        i = c["pp_rank"]
        if i < len(counts):
            if c.get("step_s") is not None:
                step[i] = max(step[i] or 0.0, c["step_s"])
            if c.get("peak_memory_bytes") is not None:
                peak[i] = max(peak[i] or 0, c["peak_memory_bytes"])
    advice = tuning_advice(counts, step, peak)
    advice["steps"] = sorted({c.get("steps", 0) for c in costs})
    advice["memory_source"] = sorted({c.get("memory_source", "") for c in costs})
    return Tuning.of(advice), None


def step_times(live: LiveDeployment, stages: Stages) -> tuple[Stages, str | None]:
    """``stages`` with each worker's mean forward time and peak memory since timing started."""
    try:
        costs = {(c.get("dp_rank"), c["rank"]): c for c in live.stage_client.collective_rpc(COST_METHOD)}
    except Exception as err:  # noqa: BLE001
        return stages, f"stage costs unavailable ({type(err).__name__}: {err})"
    workers = []
    for w in stages.workers:
        c = costs.get((w.dp_rank, w.rank)) or {}
        update: dict[str, Any] = {}
        if c.get("step_s") is not None:
            update["step_ms"] = round(c["step_s"] * 1000, 3)
        if c.get("peak_memory_bytes") is not None:
            update["peak_memory_bytes"] = c["peak_memory_bytes"]
        workers.append(w.model_copy(update=update))
    return stages.model_copy(update={"workers": workers}), None


def start_stage_timing(live: LiveDeployment) -> bool:
    """Start timing every stage's forward passes afresh; False where no stage probe answers."""
    try:
        live.stage_client.collective_rpc(TIMING_METHOD)
    except Exception:  # noqa: BLE001 — without the probe a phase simply has no stage figures
        return False
    return True


def stage_busy(live: LiveDeployment, wall_s: float, pp: int, in_flight: float | None) -> dict[str, Any]:
    """Each stage's busy fraction of the last ``wall_s`` seconds (its slowest TP rank's forward
    time), the measured bubble (1 − their mean) and the model's (PP−1)/(PP−1+M) for the ``M``
    requests measured in flight; {} where the probe does not answer."""
    try:
        costs = live.stage_client.collective_rpc(COST_METHOD)
    except Exception:  # noqa: BLE001
        return {}
    busy = [0.0] * pp
    for c in costs:
        i = c.get("pp_rank", 0)
        if i < pp and c.get("step_s") is not None:
            busy[i] = max(busy[i], c["step_s"] * c.get("steps", 0))
    if wall_s <= 0:
        return {}
    util = [round(min(1.0, b / wall_s), 4) for b in busy]
    out: dict[str, Any] = {"stage_utilisation": util, "bubble": round(1 - sum(util) / pp, 4)}
    if in_flight:
        out["bubble_model"] = round((pp - 1) / (pp - 1 + in_flight), 4)
    return out
