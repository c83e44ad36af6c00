"""A suite's PP cells as vllm-ascend's own multi-node nightly configs, made from the launch plans
ppconf runs (``harness.plan.deployment.plan``): one file per case, which their runner
(``tests/e2e/nightly/multi_node/internal_dp/scripts/test_multi_node.py``) executes unchanged.

Each node of the plan is one ``deployment`` entry: its ``vllm serve`` argv as ``server_cmd`` with
the node addresses as the variables their runner fills in (``$MASTER_IP``, ``$LOCAL_IP``) and the
API port as ``$SERVER_PORT``; its env as ``envs``, less what their runner sets per node itself (the
interface variables). A P/D pair is ``disaggregated_prefill`` (their runner starts the proxy). The
case's AISBench gates (an ``aisbench`` score reference, a phase's ``perf_baseline`` measured by
AISBench) are ``benchmarks``. What their format cannot hold is a case not exported, with why:
a claimed rejection (their runner has no expected failure), a Ray cluster (``ray start`` before
``vllm serve``), more than one server per node. Every file is checked against the keys their
loader reads (``vllm_ascend_nightly_keys.yaml``, with the vllm-ascend commit it was read from).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness import safe_write
from harness.cases.case import Case
from harness.cases.expand import expand, select
from harness.cases.workload import workload_of
from harness.export.lws import stand_in
from harness.launch import Deployment, LaunchSpec, PlanError
from harness.matrix.load import Matrix
from harness.matrix.schema import PerfGate
from harness.outcomes import Kind
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.reference import resolve

KEYS_FILE = Path(__file__).with_name("vllm_ascend_nightly_keys.yaml")
SERVER_PORT = 8080  # their runner's default ($SERVER_PORT unset)
MARK = re.compile(r"ppconf-node-(\d+)\.invalid")  # a node's address on lws.stand_in's cluster
SERVE_ROLES = {"api", "headless", "prefill", "decode"}
# What ppconf checks that their runner does not: said in the note beside the files.
NOT_CHECKED = (
    "stage evidence: the layer range each PP rank built, drafter placement and TP, per-stage memory "
    "and step time (ppconf's probe travels with the launch; their runner reads no worker state)",
    "the partition oracle: that the ranks built vLLM's get_pp_indices split (or the custom "
    "VLLM_PP_LAYER_PARTITION) rather than just starting",
    "features silently off: a requested feature the engine turned off (its effective configuration, "
    "or a WARNING), which their runner counts as a pass",
    "the reference comparison: every request compared with the case's counterpart (PP folded away) "
    "token by token, with the near-tie rule; their runner has only AISBench scores against a baseline",
    "workload phases proving what they name (requests in flight, preemptions, prefix-cache hits, "
    "speculative acceptance from the engine's metrics)",
    "refusal vs crash: a claimed rejection, matched on the root cause in the worker logs",
)


class ExportError(Exception):
    """A written config would not be read by their loader (a key missing or unknown)."""


class NotExported(Exception):
    """The case is outside what their format can hold; the message says why."""


@dataclass
class Exported:
    """The configs of one suite (file name -> config), and the PP cells left out, with why."""

    suite: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    cases: dict[str, str] = field(default_factory=dict)  # file name -> case id
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (case id, why)

    def note(self) -> str:
        """The Markdown note written beside the configs."""
        commit = keys()["commit"]
        lines = [
            f"# {self.suite}: PP cells as vllm-ascend nightly configs",
            "",
            f"Written by `ppconf export vllm-ascend-nightly --suite {self.suite}` from the launch plans "
            f"ppconf runs; the format is the one vllm-ascend's multi-node nightly loader reads (commit "
            f"{commit}). Run one with their runner: `CONFIG_YAML_PATH=FILE` on every node of an "
            f"LWS group (`tests/e2e/nightly/multi_node/scripts/run.sh`).",
            "",
            f"## Exported ({len(self.files)})",
            "",
            *(f"- `{name}`: {case}" for name, case in self.cases.items()),
            "",
            f"## Not exported ({len(self.skipped)})",
            "",
            *(f"- {case}: {why}" for case, why in self.skipped),
            "",
            "## What their runner does not check",
            "",
            "Their runner starts the servers, waits for health and runs the AISBench benchmarks; a "
            "config with no `benchmarks` passes once the servers are up. ppconf's run of the same "
            "case also checks:",
            "",
            *(f"- {line}" for line in NOT_CHECKED),
            "",
            "Also: the model path in each file is the one ppconf's plan names (resolved on the "
            "inventory given); their runner sets `VLLM_WORKER_MULTIPROC_METHOD=spawn` and sources "
            "CANN from its image, where ppconf sources the inventory's `set_env`.",
            "",
        ]
        return "\n".join(lines)

    def write(self, out: Path, force: bool = False) -> list[Path]:
        """The configs and README.md in ``out``; a file there ppconf did not write (hand-written,
        edited since) stops it before it writes anything, unless ``force`` (``harness.safe_write``)."""
        texts = {
            out / name: f"# Exported by `ppconf export vllm-ascend-nightly --suite {self.suite}`: "
            f"{self.cases[name]}\n" + dump(config)
            for name, config in self.files.items()
        }
        texts[out / "README.md"] = self.note()
        for path in texts:
            safe_write.check(path, force=force, root=out)
        return [safe_write.write_text(path, text, force=force, root=out) for path, text in texts.items()]


class _Literal(str):
    """A server_cmd: one flag per line, as a literal block (newlines are whitespace to shlex)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", str(s), style="|"))


