"""Running a suite: plan, launch each deployment once, check it, judge every case, append results.

One deployment is live at a time on a host (a vLLM server wants all its cores). Cases whose
launches are identical share one deployment and every check runs on it. The PP=1 baseline of a
model is launched once per run and its outputs kept in the run directory for reuse and resume.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.check import logs
from harness.results import store as results
from harness.cases.case import Case
from harness.check.client import Client, Completion, compare, compare_embeddings
from harness.plan.cluster import Cluster
from harness.cases.expand import expand, select
from harness.check.judge import Observation, Outcome, judge
from harness.plan.lease import Leases
from harness.matrix.load import Matrix
from harness.target.model_config import LayerCounts
from harness.check.diagnose import diagnose
from harness.cases.partition import stage_ranges, tuning_advice
from harness.results.redact import Redactor
from harness.results.repro import write_bundle
from harness.plan.deployment import Deployment, Ports, group_deployments, plan
from harness.target.zoo import default_cache_root, ensure_model
from harness.target.versions import probe
from runners.local import MARKER, LocalRunner, reap
from runners.nodes import run_on_nodes
from runners.reaper import __file__ as _reaper_path
from runners.ssh import SshRunner

REAPER_SOURCE = Path(_reaper_path).read_text()  # sent to other nodes' Python as a -c program
LIVE = "live.json"  # process groups of the deployment being checked
LEASE_WAIT_S = 6 * 3600.0  # how long a case waits for devices that other ppconf processes hold
PROBE_CLASS = "harness.target.worker_probe.StageProbe"
PROBE_METHOD = "ppconf_stage_info"
TIMING_METHOD = "ppconf_stage_timing"
COST_METHOD = "ppconf_stage_cost"
BASELINE_TOPOLOGY = "pp1-tp1"
SERVE_ROLES = ("api", "headless", "prefill", "decode")
# A log line from one of these processes means the configuration was accepted and the engine began.
ENGINE_PROCESS = r"^\((EngineCore|Worker|VllmWorker)\w*"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunConfig:
    matrix: Matrix
    suite: str
    cluster: Cluster
    run_dir: Path
    case_ids: list[str] | None = None
    select: str | None = None
    resume: bool = False


@dataclass
class RunSummary:
    cases: int = 0
    launches: int = 0
    skipped_finished: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(Outcome(o).fails_run for o, n in self.outcomes.items() if n)

    def counts(self) -> dict[str, int]:
        return {o: n for o, n in self.outcomes.items() if n}


class Interrupted(Exception):
    pass


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """A SIGTERM to ppconf tears the live deployment down like Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class Live:
    """A launched deployment: its handles, logs and API client; ``stop`` tears it all down."""

    def __init__(self, deployment: Deployment, log_dir: Path, extra_env: dict[str, str], timeout_s: float,
                 cluster: Cluster | None = None):
        self.deployment = deployment
        self.log_dir = log_dir
        self.cluster = cluster
        self.runners: dict[str, Any] = {}
        self.handles = []
        self.extra_env = extra_env
        self.t0 = time.monotonic()
        api = deployment.launch(deployment.api)
        node = cluster.node(api.node) if cluster else None
        if node is None:
            host = "127.0.0.1"
        else:
            host = (node.bind or "127.0.0.1") if node.reach == "local" else node.address
        self.client = Client(f"http://{host}:{api.port}", timeout_s)
        self.model_name: str | None = None

    def runner_for(self, node_name: str):
        """The runner that reaches a node: this host's, OpenSSH, or an actor on the node's Ray node."""
        reach = self.cluster.node(node_name).reach if self.cluster else "local"
        if reach not in self.runners:
            if reach == "local":
                self.runners[reach] = LocalRunner()
            elif reach == "ssh":
                self.runners[reach] = SshRunner(self.cluster)
            elif reach == "ray" and self.cluster.ray_address:
                from runners.ray import RayRunner  # Ray is imported only by runs that use it

                self.runners[reach] = RayRunner(self.cluster.ray_address)
            else:
                raise RuntimeError(f"node {node_name} is reached by {reach}, but the inventory gives no ray_address")
        return self.runners[reach]

    def groups(self) -> list[dict[str, Any]]:
        """Where each launched process group runs: {"node", "reach", "pgid"}; the pgid is the
        group's id on that node (for SSH, the remote group, once the node reported it)."""
        out = []
        for h in self.handles:
            reach = self.cluster.node(h.spec.node).reach if self.cluster else "local"
            pgid = getattr(h, "pgid", None) if reach == "ssh" else h.pid
            if pgid is not None:
                out.append({"node": h.spec.node, "reach": reach, "pgid": pgid})
        return out

    @property
    def log_paths(self) -> dict[str, Path]:
        return {h.spec.name: h.log_path for h in self.handles}

    def start(self) -> None:
        for spec in self.deployment.launches:
            self.handles.append(self.runner_for(spec.node).start(spec, self.log_dir / f"{spec.name}.log", self.extra_env))

    def exited(self) -> dict[str, int]:
        return {h.spec.name: rc for h in self.handles if (rc := h.returncode()) is not None}

    def wait_ready(self, deadline_s: float, poll_s: float = 0.25) -> tuple[str, float]:
        """("ready" | "exited" | "timeout", seconds since launch). An exit is seen within ``poll_s``."""
        while True:
            elapsed = time.monotonic() - self.t0
            if self.exited():
                return "exited", elapsed
            name = self.client.ready()
            if name is not None:
                self.model_name = name
                return "ready", elapsed
            if elapsed > deadline_s:
                return "timeout", elapsed
            time.sleep(poll_s)

    def stop(self) -> None:
        for h in reversed(self.handles):
            h.stop()
        for runner in self.runners.values():
            if hasattr(runner, "close"):
                runner.close()
        self.client.close()


