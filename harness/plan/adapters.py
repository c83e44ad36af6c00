"""LoRA adapters named in a launch: ``--lora-modules NAME=adapter:KEY`` (the ``lora`` feature's
way, one spelling for every family) names the adapter KEY of the case's model. It is the path
the variant's ``adapters`` gives KEY (a checkpoint the nodes hold), else, for a zoo model, the
tiny adapter ppconf builds for it (``zoo:MODEL#lora-KEY``, ``harness.target.zoo_lora``). Both go
through the plan's model resolver, as the model and its drafters do. A load-lora-adapter request's
``lora_path: adapter:KEY`` names an adapter the same way."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from harness.cases.merge import Merged, Unit
from harness.cases.phases.kind import PhasePlan
from harness.launch import PlanError
from harness.matrix.requests import ExplicitRequest, LoadLoraAdapterRequest
from harness.matrix.schema import Phase, Variant
from harness.target.zoo_lora import ZOO_MARK

FLAG = "--lora-modules"
PLACEHOLDER = "adapter:"


def zoo_ref(model: str, key: str) -> str:
    """The ref of a zoo model's built-in adapter (resolved to its cache folder)."""
    return f"{model}{ZOO_MARK}{key}"


def split_zoo_ref(ref: str) -> tuple[str, str] | None:
    """(model name, adapter) of a zoo adapter ref, None for any other ref."""
    if not ref.startswith("zoo:") or ZOO_MARK not in ref:
        return None
    model, _, key = ref[4:].rpartition(ZOO_MARK)
    return model, key


def feature_adapters(args: list[str]) -> list[str]:
    """The adapters (KEY of ``NAME=adapter:KEY``) a feature's args name."""
    return [a.partition("=")[2][len(PLACEHOLDER) :] for a in args if _named(a)]


def _named(value: str) -> bool:
    return value.partition("=")[2].startswith(PLACEHOLDER)


def adapter_ref(variant: Variant, key: str, where: str) -> str:
    """The ref of the variant's adapter ``key``; PlanError where the variant has none."""
    if key in variant.adapters:
        return variant.adapters[key]
    if variant.model.startswith("zoo:"):
        return zoo_ref(variant.model, key)
    declared = ", ".join(sorted(variant.adapters)) or "none"
    raise PlanError(f"{where}: --lora-modules names adapter:{key}, not among the variant's adapters ({declared})")


def resolve(mg: Merged, variant: Variant, resolve_model, where: str) -> None:
    """Each ``NAME=adapter:KEY`` of ``--lora-modules`` becomes ``NAME=PATH``."""

    def path(value: str) -> str:
        name, _, ref = value.partition("=")
        return f"{name}={resolve_model(adapter_ref(variant, ref[len(PLACEHOLDER) :], where))}"

    for i, u in enumerate(mg.tail):
        if u.flag == FLAG:
            mg.tail[i] = Unit(u.flag, tuple(path(v) if _named(v) else v for v in u.values), u.origin)


def request_adapters(phases: Iterable[Phase]) -> list[str]:
    """The adapters (KEY of ``lora_path: adapter:KEY``) the phases' load-lora-adapter requests name."""
    return [
        r.lora_path[len(PLACEHOLDER) :]
        for p in phases
        for r in p.explicit or ()
        if isinstance(r, LoadLoraAdapterRequest) and r.lora_path.startswith(PLACEHOLDER)
    ]


def resolve_requests(plan: PhasePlan, variant: Variant, resolve_model, where: str) -> PhasePlan:
    """The phase's load-lora-adapter requests with ``lora_path: adapter:KEY`` made the adapter's path."""

    def path(r: ExplicitRequest) -> ExplicitRequest:
        if not (isinstance(r, LoadLoraAdapterRequest) and r.lora_path.startswith(PLACEHOLDER)):
            return r
        ref = adapter_ref(variant, r.lora_path[len(PLACEHOLDER) :], where)
        return r.model_copy(update={"lora_path": resolve_model(ref)})

    explicit = tuple(path(r) for r in plan.explicit)
    return plan if explicit == plan.explicit else dataclasses.replace(plan, explicit=explicit)