def dump(config: dict[str, Any]) -> str:
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


@cache
def keys() -> dict[str, Any]:
    return yaml.safe_load(KEYS_FILE.read_text())


def check_keys(config: dict[str, Any]) -> None:
    """Every key their loader needs is there, and every key written is one it reads."""
    k = keys()

    def check(section: str, data: dict[str, Any], where: str) -> None:
        spec = k[section]
        missing = [key for key in spec["required"] if key not in data]
        unknown = [key for key in data if key not in (*spec["required"], *spec["optional"])]
        if missing or unknown:
            raise ExportError(f"{where}: missing {missing}, not read by vllm-ascend's loader {unknown}")

    check("root", config, "config")
    for i, entry in enumerate(config["deployment"]):
        check("deployment", entry, f"deployment[{i}]")
    if config.get("disaggregated_prefill"):
        check("disaggregated_prefill", config["disaggregated_prefill"], "disaggregated_prefill")
    for name, bench in config["benchmarks"].items():
        check("benchmark", bench, f"benchmarks.{name}")


def file_name(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", case_id).strip("-") + ".yaml"


def export_suite(m: Matrix, suite: str, cluster: Cluster) -> Exported:
    """The suite's PP cells (pp > 1, on either instance of a P/D pair) as configs."""
    out = Exported(suite)
    for case in select(expand(m, suite).cases, expr="pp > 1 || decode_pp > 1"):
        try:
            config = export_case(m, case, cluster)
        except NotExported as why:
            out.skipped.append((case.id, str(why)))
            continue
        name = file_name(case.id)
        out.files[name] = config
        out.cases[name] = case.id
    return out


def planned(m: Matrix, case: Case, cluster: Cluster) -> Deployment:
    """The case's deployment on the stand-in of ``cluster`` whose node addresses are markers."""
    first = plan(m, case, cluster)
    assert first.placement is not None
    return plan(m, case, stand_in(cluster, len(first.placement.nodes)))


def export_case(m: Matrix, case: Case, cluster: Cluster) -> dict[str, Any]:
    kind = case.expectation.kind
    if kind is not Kind.SUPPORTED:
        raise NotExported(
            f"claimed {kind.value}: their format has no expected failure nor waiver (a config passes "
            f"when its servers start and its benchmarks hold)"
        )
    try:
        d = planned(m, case, cluster)
    except PlanError as err:
        raise NotExported(f"no plan on {cluster.name}: {err}") from None
    # their runner's node index is the entry's place in `deployment`: the stand-in's node rank
    serving = sorted((launch for launch in d.launches if launch.role != "proxy"), key=_rank)
    other = sorted({launch.role for launch in serving} - SERVE_ROLES)
    if other:
        raise NotExported(
            f"launches {', '.join(other)} processes: their runner starts one `vllm serve` per node "
            f"(a Ray cluster needs `ray start` on every node first)"
        )
    nodes = [launch.node for launch in serving]
    if len(set(nodes)) != len(nodes):
        raise NotExported("more than one server on a node: their internal-DP format has one server_cmd per node")
    platform = m.platforms[case.platform]
    planned_env = set(platform.node_env) | set(keys()["runner_env"])
    pd = {role: [i for i, launch in enumerate(serving) if launch.role == role] for role in ("prefill", "decode")}
    deployment: list[dict[str, Any]] = []
    for rank, launch in enumerate(serving):
        master = pd["decode"][0] if launch.role == "decode" else 0  # their runner: the decode side's first node
        env = {k: v for k, v in launch.env if k not in planned_env}
        for k, v in env.items():
            if MARK.search(v):
                raise NotExported(f"env {k} holds a node's address ({v}): their runner sets no such variable")
        env["SERVER_PORT"] = str(SERVER_PORT)
        deployment.append({"envs": env, "server_cmd": server_cmd(launch, rank, master)})
    common = {k: v for k, v in deployment[0]["envs"].items() if all(e["envs"].get(k) == v for e in deployment)}
    config: dict[str, Any] = {
        "test_name": f"ppconf {case.suite}: {case.id}",
        "model": d.model,
        "num_nodes": len(serving),
        "npu_per_node": max(len(devices) for _, devices in d.placement.nodes),  # type: ignore[union-attr]
        "env_common": common,
    }
    if pd["prefill"]:
        config["disaggregated_prefill"] = {
            "enabled": True,
            "prefiller_host_index": pd["prefill"],
            "decoder_host_index": pd["decode"],
        }
    config["deployment"] = deployment
    config["benchmarks"] = benchmarks(m, case)
    check_keys(config)
    return config


def _rank(launch: LaunchSpec) -> int:
    """The node rank of a launch planned on ``lws.stand_in``'s cluster (nodes node0, node1, ...)."""
    return int(launch.node.removeprefix("node"))


def server_cmd(launch: LaunchSpec, rank: int, master: int) -> _Literal:
    """The launch's argv as their runner's string: addresses as its variables, the API port as
    ``$SERVER_PORT`` (their runner waits on it)."""

    def address(text: str) -> str:
        def var(mk: re.Match[str]) -> str:
            other = int(mk[1])
            if other == master:
                return "$MASTER_IP"
            if other == rank:
                return "$LOCAL_IP"
            raise NotExported(
                f"{launch.name} names node {other}'s address: their runner knows only its own and the master's"
            )

        return MARK.sub(var, text)

    argv = list(launch.argv)
    if argv[:2] != ["vllm", "serve"]:
        raise NotExported(f"{launch.name} is not `vllm serve`: {' '.join(argv[:2])}")
    if launch.port is not None:
        if "--port" in argv:
            argv[argv.index("--port") + 1] = "$SERVER_PORT"
        else:
            argv[3:3] = ["--port", "$SERVER_PORT"]
    words = [address(w) for w in argv]
    lines = [" ".join(_quote(w) for w in words[:3])]
    i = 3
    while i < len(words):
        j = i + 1
        if j < len(words) and not words[j].startswith("--"):
            j += 1
        lines.append(" ".join(_quote(w) for w in words[i:j]))
        i = j
    return _Literal("\n".join(lines) + "\n")


def _quote(word: str) -> str:
    """shlex's quoting, which leaves ``$VAR`` for their runner to fill (it substitutes before
    splitting, and splits with shlex)."""
    if re.fullmatch(r"\$[A-Z_]+", word):
        return word
    return shlex.quote(word)


def _threshold(gate: PerfGate, baseline: float) -> float:
    """Their throughput gate's threshold (pass when throughput >= threshold x baseline) with
    the bound of ``gate``: its ratio, or 1 - max(rel_slack x baseline, abs_slack) / baseline
    (TensorRT-LLM's form, exact for one recorded baseline)."""
    if not gate.slack_form:
        return gate.ratio
    margin = max((gate.rel_slack or 0.0) * baseline, (gate.abs_slack or {}).get("output_tokens_per_s", 0.0))
    return 1 - margin / baseline


def benchmarks(m: Matrix, case: Case) -> dict[str, dict[str, Any]]:
    """The case's AISBench gates as their benchmarks: an ``aisbench`` score reference as ``acc``,
    each phase's AISBench-measured throughput baseline as a ``performance`` benchmark."""
    out: dict[str, dict[str, Any]] = {}
    ref = resolve(m, case).spec
    score = ref.score if ref.kind == "score" else None
    if score is not None:
        if score.tool != "aisbench" or score.baseline is None or score.threshold is None:
            raise NotExported(
                f"its accuracy gate ({score.tool}, baseline {score.baseline}, threshold {score.threshold}) is not "
                f"AISBench's |score - baseline| <= threshold, the one gate their benchmarks have"
            )
        acc: dict[str, Any] = {"case_type": "accuracy"}
        if score.baseline_dataset or score.dataset:
            acc["dataset_path"] = score.baseline_dataset or score.dataset
        acc |= {
            "request_conf": score.request_config or "vllm_api_general_chat",
            "dataset_conf": score.dataset_config,
            "max_out_len": score.max_out_len,
            "batch_size": score.batch_size,
        }
        if score.limit:
            acc["num_prompts"] = score.limit
        acc |= dict(score.generation_kwargs or {})
        acc |= {"baseline": score.baseline, "threshold": score.threshold}
        out["acc"] = {k: v for k, v in acc.items() if v is not None}
    for phase in workload_of(m, case):
        gate = phase.perf_baseline
        if gate is None or gate.aisbench is None or gate.output_tokens_per_s is None:
            continue
        ais = gate.aisbench
        perf: dict[str, Any] = {"case_type": "performance"}
        if ais.baseline_dataset or ais.dataset:
            perf["dataset_path"] = ais.baseline_dataset or ais.dataset
        perf |= {
            "request_conf": ais.request_config,
            "dataset_conf": ais.dataset_config,
            "num_prompts": ais.num_prompts,
            "max_out_len": ais.max_out_len or phase.max_tokens,
            "batch_size": ais.batch_size or phase.requests,
            "request_rate": ais.request_rate,
            **(ais.generation_kwargs or {}),
            "baseline": gate.output_tokens_per_s,
            "threshold": _threshold(gate, gate.output_tokens_per_s),
        }
        out[phase.label] = {k: v for k, v in perf.items() if v is not None}
    return out
