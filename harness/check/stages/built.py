"""Judging what each stage built, from the stage probe's answers (``Stages``), against the guide:
each rank holds exactly its ``[start, end)`` layers and no weights of the others; the drafter
lives on the last PP stage only, whole (not partitioned), with the draft TP size the case asked
for; every layer a drafter taps (DSpark's ``dspark_target_layer_ids``) is collected by the stage
it lives on, so the taps of earlier stages are relayed to the drafter on the last one; and, where
the claim says so, each output module (embedding, final norm, LM head) is built on its stage only.
The answers read alike from vLLM's V1 and V2 model runners (the probe tells them by layout)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.results.result import Stages, WorkerStage

SPEC_FLAG = "--speculative-config"


def asked_drafter(argv: Sequence[str]) -> tuple[str | None, int | None]:
    """(method, draft_tensor_parallel_size) of the launch's ``--speculative-config``; (None, None)
    without one (or with a value that is not a JSON object: the engine refuses that itself)."""
    raw = None
    for i, word in enumerate(argv):
        if word == SPEC_FLAG and i + 1 < len(argv):
            raw = argv[i + 1]
        elif word.startswith(SPEC_FLAG + "="):
            raw = word.split("=", 1)[1]
    try:
        spec = json.loads(raw) if raw else None
    except ValueError:
        return None, None
    if not isinstance(spec, dict):
        return None, None
    method, tp = spec.get("method"), spec.get("draft_tensor_parallel_size")
    return (str(method) if method else "speculative decoding"), (tp if isinstance(tp, int) else None)


def _where(w: WorkerStage) -> str:
    dp = "" if w.dp_rank is None else f"DP rank {w.dp_rank}, "
    return f"rank {w.rank} ({dp}PP stage {w.pp_rank} of {w.pp_size}, TP rank {w.tp_rank})"


def _span(layers: list[int]) -> str:
    return ", ".join(map(str, layers))


def _layers(w: WorkerStage, expected: list[list[int]]) -> list[str]:
    # only a stack that records its pipeline range is surely the target's decoder stack
    if w.built_layers is None or w.start_layer is None or w.pp_rank >= len(expected):
        return []
    start, end = expected[w.pp_rank]
    want = set(range(start, end))
    extra, missing = sorted(set(w.built_layers) - want), sorted(want - set(w.built_layers))
    out = []
    if extra:
        out.append(f"{_where(w)} holds layers {_span(extra)}, outside its range [{start}, {end})")
    if missing:
        out.append(f"{_where(w)} did not build layers {_span(missing)} of its range [{start}, {end})")
    return out


def _drafters(stages: Stages) -> list[str]:
    out = []
    workers = stages.workers
    for w in workers:
        d = w.drafter
        if d is None:
            continue
        name = d.model or d.proposer or "a drafter"
        if w.pp_rank != w.pp_size - 1:
            out.append(f"{_where(w)} holds the drafter ({name}); it belongs on the last PP stage only")
        if d.built_layers is not None and d.blocks and len(d.built_layers) < d.blocks:
            out.append(
                f"the drafter on {_where(w)} is partitioned: it built blocks {_span(d.built_layers)} of {d.blocks}"
            )
        if stages.draft_tp is not None and d.tp_size is not None and d.tp_size != stages.draft_tp:
            out.append(
                f"the drafter on {_where(w)} runs with TP {d.tp_size}; "
                f"the case asks draft_tensor_parallel_size {stages.draft_tp}"
            )
    last = [w for w in workers if w.pp_rank == w.pp_size - 1]
    if stages.draft_method and last and not any(w.drafter for w in last):
        # an answer naming its runner's class but no layout: the probe could not look for a drafter
        unknown = [w for w in last if w.model_runner is None and w.model_runner_class]
        if unknown:
            w = unknown[0]
            out.append(
                f"{_where(w)} runs model runner {w.model_runner_class}, whose layout the stage probe does not "
                f"know (neither V1's nor V2's): its drafter cannot be read"
            )
        else:
            out.append(
                f"no worker of the last PP stage holds a drafter, though the case asks for {stages.draft_method}"
            )
    return out


_MODULE_LABELS = {"embedding": "embedding", "final_norm": "final norm", "lm_head": "LM head"}


def output_module_problems(stages: Stages) -> list[str]:
    """Each output module the claim places (``StageBounds.output_modules``) is a real module on
    every worker of its stage and a placeholder on every other. An embedding tied to the LM head is
    named so: on the last stage it is the LM head's weight, which a claim of "first" still refuses."""
    bound = stages.output_modules or {}
    if not bound:
        return []
    out = []
    for w in stages.workers:
        mods = w.output_modules
        if mods is None:
            out.append(f"{_where(w)} did not report its output modules: where they were built cannot be checked")
            continue
        for name, stage in bound.items():
            label, m = _MODULE_LABELS.get(name, name), getattr(mods, name, None)
            home = 0 if stage == "first" else w.pp_size - 1
            if m is None:
                out.append(f"{_where(w)} has no module the stage probe knows as the {label}: its stage is unchecked")
            elif m.built and w.pp_rank != home:
                tied = " (tied to the LM head)" if name == "embedding" and mods.tied else ""
                out.append(
                    f"{_where(w)} built the {label} ({m.path}: {m.module}){tied}; the claim puts it on the "
                    f"{stage} PP stage only"
                )
            elif not m.built and w.pp_rank == home:
                out.append(
                    f"{_where(w)} did not build the {label} ({m.path} is a {m.module} placeholder); the claim "
                    f"puts it on the {stage} PP stage"
                )
    return out


