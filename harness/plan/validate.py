"""Launch plans checked against the engine before a cluster spends an hour on them.

For every case (and any other deployment, such as a reference) of a suite planned on a cluster:

- each ``vllm serve`` argv is parsed by the installed vLLM's own serve parser
  (``make_arg_parser(FlexibleArgumentParser())``) and ``EngineArgs.from_cli_args``, where vLLM
  is importable on the driver (a note says so where it is not): an unknown flag, a bad value,
  or one destination given twice is an error naming the matrix entries that gave it;
- JSON flags are checked against the fields of vLLM's config dataclasses (speculative,
  kv-transfer, compilation, kv-events), ``--additional-config`` (keys and sub-keys) against what
  the platform's engine reads by its facts file (generated from its source:
  ``scripts/ascend_facts.py``), with the keys the platform documents beyond it and its
  ``config_keys`` added;
- the world size, as vLLM computes it (TP x PP x PCP per DP rank; DCP lives inside TP; each
  instance of a P/D pair and each engine of external DP on its own), equals the devices the
  plan gives across the instance's nodes, and the deployment's devices equal the case's
  ``devices`` (what a run leases);
- env names are identifiers, a plugin's own (``VLLM_ASCEND_*``) ones it reads, the suite's platform
  is the cluster's, ports do not collide on a node, and kv ports stay out of a range the
  platform's facts say a transport picks ports from at random.

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
from harness.matrix.effective import CONFIG_SECTIONS
from harness.matrix.facts import ReadKey
from harness.matrix.load import Matrix
from harness.matrix.schema import Platform
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
    version: str = ""  # the installed vLLM's release, without its local build tag ("0.32.0")

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
    import vllm
    import vllm.envs as envs

    release = str(getattr(vllm, "__version__", "")).split("+", 1)[0]
    return Engine(parser, EngineArgs, platform, classes, dests, frozenset(envs.environment_variables), release)


def engine_key_report(m: Matrix, platforms: Iterable[str], eng: Engine) -> PlanReport:
    """Each JSON key a platform declares beyond the driver's vLLM (``config_keys``), against the
    installed engine: where it is the release the matrix names, the key must be a field of its
    config class (else the matrix's word is wrong: an error at the key); otherwise a note says on
    whose word the key passes unchecked."""
    report = PlanReport()
    for name in sorted(set(platforms)):
        for key, spec in m.platforms[name].config_keys.items():
            where = m.at("platforms", name, "config_keys", key) or m.where.get(("platforms", name)) or "platforms"
            flag, _, path = key.partition(".")
            cls = eng.config_classes.get(flag)
            if spec.engine != "vllm" or cls is None or spec.version != eng.version:
                report.notes.append(
                    f"{where}: {key} passes unchecked on the word of {spec.engine} {spec.version}'s "
                    f"{spec.read_in} (the installed vLLM is {eng.version or 'of unknown version'})"
                )
                continue
            value: Any = True
            for part in reversed(path.split(".")):
                value = {part: value}
            problems = _config_errors(value, cls, flag, set())
            report.errors += [
                f"{where}: {key}: platform {name} says vLLM {spec.version} reads it ({spec.read_in}), but the "
                f"installed vLLM {eng.version}'s {cls.__name__} does not: {p}"
                for p in problems
            ]
    return report


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


def plugin_env_errors(platform: Platform, launch: LaunchSpec, cluster: Cluster) -> list[str]:
    """A variable in the platform plugin's own namespace (VLLM_ASCEND_*) that the plugin does not
    read, by its facts: a typo or a removed switch, which would change nothing."""
    facts = platform.facts
    if facts is None:
        return []
    read = f"{facts.source.repository}@{facts.source.commit[:12]}"
    return [
        f"env {name} is not a variable {read} reads{_suggest(name, facts.env)}; given at "
        + ", ".join(dict(launch.env_origins).get(name) or (f"cluster {cluster.name} node {launch.node}",))
        for name in dict(launch.env)
        if name.startswith(PLUGIN_ENV_PREFIXES) and name not in facts.env
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
        report.errors += [f"{what}: {e}" for e in plugin_env_errors(platform, launch, cluster)]
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
                if getattr(ns, "model_tag", None):
                    ns.model = ns.model_tag  # as `vllm serve` takes its positional model
                try:
                    built = eng.engine_args.from_cli_args(ns)
                except Exception as err:  # the engine's own value checks
                    report.errors.append(f"{what}: vLLM's EngineArgs rejects it: {err}")
                else:
                    report.notes += [f"{what}: {n}" for n in built_config_notes(m, case, launch, built, eng)]
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
    report.errors += reserved_port_errors(platform, case, d, cluster)
    return report


def built_config_notes(m: Matrix, case: Case, launch: LaunchSpec, args: Any, eng: Engine) -> list[str]:
    """Where the driver runs the case's platform and holds its model, the configuration vLLM
    builds from the API launch (``create_engine_config``: the platform's overrides applied, the
    launch's env not) against the fields the case's features need (``effective:``): a note for
    each the built configuration already says is off, before any launch. Claims that expect a
    refusal, or waive the check, are not looked at."""
    from pathlib import Path

    from harness.outcomes import Kind

    exp = case.expectation
    if launch.role != "api" or eng.platform != case.platform or exp.kind is Kind.REJECTED:
        return []
    if "effective-config" in exp.waives:
        return []
    needs = [(f, r) for f in case.features for r in m.features[f].requirements()]
    needs = [(f, r) for f, r in needs if r.field.split(".", 1)[0] in CONFIG_SECTIONS]
    model = str(args.model)
    if model.startswith("zoo:"):
        from harness.target.zoo import model_dir

        model = str(model_dir(model[4:]))
    if not needs or not Path(model).is_dir():
        return []  # a model only the nodes hold: nothing to build here
    args.model = model
    try:
        with engine_quiet():
            config = args.create_engine_config()
    except Exception as err:  # noqa: BLE001 — the launch itself will say; lint only looks
        return [f"vLLM could not build its configuration here ({type(err).__name__}: {err})"]
    from harness.target.worker_probe import EFFECTIVE_SECTIONS, flatten_config

    fields: dict[str, Any] = {}
    for section in EFFECTIVE_SECTIONS:
        flatten_config(getattr(config, section, None), section, fields, 0)
    return [
        f"{feature}: the configuration vLLM builds here already says {r.field} = {fields[r.field]} "
        f"(the feature needs {r.describe()}): the case will fail its effective-config check"
        for feature, r in needs
        if r.field in fields and not r.holds(fields[r.field])
    ]


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
            out += [
                f"--additional-config: {e}; given at {_origins(launch, token)}"
                for e in additional_config_errors(platform, value, extra_keys)
            ]
            continue
        if isinstance(eng, Engine) and flag in eng.config_classes:
            for problem in _config_errors(value, eng.config_classes[flag], flag, extra_keys):
                out.append(
                    f"--{flag}: {problem} (not a field of vLLM's {eng.config_classes[flag].__name__}); "
                    f"given at {_origins(launch, token)}"
                )
    return out


def additional_config_errors(platform: Platform, value: dict, extra_keys: set[str]) -> list[str]:
    """The keys of a plan's --additional-config the platform's engine does not read: the keys of
    its facts (generated from its source), the platform's documented extras and its config_keys;
    inside a key whose sub-keys the facts list (and that passes no others on), those too."""
    facts = platform.facts
    top = {**(facts.additional_config if facts else {}), **dict.fromkeys(platform.additional_config)}
    if not top:
        return [f"unknown key {key!r} (the platform declares no additional_config keys)" for key in value]
    read = f"{facts.source.repository}@{facts.source.commit[:12]}" if facts else "the platform"
    out = []
    for key, sub in value.items():
        gone = facts.removed_additional_config.get(key) if facts else None
        fact = top.get(key)
        if facts and gone:
            out.append(f"key {key!r} was removed: {gone.message} ({facts.where(gone.read_in)})")
        elif key not in top and f"additional-config.{key}" not in extra_keys:
            out.append(f"unknown key {key!r}{_suggest(key, top)} ({read} reads no such key)")
        elif isinstance(fact, ReadKey):
            out += _sub_key_errors(key, fact, sub, read)
    return out


def _sub_key_errors(path: str, fact: ReadKey, value: object, read: str) -> list[str]:
    if fact.open or not fact.keys or not isinstance(value, dict):
        return []
    out = []
    for key, sub in value.items():
        if key in fact.keys:
            out += _sub_key_errors(f"{path}.{key}", fact.keys[key], sub, read)
        else:
            out.append(f"unknown key {path}.{key}{_suggest(key, fact.keys)} ({read} reads no such key in {path})")
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
        # each side whole, or one engine per DP rank of a side with external DP
        instances = [
            (f"{l.role} instance" if l.name == l.role else f"{l.role} DP rank engine {l.name}", [l.name], l.name)
            for l in d.launches
            if l.role in ("prefill", "decode")
        ]
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
        want, how = world(name, per_dp_rank="DP rank" in label)
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
        # the head (and an external-DP side's rank 0) binds the rendezvous ports the others connect to
        if l.role == "api" or (
            l.role in ("prefill", "decode", "dp-rank") and _value(args, ("--data-parallel-rank",)) == "0"
        ):
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
                # a DP rank's engine binds its devices' ports past the lower ranks' (the connector
                # offsets kv_port by DP rank x its world), so the ranks of one side share kv_port
                rank = _value(args, ("--data-parallel-rank",))
                port += int(rank) * span if rank and rank.isdigit() else 0
                used[l.node].append((port, port + span - 1, f"{l.name} (kv ports)"))
    out = []
    for node, spans in used.items():
        spans.sort()
        for (_a0, a1, an), (b0, _b1, bn) in itertools.pairwise(spans):
            if b0 <= a1 and an != bn:
                out.append(f"case {case.id} (suite {case.suite}): port {b0} on node {node} is used by {an} and {bn}")
    return out


def kv_connectors(kv: dict) -> list[str]:
    """The connectors a kv-transfer-config runs: its own, and a MultiConnector's inner ones."""
    inner = (kv.get("kv_connector_extra_config") or {}).get("connectors") or []
    return [str(kv.get("kv_connector", ""))] + [c for sub in inner if isinstance(sub, dict) for c in kv_connectors(sub)]


def reserved_port_errors(platform: Platform, case: Case, d: Deployment, cluster: Cluster) -> list[str]:
    """A launch's kv ports (kv_port up to one per device) inside a range its transport allocates
    from at random on that node (the platform's facts: AscendDirectTransport under Mooncake takes
    [20000, 20000 + 1000 x NPUs per node)): the two collide now and then at startup."""
    import json

    if platform.facts is None or not platform.facts.reserved_ports:
        return []
    names = {n.name: n for n in cluster.nodes}
    out = []
    for launch in d.launches:
        raw = _value(list(launch.argv), ("--kv-transfer-config",))
        try:
            kv = json.loads(raw) if raw else {}
            first = int(kv.get("kv_port", 0))
        except (ValueError, TypeError, AttributeError):
            continue
        node = names.get(launch.node)
        if not first or node is None:
            continue
        span = max(1, len(launch.env_dict().get(platform.device_env, "0").split(",")))
        for reserved in platform.facts.reserved_ports:
            taken = reserved.span(len(node.devices))
            if reserved.applies_to(kv_connectors(kv)) and first < taken.stop and first + span > taken.start:
                out.append(
                    f"case {case.id} (suite {case.suite}), launch {launch.name}: kv ports {first}-{first + span - 1} "
                    f"on node {node.name} fall in [{taken.start}, {taken.stop}), where {reserved.transport} "
                    f"({reserved.used_by}) picks ports at random on a node of {len(node.devices)} devices "
                    f"({platform.facts.where(reserved.read_in)}); use kv_port {taken.stop} or above; given at "
                    f"{_origins(launch, '--kv-transfer-config')}"
                )
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
    cases = list(cases)
    if isinstance(eng, Engine):
        report.extend(engine_key_report(m, {c.platform for c in cases if c.platform == cluster.platform}, eng))
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