def _watch(live: Live, fn: Callable[[], Any], deadline_s: float, error: str | None) -> tuple[Any, str | None, Any]:
    """Run a request in a thread while watching the deployment: returns (result, problem, matched_line).

    The verdict comes as soon as the request finishes, a process exits, or the expected error
    pattern appears in a log — not at some RPC timeout deep inside vLLM.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except Exception as err:  # noqa: BLE001 — any failure of the request is evidence
            box["error"] = f"{type(err).__name__}: {err}"

    t = threading.Thread(target=target, daemon=True)
    t.start()
    end = time.monotonic() + deadline_s
    while t.is_alive() and time.monotonic() < end:
        t.join(0.25)
        if error and (line := logs.search(live.log_paths, error)):
            return None, "expected error appeared", line
        if (gone := live.exited()):
            t.join(1.0)
            return None, f"process exited during the request: {gone}", None
    if t.is_alive():
        return None, f"no answer within {deadline_s:.0f} s", None
    if "error" in box:
        return None, box["error"], None
    return box["result"], None, None


def prefix_cache_check(live: Live) -> dict[str, Any]:
    """A prompt longer than one KV block, sent twice: the repeat must be served from the cache."""
    block = 128  # the CPU platform's KV block size; a shorter prompt can never hit the cache
    prompt = [(7 * i) % 500 + 1 for i in range(block + 72)]
    metric = "vllm:prefix_cache_hits_total"
    try:
        before = live.client.metric(metric)
        first = live.client.complete(live.model_name, prompt, 4)
        second = live.client.complete(live.model_name, prompt, 4)
        hits = live.client.metric(metric) - before
    except Exception as err:  # noqa: BLE001 — a failed check is evidence, not a crash
        return {"ok": False, "detail": f"{type(err).__name__}: {err}"}
    same = first.token_ids == second.token_ids
    return {"ok": hits >= block and same,
            "detail": f"{hits:.0f} prompt tokens served from the cache on the repeat of a {len(prompt)}-token "
                      f"prompt; outputs {'equal' if same else 'differ'}"}


class Runner:
    def __init__(self, cfg: RunConfig, progress: Callable[[str, Case | None, str], None] | None = None):
        self.cfg = cfg
        self.m = cfg.matrix
        self.suite = self.m.suite(cfg.suite)
        self.run_dir = cfg.run_dir
        self.progress = progress or (lambda event, case, text: None)
        self.summary = RunSummary()
        self.baselines: dict[str, list[Completion]] = {}
        self.leases = Leases()
        self.versions: dict[str, dict[str, str]] = {}
        # every secret value of the run (launch env and argv, ppconf's own env, which launches
        # inherit), masked in logs, results and repro bundles
        self.redactor = Redactor().learn_env(os.environ)

    # ---- planning -------------------------------------------------------------------------
    def cases(self) -> list[Case]:
        cases = select(expand(self.m, self.cfg.suite, LayerCounts(self.cfg.cluster)).cases,
                       ids=self.cfg.case_ids, expr=self.cfg.select)
        return cases

    def instrument(self, d: Deployment) -> Deployment:
        """Local launches also load the stage probe, so the partition is read from the workers."""
        launches = []
        for l in d.launches:
            node = self.cfg.cluster.node(l.node)
            if l.role in SERVE_ROLES and (node.reach == "local" or node.ppconf):
                env = dict(l.env) | {"VLLM_SERVER_DEV_MODE": "1"}
                l = replace(l, argv=(*l.argv, "--worker-extension-cls", PROBE_CLASS), env=tuple(sorted(env.items())))
            launches.append(l)
        return replace(d, launches=tuple(launches))

    def ports(self) -> Ports:
        return Ports(api=free_port(), master=free_port(), ray=free_port(), kv=free_port(),
                     prefill=free_port(), decode=free_port())

    def extra_env(self) -> dict[str, str]:
        cache = self.run_dir / "vllm-cache"
        return {"VLLM_CACHE_ROOT": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                MARKER: str(self.run_dir)}

    # ---- one deployment ---------------------------------------------------------------------
    def launch(self, d: Deployment, log_dir: Path) -> Live:
        live = Live(d, log_dir, self.extra_env(), self.suite.request_timeout_s, self.cfg.cluster)
        self.summary.launches += 1
        try:
            live.start()
        finally:
            # the groups live now, so a resume after ppconf itself was killed can stop them
            (self.run_dir / LIVE).write_text(json.dumps(live.groups()))
        return live

    def stop(self, live: Live) -> None:
        live.stop()
        (self.run_dir / LIVE).unlink(missing_ok=True)
        self.redactor.learn(live.deployment)
        for path in live.log_paths.values():
            self.redactor.scrub_file(path)

    @staticmethod
    def baseline_key(case: Case) -> str:
        """Generating cases of a model share one PP=1 baseline; pooling ones another (embeddings)."""
        return f"{case.model_key}/pooling" if "pooling" in case.features else case.model_key

    def baseline(self, case: Case) -> list[Any]:
        """The PP=1 outputs of the case's model: completions, or embeddings for a pooling case."""
        key = self.baseline_key(case)
        pooling = "pooling" in case.features
        if key in self.baselines:
            return self.baselines[key]
        path = self.run_dir / "baselines" / f"{key.replace('/', '__')}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            self.baselines[key] = saved["embeddings"] if pooling else [Completion.from_json(c) for c in saved["completions"]]
            return self.baselines[key]
        base_case = replace(case, topology=BASELINE_TOPOLOGY, partition="auto", features=("pooling",) if pooling else (),
                            id=f"{key}/baseline")
        planned = plan(self.m, base_case, self.cfg.cluster)
        candidates = {n.name: n.devices for n in self.cfg.cluster.nodes}
        with self.leases.acquire_placement(planned.placement, LEASE_WAIT_S, note=base_case.id, candidates=candidates) as gang:
            d = self.instrument(plan(self.m, base_case, self.cfg.cluster, placement=gang.placement(), ports=self.ports()))
            self.progress("baseline", case, f"PP=1 baseline of {key}")
            outputs = self._baseline_outputs(d, key, pooling)
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {"embeddings": outputs} if pooling else {"completions": [c.to_json() for c in outputs]}
        path.write_text(json.dumps({"model": key, "argv": d.launches[0].to_json()["argv"], **saved}, indent=1))
        self.baselines[key] = outputs
        return outputs

    def embed(self, live: Live) -> list[list[float]]:
        return [live.client.embed(live.model_name, p) for p in self.suite.accuracy.prompts]

    def _baseline_outputs(self, d: Deployment, key: str, pooling: bool = False) -> list[Any]:
        live = self.launch(d, self.run_dir / "logs" / "baselines" / key.replace("/", "__"))
        try:
            state, elapsed = live.wait_ready(self.suite.startup_timeout_s)
            if state != "ready":
                cause = logs.root_cause(live.log_paths)
                raise RuntimeError(f"PP=1 baseline of {key} did not start ({state} after {elapsed:.0f} s): "
                                   f"{cause.text if cause else 'no error line in its log'}")
            return self.embed(live) if pooling else self.generate(live, streamed=0)
        finally:
            self.stop(live)

    def generate(self, live: Live, streamed: int) -> list[Completion]:
        acc = self.suite.accuracy
        out = [live.client.complete(live.model_name, p, acc.max_tokens) for p in acc.prompts]
        out += [live.client.complete_streamed(live.model_name, p, acc.max_tokens) for p in acc.prompts[:streamed]]
        return out

    def observe(self, d: Deployment, cases: list[Case], log_dir: Path) -> dict[str, Observation]:
        obs = Observation()
        rejects = [c.expectation.error for c in cases if c.expectation.kind == "rejected" and c.expectation.error]
        pattern = "|".join(f"(?:{r})" for r in rejects) or None
        live = self.launch(d, log_dir)
        try:
            state, elapsed = live.wait_ready(self.suite.startup_timeout_s)
            obs.exit_codes = {h.spec.name: h.returncode() for h in live.handles}
            if state == "ready":
                obs.ready, obs.ready_s = True, round(elapsed, 1)
                self.check_live(live, cases, obs, pattern)
            else:
                obs.failed_phase = "startup"
                obs.failed_after_s = round(elapsed, 1)
                obs.hung = state == "timeout"
            obs.exit_codes = {h.spec.name: h.returncode() for h in live.handles}
        finally:
            self.stop(live)
        paths = live.log_paths
        obs.logs = {name: str(path) for name, path in paths.items()}
        obs.engine_started = logs.search(paths, ENGINE_PROCESS) is not None
        cause = logs.root_cause(paths)
        obs.root_cause = cause.to_json() if cause else None
        return {c.id: self._per_case(c, obs, paths) for c in cases}

    def check_live(self, live: Live, cases: list[Case], obs: Observation, pattern: str | None) -> None:
        case = cases[0]
        first_request = any(c.expectation.phase == "first-request" for c in cases)
        tuning = self.suite.partition_tuning and self.m.topologies[case.topology].pp > 1 and not first_request
        if tuning:
            try:
                live.client.collective_rpc(TIMING_METHOD)
            except Exception as err:  # noqa: BLE001
                obs.notes.append(f"partition tuning: stage timing unavailable ({type(err).__name__}: {err})")
                tuning = False
        t_req = time.monotonic()
        if "pooling" in case.features:
            result, problem, line = _watch(live, lambda: self.embed(live), self.suite.request_timeout_s, pattern)
            outputs = None
            if result is not None:
                obs.feature_checks["embeddings"] = compare_embeddings(
                    self.baselines.get(self.baseline_key(case)), result, self.suite.accuracy.embedding_tolerance)
        else:
            outputs, problem, line = _watch(live, lambda: self.generate(live, self.suite.accuracy.streamed),
                                            self.suite.request_timeout_s, pattern)
        if problem:
            obs.request_error = problem
            obs.failed_phase = "first-request"
            obs.failed_after_s = round(time.monotonic() - t_req, 1)
            if line is not None:
                obs.expected_error_line = line.to_json()
                obs.expected_error_after_s = obs.failed_after_s
            return
        if first_request:
            return
        try:
            stages = live.client.collective_rpc(PROBE_METHOD)
            obs.partition = [[s["start_layer"], s["end_layer"]] for s in sorted(stages, key=lambda s: s["rank"])
                             if s["tp_rank"] == 0]
            obs.partition_source = "workers (collective_rpc)"
        except Exception as err:  # noqa: BLE001
            obs.notes.append(f"stage probe unavailable ({type(err).__name__}: {err}); partition from logs")
            line = logs.search(live.log_paths, r"Hidden layers were unevenly partitioned: \[")
            if line:
                counts = [int(x) for x in line.text.split("[", 1)[1].split("]", 1)[0].split(",")]
                starts = [sum(counts[:i]) for i in range(len(counts))]
                obs.partition = [[s, s + n] for s, n in zip(starts, counts)]
                obs.partition_source = f"log ({line.log}:{line.number})"
        if tuning and obs.partition:
            obs.tuning = self.stage_costs(live, obs)
        checks = {name for f in case.features for name in self.m.features[f].checks}
        if "prefix-cache-hit" in checks:
            obs.feature_checks["prefix-cache-hit"] = prefix_cache_check(live)
        if outputs is not None:
            baseline = self.baselines.get(case.model_key)
            if baseline is not None:
                n = len(self.suite.accuracy.prompts)
                # streamed outputs are compared with the same prompts' non-streamed baseline
                expected = baseline[:n] + baseline[:len(outputs) - n]
                obs.accuracy = compare(expected, outputs, self.suite.accuracy.logprob_tolerance)

    def stage_costs(self, live: Live, obs: Observation) -> dict[str, Any] | None:
        """Each stage's mean forward time (its slowest TP rank) and peak memory over the requests
        just made, and the guide's advice for the next partition."""
        try:
            costs = live.client.collective_rpc(COST_METHOD)
        except Exception as err:  # noqa: BLE001
            obs.notes.append(f"partition tuning: stage costs unavailable ({type(err).__name__}: {err})")
            return None
        if any(start is None or end is None for start, end in obs.partition):
            return None
        counts = [end - start for start, end in obs.partition]
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
        return advice

    def _per_case(self, case: Case, shared: Observation, paths: dict[str, Path]) -> Observation:
        obs = replace(shared, notes=list(shared.notes), silent_disable=[], feature_checks=dict(shared.feature_checks),
                      logs=dict(shared.logs))
        exp = case.expectation
        topo = self.m.topologies[case.topology]
        if case.attrs["layers"] and topo.pp > 1 and not case.attrs["partition_error"]:
            rng = stage_ranges(case.attrs["layers"], topo.pp, None if case.partition == "auto" else case.partition)
            obs.partition_expected = [list(r) for r in rng]
        if exp.kind == "rejected" and exp.error and obs.expected_error_line is None:
            line = logs.search(paths, exp.error)
            if line:
                obs.expected_error_line = line.to_json()
                obs.expected_error_after_s = shared.failed_after_s
        for f in case.features:
            obs.silent_disable += [l.to_json() for l in logs.warnings_matching(paths, self.m.features[f].silent_disable)]
        doc = case.attrs.get("partition_doc_error")
        if doc and not case.attrs.get("partition_error"):
            obs.notes.append(f"documentation disagrees: the Ascend guide's rule rejects this partition "
                             f"({doc}); vLLM's own partition check accepts it (the outcome says what the "
                             f"server then did)")
        return obs

    # ---- the whole run ------------------------------------------------------------------
    def record(self, case: Case, d: Deployment | None, obs: Observation, started: str, duration: float,
               plan_key: str | None = None) -> dict[str, Any]:
        verdict = judge(case.expectation, obs)
        rec = {
            "case": case.id,
            "suite": case.suite,
            "family": case.family,
            "variant": case.variant,
            "topology": case.topology,
            "partition": case.partition,
            "features": list(case.features),
            "platform": case.platform,
            "expectation": case.expectation.to_json(),
            "outcome": verdict.outcome.value,
            "reason": verdict.reason,
            "fails_run": verdict.outcome.fails_run,
            "observation": obs.to_json(),
            "deployment": d.to_json() if d else None,
            "plan_key": plan_key,
            "versions": {n: self.versions.get(n, {}) for n in dict.fromkeys(l.node for l in d.launches)} if d else {},
            "started": started,
            "duration_s": round(duration, 1),
        }
        if d:
            self.redactor.learn(d)
        if verdict.outcome.fails_run or verdict.outcome in (Outcome.KNOWN_ISSUE, Outcome.FLAKY):
            texts = [verdict.reason, obs.request_error or "", (obs.root_cause or {}).get("text", "")]
            rec["diagnosis"] = diagnose(self.m.diagnosis, texts, {k: Path(v) for k, v in obs.logs.items()})
            rec["repro"] = write_bundle(self.run_dir, rec, d, self.m.root, case.attrs, self.redactor)
        results.append(self.run_dir, rec, self.redactor)
        self.summary.outcomes[verdict.outcome.value] = self.summary.outcomes.get(verdict.outcome.value, 0) + 1
        self.progress("result", case, f"{verdict.outcome.value}: {verdict.reason}")
        return rec

    def prepare(self) -> list[Deployment]:
        """Plan the cases still to run and group them into deployments; records the cases that
        need no launch (unsupported here, or no claim) straight away."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        results.repair(self.run_dir)
        live_file = self.run_dir / LIVE
        if live_file.exists():
            self.reap_left_behind(json.loads(live_file.read_text() or "[]"))
            live_file.unlink()
        self.probe_versions()
        cases = self.cases()
        planned = {c.id: plan(self.m, c, self.cfg.cluster).key for c in cases
                   if c.expectation.kind not in ("unsupported-on-platform", "unspecified")}
        done = set()
        if self.cfg.resume:
            # a finished case is kept only if its claim and its launch plan are still the same
            current = {c.id: c.expectation.to_json() for c in cases}
            done = {r["case"] for r in results.read(self.run_dir)
                    if r["case"] in current and r.get("expectation") == current[r["case"]]
                    and r.get("plan_key") == planned.get(r["case"])}
        todo = [c for c in cases if c.id not in done]
        self.summary.cases = len(cases)
        self.summary.skipped_finished = len(cases) - len(todo)
        self.progress("start", None, f"{len(todo)} of {len(cases)} cases to run")
        self.by_id = {c.id: c for c in todo}
        runnable = []
        for c in todo:
            if c.expectation.kind in ("unsupported-on-platform", "unspecified"):
                self.record(c, None, Observation(), _now(), 0.0)
            else:
                runnable.append(c)
        self._ensure_models(runnable)
        return group_deployments([plan(self.m, c, self.cfg.cluster) for c in runnable])

    def reap_left_behind(self, groups: list[Any]) -> None:
        """Stop the process groups an earlier ppconf of this run left running (it was killed
        mid-case): on this host directly, on other nodes through their own reach. Only groups
        whose every member carries this run's marker are signalled (``runners.reaper``)."""
        by_node: dict[str, list[int]] = {}
        for g in groups:
            if isinstance(g, int):  # the older format: local groups only
                g = {"node": None, "reach": "local", "pgid": g}
            by_node.setdefault(g["node"] if g.get("reach") != "local" else "", []).append(int(g["pgid"]))
        reaped = reap(self.run_dir, by_node.pop("", []))
        problems = []
        calls = []
        for name, pgids in by_node.items():
            node = next((n for n in self.cfg.cluster.nodes if n.name == name), None)
            if node is None:
                problems.append(f"node {name} is no longer in the inventory; left its groups {pgids} alone")
                continue
            calls.append((node, [node.python, "-c", REAPER_SOURCE, str(self.run_dir), *map(str, pgids)]))
        for (node, _), out in zip(calls, run_on_nodes(self.cfg.cluster, calls, timeout_s=60) if calls else []):
            try:
                reaped += json.loads(out.stdout.strip().splitlines()[-1]) if out.ok else []
            except (ValueError, IndexError):
                pass
            if not out.ok:
                problems.append(f"could not reap on {node.name}: {out.error or out.stderr.strip()[-300:]}")
        if reaped:
            self.progress("reaped", None, f"stopped {len(reaped)} process group(s) an earlier ppconf left behind")
        for problem in problems:
            self.progress("reaped", None, problem)

    def probe_versions(self) -> None:
        """The stack on every node, into run.json (``versions``) and, per case, into its result.
        A resumed run whose nodes changed stack since it started says so in run.json."""
        self.versions = probe(self.cfg.cluster)
        path = self.run_dir / "run.json"
        try:
            meta = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            meta = {}
        if "versions" not in meta:
            meta["versions"] = self.versions
        elif meta["versions"] != self.versions:
            meta.setdefault("versions_on_resume", []).append({"at": _now(), "versions": self.versions})
            self.progress("versions", None, "the nodes' stack changed since this run started; "
                                            "results record the stack each case ran on")
        path.write_text(json.dumps(meta, indent=2))

    def execute(self, d: Deployment) -> list[dict[str, Any]]:
        """Launch one deployment, check it, judge and record each of its cases. An infrastructure
        error (ERROR) is retried once; product failures are never retried into a pass."""
        records = self._execute_once(d)
        if any(r["outcome"] == Outcome.ERROR.value for r in records):
            for r in records:  # the retry's verdict replaces these in the summary (both stay in the results)
                self.summary.outcomes[r["outcome"]] -= 1
            self.progress("retry", self.by_id[d.case_ids[0]], f"{len(records)}")
            records = self._execute_once(d, retry_of=[r["reason"] for r in records if r["outcome"] == "ERROR"])
        return records

    def _execute_once(self, d: Deployment, retry_of: list[str] | None = None) -> list[dict[str, Any]]:
        group = [self.by_id[i] for i in d.case_ids]
        started, t0 = _now(), time.monotonic()
        real = d
        try:
            needs_baseline = [c for c in group if c.expectation.kind in ("supported", "known-issue", "flaky")]
            if needs_baseline:
                # before this deployment's own lease: the baseline needs devices of its own
                self.baseline(needs_baseline[0])
            candidates = {n.name: n.devices for n in self.cfg.cluster.nodes}
            with self.leases.acquire_placement(d.placement, LEASE_WAIT_S, note=group[0].id, candidates=candidates) as gang:
                real = self.instrument(plan(self.m, group[0], self.cfg.cluster, placement=gang.placement(),
                                            ports=self.ports()))
                real = replace(real, case_ids=d.case_ids)
                self.progress("launch", group[0], f"{len(group)} case(s) on one deployment")
                observed = self.observe(real, group, self.run_dir / "logs" / d.key)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # noqa: BLE001 — a harness failure is ERROR, never a product verdict
            observed = {c.id: Observation(infra_error=f"{type(err).__name__}: {err}") for c in group}
        for obs in observed.values():
            obs.notes += [f"retried after an infrastructure error: {why}" for why in retry_of or []]
        return [self.record(c, real, observed[c.id], started, time.monotonic() - t0, d.key) for c in group]

    def run(self) -> RunSummary:
        with _sigterm_as_interrupt():
            for d in self.prepare():
                self.execute(d)
        return self.summary

    def _ensure_models(self, cases: list[Case]) -> None:
        names = {v.model[4:] for c in cases for v in [self.m.variant(c.family, c.variant)]
                 if v.model.startswith("zoo:")}
        for name in sorted(names):
            self.progress("model", None, f"tiny model {name}")
            ensure_model(name, default_cache_root())


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_meta(run_dir: Path, cfg: RunConfig, extra: dict[str, Any]) -> None:
    meta = {"suite": cfg.suite, "cluster": cfg.cluster.name, "matrices": str(cfg.matrix.root),
            "started": _now(), "pid": os.getpid(), **extra}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2))