def _holds(w: WorkerStage, tap: int) -> bool:
    return w.start_layer is not None and w.end_layer is not None and w.start_layer <= tap <= w.end_layer


def _named_taps(stages: Stages) -> tuple[list[WorkerStage], list[int] | None]:
    """The first TP rank of each stage, and the drafter's taps in the target model's capture
    numbering (``aux_layers``) where the engine gave it, else as the drafter's config names them."""
    heads = [w for w in stages.workers if w.tp_rank == 0]
    return heads, next((w.aux_layers or w.taps for w in heads if w.aux_layers or w.taps), None)


def _taps(stages: Stages) -> list[str]:
    """The stage whose range holds a tap (its end included: a stage captures what leaves its last
    layer) must collect it."""
    heads, named = _named_taps(stages)
    if not named:
        return []
    out = []
    for tap in named:
        owners = [w for w in heads if _holds(w, tap)]
        if not owners:
            out.append(f"the drafter taps layer {tap}, which no PP stage holds")
            continue
        known = [w for w in owners if w.collected_taps is not None]
        if known and not any(tap in (w.collected_taps or []) for w in known):
            w = known[0]
            relay = "" if w.pp_rank == w.pp_size - 1 else ", so it is not relayed to the drafter on the last stage"
            collected = _span(w.collected_taps or []) or "none"
            out.append(
                f"tap at layer {tap} lives on PP stage {w.pp_rank}, which does not collect it{relay} "
                f"(it collects: {collected})"
            )
    return out


def not_exercised(stages: Stages) -> str | None:
    """Why the stages did not show the relay the claim is about (its ``tapped_stage`` holds none
    of the drafter's taps, or nothing says so); None when they did, or the claim names no stage."""
    n = stages.tapped_stage
    if n is None:
        return None
    heads, named = _named_taps(stages)
    if not named:
        return f"the drafter reported no taps: a relay from PP stage {n} was not shown"
    stage = next((w for w in heads if w.pp_rank == n and w.start_layer is not None and w.end_layer is not None), None)
    if stage is None:
        return f"no worker of PP stage {n} reported its layer range: its taps cannot be placed"
    if not any(_holds(stage, tap) for tap in named):
        return (
            f"no tap of the drafter ({_span(named)}) lies on PP stage {n} [{stage.start_layer}, "
            f"{stage.end_layer}]: the relay from it to the last stage was not exercised (choose a "
            f"partition that puts a tap there)"
        )
    return None


def problems(stages: Stages, expected: list[list[int]] | None) -> list[str]:
    """Why the layers, drafters and taps the stages built break the guide's claims; [] when they
    hold. Where the output modules were built is its own check (`output_module_problems`), so a
    known issue of one model's module placement waives that alone, not its partition."""
    out = [p for w in stages.workers for p in _layers(w, expected or [])]
    return out + _dp_ranks_agree(stages) + _drafters(stages) + _taps(stages)


def _dp_ranks_agree(stages: Stages) -> list[str]:
    """External DP: every DP rank's pipeline must split the layers as DP rank 0's does (each rank
    is its own server, launched with the same partition)."""
    split: dict[int, dict[int, tuple[int | None, int | None]]] = {}
    for w in stages.workers:
        if w.dp_rank is not None and w.tp_rank == 0:
            split.setdefault(w.dp_rank, {})[w.pp_rank] = (w.start_layer, w.end_layer)
    if len(split) < 2:
        return []
    first = min(split)
    out = []
    for dp, stages_of in sorted(split.items()):
        for pp, span in sorted(stages_of.items()):
            want = split[first].get(pp)
            if dp != first and span != want:
                out.append(
                    f"DP rank {dp}'s PP stage {pp} holds layers [{span[0]}, {span[1]}), "
                    f"DP rank {first}'s [{want[0] if want else None}, {want[1] if want else None})"
                )
    return out
