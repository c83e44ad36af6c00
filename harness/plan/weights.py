"""Claimed rejections that cost no weights: a launch whose every case is claimed refused once the
engine starts (at startup or on the first request) is first launched with vLLM's dummy weights
(``--load-format dummy``: the engine builds every tensor at its shape and fills it, reading
nothing from the checkpoint).

A refusal decided by sizes and settings (KV cache sizing, graph capture, a connector, a
request refused) does not depend on a weight's value, so the dummy launch meets the claim as
the real one would: XFAIL, its evidence saying the weights were not loaded. Anything else (the
launch was accepted, or failed otherwise) is no verdict: the runner launches again with the
real weights and judges that. A startup refusal the matrix marks ``before_weights`` (a
partition refused while the model is built) reads no weight either way, but is launched dummy
first too: should the claim be wrong, the launch gets past the model and would read the whole
checkpoint before its verdict. Not launched dummy first:

- a config-phase refusal: the engine's configuration refuses it before anything is built;
- a claim marked ``needs_weights``: the refusal comes from the checkpoint's own tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from harness.launch import Deployment
from harness.outcomes import Kind
from harness.plan.validate import SERVE_ROLES  # the launches that load weights
from harness.results.result import Expectation

LOAD_FORMAT = "--load-format"
DUMMY = "dummy"
NOTE = (
    "weights not loaded: launched with --load-format dummy; the claimed refusal does not depend "
    "on the weights' values (a claim whose refusal does says needs_weights in the matrix)"
)


def without_weights_first(exp: Expectation) -> bool:
    """A claimed refusal once the engine starts that does not need the real weights."""
    return exp.kind is Kind.REJECTED and not exp.needs_weights and exp.phase in ("startup", "first-request")


def dummy_first(expectations: Sequence[Expectation]) -> bool:
    """Whether a launch serving these claims is first launched with dummy weights: every one is
    such a refusal (a served case among them needs the weights)."""
    return bool(expectations) and all(without_weights_first(e) for e in expectations)


def loads_dummy(d: Deployment) -> bool:
    """Whether every launch that loads weights already loads dummy ones (a tiny model without a
    checkpoint): nothing to save."""
    serving = [launch for launch in d.launches if launch.role in SERVE_ROLES and "serve" in launch.argv]
    return bool(serving) and all(_load_format(launch.argv) == DUMMY for launch in serving)


def without_weights(d: Deployment) -> Deployment:
    """``d`` with every launch that loads weights loading dummy ones instead (a load format it
    gave is replaced)."""
    launches = []
    for launch in d.launches:
        if launch.role in SERVE_ROLES and "serve" in launch.argv:
            launch = replace(launch, argv=_with_dummy(launch.argv))
        launches.append(launch)
    return replace(d, launches=tuple(launches))


def _load_format(argv: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == LOAD_FORMAT and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(LOAD_FORMAT + "="):
            return arg.split("=", 1)[1]
    return None


def _with_dummy(argv: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == LOAD_FORMAT:
            skip = True
            continue
        if arg.startswith(LOAD_FORMAT + "="):
            continue
        out.append(arg)
    return (*out, LOAD_FORMAT, DUMMY)
