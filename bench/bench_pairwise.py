"""Figures for the pairwise generator on realistic matrix shapes: rows, coverage, product, time.

Run from the repository root: ``.venv/bin/python bench/bench_pairwise.py``. It only prints; the
constraints below are illustrative stand-ins of the kinds the suite uses (requires, conflicts,
partition count equals pp), not the suite's real rules.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script, no install

from harness.cases.pairwise import covering_array, summary  # noqa: E402

MODELS = [
    "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-30b-a3b", "mixtral-8x7b",
    "deepseek-v2-lite", "gemma-2-9b", "mistral-7b", "phi-3-mini", "llava-1.5-7b", "tiny-2-layer",
]  # fmt: skip
MOE = {"qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite"}
TOPOLOGIES = [(1, 2), (2, 2), (1, 4), (2, 4)]  # (tp, pp)
PARTITIONS = ["auto", "custom-2", "custom-4"]  # custom-N lists N stage sizes
FEATURES = [
    "prefix_caching", "chunked_prefill", "spec_ngram", "spec_eagle", "lora", "fp8_kv_cache",
    "awq", "cuda_graphs", "async_output", "structured_output", "expert_parallel", "sleep_mode",
    "multi_step", "logprobs",
]  # fmt: skip

Rule = tuple[tuple[str, ...], Callable[..., bool]]


class Matrix:
    """Named dimensions plus rules; each rule reads a few dimensions and judges them once all are set."""

    def __init__(self, dims: dict[str, list], rules: list[Rule]) -> None:
        self.names = list(dims)
        self.values = list(dims.values())
        index = {n: i for i, n in enumerate(self.names)}
        self.rules = [(tuple(index[n] for n in names), check) for names, check in rules]
        self.calls = 0

    @property
    def sizes(self) -> list[int]:
        return [len(v) for v in self.values]

    def allowed(self, partial: Mapping[int, int]) -> bool:
        # Monotone by construction: a rule only judges once every dimension it reads is assigned.
        self.calls += 1
        for dims, check in self.rules:
            if all(d in partial for d in dims) and not check(*(self.values[d][partial[d]] for d in dims)):
                return False
        return True


def partition_fits(topology: tuple[int, int], partition: str) -> bool:
    """A custom partition lists one size per stage, so its count must equal pp."""
    return partition == "auto" or int(partition.split("-")[1]) == topology[1]


def pp_matrix(constrained: bool) -> Matrix:
    dims: dict[str, list] = {"model": MODELS, "topology": TOPOLOGIES, "partition": PARTITIONS}
    dims |= {f: [False, True] for f in FEATURES}
    rules: list[Rule] = []
    if constrained:
        rules = [
            (("topology", "partition"), partition_fits),
            (("model", "topology"), lambda m, t: not (m == "tiny-2-layer" and t[1] > 2)),
            (("model", "expert_parallel"), lambda m, ep: not ep or m in MOE),
            (("spec_ngram", "spec_eagle"), lambda a, b: not (a and b)),
            (("spec_eagle", "cuda_graphs"), lambda eagle, graphs: not eagle or graphs),
            (("multi_step", "chunked_prefill"), lambda ms, cp: not (ms and cp)),
            (("lora", "awq"), lambda lora, awq: not (lora and awq)),
            (("model", "lora"), lambda m, lora: not (lora and m == "llava-1.5-7b")),
            # Three-way: sleep mode with pp=4 needs prefix caching off (exercises the slow path).
            (("sleep_mode", "topology", "prefix_caching"), lambda s, t, pc: not (s and t[1] == 4 and pc)),
        ]
    return Matrix(dims, rules)


def twelve_cubed(constrained: bool) -> Matrix:
    """The performance target: 3 dimensions of 12 values and 12 toggles, a few constraints."""
    dims: dict[str, list] = {"a": list(range(12)), "b": list(range(12)), "c": list(range(12))}
    dims |= {f"f{i}": [False, True] for i in range(12)}
    rules: list[Rule] = []
    if constrained:
        rules = [
            (("a", "b"), lambda a, b: a % 4 != b % 4 or a == b),
            (("f0", "f1"), lambda x, y: not x or y),
            (("f2", "f3"), lambda x, y: not (x and y)),
            (("c", "f4"), lambda c, x: not (x and c >= 10)),
        ]
    return Matrix(dims, rules)


def late_requires() -> Matrix:
    """The pp matrix plus a stack dimension, with "requires" judged the way a predicate must when a
    feature can come from the stack or its toggle: only once the stack and every toggle are set.
    That forces the search's slow path (see _SEARCH_BUDGET in harness/pairwise.py)."""
    stacks = [(), ("torch_compile",), ("torch_compile", "fp8_kv_cache"), ("fp8_kv_cache",)]
    requires = {"cuda_graphs": "torch_compile", "sleep_mode": "cpu_offload"}  # cpu_offload: nowhere

    def judge(stack, *flags):
        on = set(stack) | {f for f, flag in zip(FEATURES, flags, strict=True) if flag}
        return all(req in on for f, req in requires.items() if f in on)

    base = pp_matrix(False)
    dims = dict(zip(base.names, base.values, strict=True)) | {"stack": stacks}
    return Matrix(dims, [(("topology", "partition"), partition_fits), (("stack", *FEATURES), judge)])


def grid(*groups: tuple[int, int]) -> Matrix:
    """Unconstrained; each group is (number of dimensions, values per dimension)."""
    sizes = [n_values for count, n_values in groups for _ in range(count)]
    return Matrix({f"d{i}": list(range(n)) for i, n in enumerate(sizes)}, [])


SHAPES: list[tuple[str, Callable[[], Matrix]]] = [
    ("12 models x 4 topologies x 3 partitions x 14 toggles, constrained", lambda: pp_matrix(True)),
    ("12 models x 4 topologies x 3 partitions x 14 toggles, free", lambda: pp_matrix(False)),
    ("same + 4 feature stacks, requires judged only once every toggle is set", late_requires),
    ("3 x 12 values + 12 toggles, constrained", lambda: twelve_cubed(True)),
    ("10 toggles", lambda: grid((10, 2))),
    ("3 x 4 values", lambda: grid((3, 4))),
    ("3 x 4 values + 10 toggles", lambda: grid((3, 4), (10, 2))),
    ("20 dims x 10 values", lambda: grid((20, 10))),
    ("20 dims x 20 values", lambda: grid((20, 20))),
]


def main() -> None:
    seeds = range(3)
    for title, make in SHAPES:
        times, n_rows, calls, first = [], [], 0, None
        for seed in seeds:
            matrix = make()
            start = time.perf_counter()
            cov = covering_array(matrix.sizes, matrix.allowed, seed=seed)
            times.append(time.perf_counter() - start)
            n_rows.append(len(cov.rows))
            if first is None:
                first, calls = cov, matrix.calls
        print(title)
        print(f"  seed 0: {summary(first)}")
        print(
            f"  dims={len(matrix.sizes)}  rows over seeds {seeds.start}..{seeds.stop - 1}: "
            f"{min(n_rows)}..{max(n_rows)}  allowed() calls (seed 0): {calls:,}  "
            f"time: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
