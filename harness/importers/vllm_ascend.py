"""vllm-ascend's nightly test configs as a matrix directory that layers over the shipped one.

vllm-ascend describes a multi-node test as one YAML file (``test_name``, ``model``,
``num_nodes``, ``npu_per_node``, ``env_common``, a ``deployment`` entry per node with its
``envs`` and ``server_cmd``, ``disaggregated_prefill`` host indexes, AISBench ``benchmarks``),
and single-node tests as ``test_cases`` whose ``server_cmd`` (and ``server_cmd_extra``) are argv
lists. Each test becomes a family (its model and serve flags, the env every node gets), a
topology (its parallel sizes, node count, executor backend, DP layout, P/D instances), a feature
stack recognised from its flags (on a P/D pair, those both instances share; what one instance
gives alone is the variant's ``prefill``/``decode`` side), and a group of the file's suite; an ``accuracy`` benchmark
becomes the variant's AISBench score (|score − baseline| ≤ threshold), a ``performance`` one a
concurrent phase gated on the baseline's output throughput. What cannot be mapped is a
SourceError at its line.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness import json_input, safe_write
from harness.importers.argv import Flag, flags_of
from harness.importers.nightly_config import config_model
from harness.json_input import JsonInputError
from harness.matrix.load import Matrix, validation_errors
from harness.matrix.schema import JSON_FLAGS, NAME
from harness.matrix.source import Document, MatrixError, SourceError, Where, load_document, suggest

# Flags ppconf plans itself from the topology and the cluster: dropped from the family's flags.
PARALLEL = {
    "--tensor-parallel-size": "tp",
    "--pipeline-parallel-size": "pp",
    "--data-parallel-size": "dp",
}
PLANNED = frozenset(
    {
        *PARALLEL,
        "--distributed-executor-backend",
        "--host",
        "--port",
        "--headless",
        "--data-parallel-size-local",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-start-rank",
        "--data-parallel-rank",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
    }
)
# Env that only fed the flags above (vllm-ascend's runner fills $SERVER_PORT into --port).
PLANNED_ENV = frozenset({"SERVER_PORT"})
# External DP: the env each DP rank's server gets of its own (its slice of the node's devices),
# planned by ppconf from the node's lease.
RANK_ENV = frozenset({"ASCEND_RT_VISIBLE_DEVICES"})
# A custom split of the layers, kept as the env it is (the partition oracle needs the model's layer
# count, which a config does not give); ppconf's P/D plan also writes it into the connector's config.
PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"
# Switches that are a feature of the shipped matrix, and speculative methods by feature.
SWITCH_FEATURES = {
    "--enforce-eager": "enforce-eager",
    "--async-scheduling": "async-scheduling",
    "--enable-prefix-caching": "prefix-caching",
    "--enable-expert-parallel": "expert-parallel",
}
SPECULATIVE = {
    "mtp": "mtp",
    "deepseek_mtp": "mtp",
    "eagle3": "eagle3",
    "ngram": "ngram",
    "dflash": "dflash",
    "dspark": "dspark",
}
# Sampling settings of a benchmark that AISBench's request config takes.
GENERATION = ("temperature", "top_p", "top_k", "seed", "min_p", "presence_penalty", "repetition_penalty")
# Benchmark keys ppconf's own run decides: remote code, and EOS (vllm-ascend's tools/aisbench.py
# reads no ignore_eos of the case: a perf run ignores EOS, as ppconf's does, an accuracy run not).
BENCH_IGNORED = frozenset({"trust_remote_code", "ignore_eos"})
BENCH_NEEDS = ("case_type", "dataset_conf", "request_conf", "max_out_len", "batch_size")
BENCH_KEYS = frozenset(
    {"case_type", "dataset_path", "request_conf", "dataset_conf", "max_out_len", "batch_size", "baseline"}
    | {"threshold", "num_prompts", "request_rate", *GENERATION, *BENCH_IGNORED}
)
MULTI_NODE_KEYS = (
    "test_name",
    "model",
    "num_nodes",
    "npu_per_node",
    "env_common",
    "deployment",
    "benchmarks",
    "disaggregated_prefill",
)
# vllm-ascend's external-DP format (tests/e2e/nightly/multi_node/external_dp): per node a `config`
# entry (its DP ranks, sizes, ports) and a `templates` entry (env and serve argv with ${VAR}s their
# runner fills per DP rank), and a `routing` naming the proxy over all the ranks.
EXTERNAL_DP_KEYS = (
    "test_name",
    "model",
    "num_nodes",
    "npu_per_node",
    "env_common",
    "config_common",
    "routing",
    "config",
    "templates",
    "benchmarks",
)
EXTERNAL_NODE_KEYS = (
    "node_index",
    "host",
    "port_start",
    "dp_rpc_port",
    "dp_group",
    "dp_size",
    "dp_size_local",
    "dp_rank_start",
    "tp_size",
    "pp_size",
    "cp_size",
    "sp_size",
    "dp_address",
)
TEMPLATE_KEYS = ("node_index", "envs", "server_cmd_template")
CASE_KEYS = (
    "name",
    "model",
    "envs",
    "server_cmd",
    "server_cmd_extra",
    "benchmarks",
    "service_mode",
    "prompts",
    "api_keyword_args",
    "test_content",
)
# What a single-node test's `test_content` names, as the endpoint ppconf sends its `prompts` to
# (each with the test's `api_keyword_args`); `[]` is vllm-ascend's "no request tests, AISBench
# only". Other entries (images, EPD) have no mapping and are errors at their line.
TEST_CONTENT = {"completion": "completions", "chat_completion": "chat"}
PLATFORM = "ascend"
# vllm-ascend's own timeouts, as their nightly runner sets them for every test:
# - the health wait: how long the runner waits for /health before it fails the test,
#   `RemoteOpenAIServer(..., max_wait_seconds=2800)` in
#   tests/e2e/nightly/multi_node/internal_dp/scripts/test_multi_node.py (and `max_wait_seconds or
#   2800` in tests/e2e/conftest.py, which the single-node runner leaves at its default);
STARTUP_TIMEOUT_S = 2800
# - a request: the OpenAI client's `timeout=600` of RemoteOpenAIServer.get_client (tests/e2e/conftest.py);
REQUEST_TIMEOUT_S = 600
# - the engine-ready timeout (vLLM's own wait for its engine cores, 600 s by default):
#   `export VLLM_ENGINE_READY_TIMEOUT_S=1800` in tests/e2e/nightly/multi_node/scripts/run.sh, in the
#   env of every process it starts; a config's own env (3000 in several) wins.
ENGINE_READY_ENV = ("VLLM_ENGINE_READY_TIMEOUT_S", "1800")


@dataclass
class Imported:
    """The matrix sections one import writes: a file per config, and the topologies they share."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # file name -> sections
    topologies: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # file name -> the config it came from

    def write(self, out: Path, force: bool = False) -> list[Path]:
        """Write the files into ``out``. A file an earlier import wrote there is replaced; any
        other (hand-written, edited since, a link) stops the import before it writes anything,
        unless ``force`` (``harness.safe_write``)."""
        texts = {}
        for name, sections in {**self.files, "topologies.yaml": {"topologies": self.topologies}}.items():
            source = self.sources.get(name, ", ".join(sorted(self.sources.values())))
            head = (
                f"# Imported by `ppconf import vllm-ascend-nightly` from {source}; edit the config and import again.\n"
            )
            texts[out / name] = head + yaml.safe_dump(sections, sort_keys=False, width=1000, allow_unicode=True)
        for path in texts:
            safe_write.check(path, force=force, root=out)
        return [safe_write.write_text(path, text, force=force, root=out) for path, text in texts.items()]


def slug(text: str) -> str:
    """A matrix name from a test's name: lower case, runs of other characters as one '-'."""
    s = re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-._")
    return re.sub(r"^test-", "", s) or "test"


def import_configs(paths: list[Path], base: Matrix, parser: Any | None) -> Imported:
    """The matrix sections of the configs at ``paths``, over the matrix ``base`` (its features
    are recognised, its names not redefined). ``parser``: vLLM's serve parser, or None for the
    plain split. Raises MatrixError with every problem found."""
    imported, errors = import_each(paths, base, parser)
    if errors:
        raise MatrixError([e for errs in errors.values() for e in errs])
    return imported


def import_each(paths: list[Path], base: Matrix, parser: Any | None) -> tuple[Imported, dict[str, list[SourceError]]]:
    """Each config on its own: the sections of those that import, and the problems of each that
    does not, by its path (a bad file leaves nothing of its own behind, topologies included)."""
    imported = Imported()
    errors: dict[str, list[SourceError]] = {}
    for path in paths:
        topologies = dict(imported.topologies)
        try:
            doc = load_document(path, str(path))
            name, sections = _config(doc, base, parser, topologies)
        except MatrixError as err:
            errors[str(path)] = list(err.errors)
            continue
        except SourceError as err:
            errors[str(path)] = [err]
            continue
        if name in imported.files:
            errors[str(path)] = [
                SourceError(doc.where(), f"a second config named {name!r} (file names give the suites)")
            ]
            continue
        imported.topologies = topologies
        imported.files[name] = sections
        imported.sources[name] = str(path)
    return imported, errors


def config_tests(path: Path) -> tuple[str, list[Test]]:
    """The suite a config imports as and its tests as written (``--explain`` sets them beside the
    plans); the config is read as the import reads it, so a bad one raises the same errors."""
    doc = load_document(path, str(path))
    return slug(doc.path.stem), _tests(doc, doc.root)


def _tests(doc: Document, data: Any) -> list[Test]:
    """The tests of a config in any of vllm-ascend's formats: single-node `test_cases`, a
    multi-node `deployment`, or external DP (`routing`, `config`, `templates`)."""
    if isinstance(data, dict) and "test_cases" in data:
        return _single_node(doc, data)
    if isinstance(data, dict) and "deployment" in data:
        return [_multi_node(doc, data)]
    if isinstance(data, dict) and "templates" in data:
        return [_external_dp(doc, data)]
    raise SourceError(doc.where(), "not a vllm-ascend nightly config: no test_cases, deployment nor templates")


def _config(doc: Document, base: Matrix, parser: Any | None, topologies: dict) -> tuple[str, dict[str, Any]]:
    data = doc.root
    if isinstance(data, dict):
        try:
            config_model(data).model_validate(data)
        except ValidationError as err:
            raise MatrixError(validation_errors(doc, config_model(data), (), err)) from None
    suite = slug(doc.path.stem)
    tests = _tests(doc, data)
    families: dict[str, Any] = {}
    groups: list[dict[str, Any]] = []
    rules: list[dict[str, Any]] = []
    for test in tests:
        family, group = _test(test, base, parser, topologies)
        if test.family in families or test.family in base.families:
            raise SourceError(test.where, f"family {test.family!r} is already defined (rename the test)")
        families[test.family] = family
        groups.append(group)
        # the test as vllm-ascend runs it is their claim; other layouts of it (a PP topology
        # added in a layer above) are decided by the matrices' own rules
        rules.append(
            {
                "when": f'family == "{test.family}" && topology == "{group["topologies"][0]}"',
                "expect": "supported",
                "why": f"vllm-ascend's nightly runs this test ({doc.path.name}: {test.title})",
            }
        )
    title = str(data.get("test_name") or doc.path.stem)
    return f"{suite}.yaml", {
        "families": families,
        "suites": {
            suite: {
                "title": f"vllm-ascend nightly: {title}",
                "platform": PLATFORM,
                "startup_timeout_s": STARTUP_TIMEOUT_S,
                "request_timeout_s": REQUEST_TIMEOUT_S,
                "groups": groups,
            }
        },
        "rules": rules,
    }


@dataclass
class ConfigNode:
    """One `vllm serve` of a test: its flags and env as written."""

    tokens: list[tuple[str, Where | None]]  # the serve flags as written, model left out
    env: dict[str, tuple[str, Where]]
    where: Where
    planned_env: dict[str, str] = field(default_factory=dict)  # PLANNED_ENV as written: left out


def _planned_env(env: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (env or {}).items() if k in PLANNED_ENV} if isinstance(env, dict) else {}


@dataclass
class Test:
    family: str
    title: str
    model: str
    nodes: list[ConfigNode]  # the api node first
    benchmarks: dict[str, tuple[dict[str, Any], Where]]
    where: Where
    prefill: list[int] = field(default_factory=list)  # P/D: host indexes of each instance
    decode: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)  # single-node request tests
    hosts: int = 0  # external DP: the hosts its servers (one per DP rank) run on; else one per node
    side_hosts: dict[str, int] = field(default_factory=dict)  # external-DP P/D: the hosts of each side
    unplanned: list[str] = field(default_factory=list)  # what the config runs that ppconf's plan has not


def _check_keys(doc: Document, loc: tuple, data: Any, known: tuple[str, ...], needs: tuple[str, ...]) -> None:
    if not isinstance(data, dict):
        raise SourceError(doc.where(loc), "a mapping is expected")
    missing = [k for k in needs if k not in data]
    if missing:
        raise SourceError(doc.where(loc), f"needs {', '.join(missing)}")
    for key in data:
        if str(key).startswith("_"):  # vllm-ascend's YAML anchors live under _names
            continue
        if key not in known:
            raise SourceError(doc.where((*loc, key)), f"{key!r}: not mapped{suggest(str(key), known)}")


def _env(doc: Document, loc: tuple, env: Any) -> dict[str, tuple[str, Where]]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise SourceError(doc.where(loc), "envs must be a mapping of NAME: value")
    return {str(k): (str(v), doc.value_where((*loc, k))) for k, v in env.items() if k not in PLANNED_ENV}


def _tokens_of_string(doc: Document, loc: tuple, text: str) -> list[tuple[str, Where | None]]:
    """A command line written as one (folded) string: its tokens, each with the line it starts on."""
    start = doc.value_where(loc)
    lines = doc.path.read_text().splitlines()[start.line - 1 :]
    out: list[tuple[str, Where | None]] = []
    row = 0
    try:
        tokens = shlex.split(text)
    except ValueError as err:  # an unbalanced quote, a trailing backslash
        raise SourceError(start, f"server_cmd is not a shell command line: {err} ({text[:60]!r}...)") from None
    for token in tokens:
        probe = token.split()[0] if token.split() else token
        at = next((r for r in range(row, len(lines)) if probe in lines[r]), None)
        if at is None:
            out.append((token, start))
            continue
        row = at
        out.append((token, Where(start.file, start.line + at, lines[at].index(probe) + 1)))
    return out


def _multi_node(doc: Document, data: dict) -> Test:
    _check_keys(doc, (), data, MULTI_NODE_KEYS, ("model", "deployment"))
    nodes = []
    deployment = data.get("deployment") or []
    for i, entry in enumerate(deployment):
        text = entry.get("server_cmd") if isinstance(entry, dict) else None
        if not isinstance(text, str):
            raise SourceError(doc.where(("deployment", i)), "deployment entry needs server_cmd (a vllm serve line)")
        tokens = _tokens_of_string(doc, ("deployment", i, "server_cmd"), text)
        words = [t for t, _ in tokens]
        if words[:2] != ["vllm", "serve"] or len(words) < 3:
            raise SourceError(
                doc.value_where(("deployment", i, "server_cmd")), "server_cmd must be `vllm serve MODEL ...`"
            )
        if words[2] != data.get("model"):
            raise SourceError(tokens[2][1], f"serves {words[2]!r}, the config's model is {data.get('model')!r}")
        env = _env(doc, ("deployment", i, "envs"), entry.get("envs"))
        nodes.append(ConfigNode(tokens[3:], env, doc.where(("deployment", i)), _planned_env(entry.get("envs"))))
    if data.get("num_nodes") is not None and int(data["num_nodes"]) != len(nodes):
        raise SourceError(
            doc.value_where(("num_nodes",)), f"num_nodes {data['num_nodes']} but {len(nodes)} deployment entries"
        )
    test = Test(
        family=slug(str(data.get("test_name") or doc.path.stem)),
        title=str(data.get("test_name") or doc.path.stem),
        model=str(data["model"]),
        nodes=nodes,
        benchmarks=_benchmarks(doc, ("benchmarks",), data.get("benchmarks")),
        where=doc.where(("test_name",)) if "test_name" in data else doc.where(),
    )
    pd = data.get("disaggregated_prefill") or {}
    if pd.get("enabled"):
        test.prefill = [int(i) for i in pd.get("prefiller_host_index", [])]
        test.decode = [int(i) for i in pd.get("decoder_host_index", [])]
        if not test.prefill or not test.decode:
            raise SourceError(
                doc.where(("disaggregated_prefill",)), "needs prefiller_host_index and decoder_host_index"
            )
    return test


# The ${VAR}s vllm-ascend's external-DP runner fills in a template, from a DP rank's place
# (tests/e2e/nightly/multi_node/external_dp/scripts: `_build_variables`, `RankResolver`).
TEMPLATE_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")
ENV_VAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


ROUTINGS = ("generic_dp", "disaggregated_prefill")
DP_GROUPS = {"prefiller": "prefill", "decoder": "decode"}  # routing.groups' names, by P/D side


def _external_dp(doc: Document, data: dict) -> Test:
    """An external-DP test: each node's DP ranks expanded as their runner expands them (one
    `vllm serve` per rank, its template filled with the rank's sizes, rank, port and devices),
    the ranks in DP-rank order. ``generic_dp`` routing is one instance over all the nodes; with
    ``disaggregated_prefill`` the routing's groups name the nodes of each P/D side, every side an
    instance of its own DP ranks (the prefill's servers, then the decode's), the proxy over all."""
    routing = data.get("routing")
    if not isinstance(routing, dict):
        raise SourceError(doc.where(("routing",) if "routing" in data else ()), "needs routing (its type and proxy)")
    kind = routing.get("type")
    if kind not in ROUTINGS:
        raise SourceError(
            doc.value_where(("routing", "type")) or doc.where(("routing",)),
            f"routing.type {kind!r}: not mapped (ppconf maps {', '.join(ROUTINGS)})",
        )
    _check_keys(doc, (), data, EXTERNAL_DP_KEYS, ("model", "routing", "config", "templates"))
    nodes, templates = data["config"], data["templates"]
    for key, entries in (("config", nodes), ("templates", templates)):
        if not isinstance(entries, list) or len(entries) != int(data.get("num_nodes") or len(nodes)):
            raise SourceError(doc.where((key,)), f"{key} needs one entry per node (num_nodes {data.get('num_nodes')})")
    groups = _dp_groups(doc, routing, len(nodes)) if kind == "disaggregated_prefill" else {"": list(range(len(nodes)))}
    test = Test(
        family=slug(str(data.get("test_name") or doc.path.stem)),
        title=str(data.get("test_name") or doc.path.stem),
        model=str(data["model"]),
        nodes=[],
        benchmarks=_benchmarks(doc, ("benchmarks",), data.get("benchmarks")),
        where=doc.where(("test_name",)) if "test_name" in data else doc.where(),
        hosts=len(nodes),
    )
    for role, members in groups.items():
        ranks = _group_ranks(doc, nodes, templates, members, role)
        first = len(test.nodes)
        test.nodes += [n for _, n in sorted(ranks, key=lambda r: r[0])]
        if role:
            getattr(test, role).extend(range(first, len(test.nodes)))
            test.side_hosts[role] = len(members)
    return test


def _dp_groups(doc: Document, routing: dict, count: int) -> dict[str, list[int]]:
    """The node indexes of each P/D side, from ``routing.groups``."""
    groups = routing.get("groups")
    if not isinstance(groups, dict) or set(groups) != set(DP_GROUPS):
        raise SourceError(
            doc.where(("routing", "groups") if "groups" in routing else ("routing",)),
            f"disaggregated_prefill routing needs groups {' and '.join(DP_GROUPS)} (lists of node indexes)",
        )
    out: dict[str, list[int]] = {}
    seen: set[int] = set()
    for name, role in DP_GROUPS.items():
        members = groups[name]
        bad = not isinstance(members, list) or not members
        bad = bad or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in members)
        if bad or seen & set(members):
            raise SourceError(
                doc.value_where(("routing", "groups", name)) or doc.where(("routing", "groups", name)),
                f"groups.{name} {members!r}: node indexes 0..{count - 1}, each node in one group",
            )
        seen |= set(members)
        out[role] = list(members)
    if len(seen) != count:
        raise SourceError(doc.where(("routing", "groups")), f"nodes {sorted(set(range(count)) - seen)} in no group")
    return out


def _group_ranks(
    doc: Document, nodes: list, templates: list, members: list[int], role: str
) -> list[tuple[int, ConfigNode]]:
    """The DP ranks of one instance (all the nodes, or one P/D side's): a ConfigNode per rank."""
    ranks: list[tuple[int, ConfigNode]] = []
    sizes = None
    for j, i in enumerate(members):
        node, template = nodes[i], templates[i]
        _check_keys(doc, ("config", i), node, EXTERNAL_NODE_KEYS, ("port_start", "dp_rpc_port", "dp_address"))
        _check_keys(doc, ("templates", i), template, TEMPLATE_KEYS, ("server_cmd_template",))
        group = node.get("dp_group")
        if role and group is not None and group != role:
            raise SourceError(
                doc.value_where(("config", i, "dp_group")),
                f"dp_group {group!r} on a node routing.groups puts in {role}",
            )
        for key in ("cp_size", "sp_size"):
            if _number(doc, ("config", i), node, key, 1) != 1:
                raise SourceError(doc.value_where(("config", i, key)), f"{key} {node[key]}: not mapped (ppconf maps 1)")
        mine = {k: _number(doc, ("config", i), node, k, 1) for k in ("dp_size", "dp_size_local", "tp_size", "pp_size")}
        sizes = sizes or mine
        if mine != sizes:
            raise SourceError(
                doc.where(("config", i)),
                f"sizes {mine}, node {members[0]} has {sizes}: ppconf gives every node of an instance one",
            )
        start = _number(doc, ("config", i), node, "dp_rank_start", 0)
        if start != j * mine["dp_size_local"] or mine["dp_size"] != len(members) * mine["dp_size_local"]:
            raise SourceError(
                doc.where(("config", i)),
                f"DP ranks {start}..{start + mine['dp_size_local'] - 1} of {mine['dp_size']} on node {i}: ppconf "
                f"plans dp_size / (its nodes) ranks per node of an instance, its j-th node holding ranks from "
                f"j * dp_size_local",
            )
        argv = template["server_cmd_template"]
        if not isinstance(argv, list):
            raise SourceError(doc.where(("templates", i, "server_cmd_template")), "server_cmd_template must be a list")
        per_rank = mine["tp_size"] * mine["pp_size"]
        for local in range(mine["dp_size_local"]):
            values = {
                "HOST": str(node.get("host", "0.0.0.0")),
                "PORT": str(_number(doc, ("config", i), node, "port_start", 0) + local),
                "PORT_START": str(node["port_start"]),
                "DP_SIZE": str(mine["dp_size"]),
                "DP_SIZE_LOCAL": str(mine["dp_size_local"]),
                "DP_RANK_START": str(start),
                "DP_RANK": str(start + local),
                "LOCAL_RANK": str(local),
                "TP_SIZE": str(mine["tp_size"]),
                "PP_SIZE": str(mine["pp_size"]),
                "DP_ADDRESS": str(node["dp_address"]),
                "DP_RPC_PORT": str(node["dp_rpc_port"]),
                "VISIBLE_DEVICES": ",".join(str(d) for d in range(local * per_rank, (local + 1) * per_rank)),
            }
            env = {k: (_fill(TEMPLATE_VAR, v, values), w) for k, (v, w) in _raw_env(doc, i, template).items()}
            own = {k: v for k, (v, _) in env.items() if k in PLANNED_ENV | RANK_ENV}
            words = {k: v for k, (v, _) in env.items()}
            tokens: list[tuple[str, Where | None]] = []
            for k, word in enumerate(argv):
                text = _fill(TEMPLATE_VAR, str(word), values)
                text = _fill(ENV_VAR, text, words)
                tokens.append((text, doc.value_where(("templates", i, "server_cmd_template", k))))
            _same_sizes(tokens, mine, doc.where(("config", i)))
            kept = {k: v for k, v in env.items() if k not in own}
            ranks.append((start + local, ConfigNode(tokens, kept, doc.where(("config", i)), own)))
    return ranks


def _same_sizes(tokens: list[tuple[str, Where | None]], sizes: dict[str, int], where: Where) -> None:
    """The sizes a rank's filled template gives vLLM are its node entry's (from which their runner
    slices the rank's devices, and ppconf plans it)."""
    given = _sizes(flags_of(tokens, None))
    for flag, key in PARALLEL.items():
        if given[key] != sizes[f"{key}_size"]:
            f = next((f for f in flags_of(tokens, None) if f.name == flag), None)
            raise SourceError(
                f.value_where if f else where,
                f"{flag} {given[key]} but the node's {key}_size is {sizes[f'{key}_size']}: the rank's devices "
                f"are sliced by {key}_size",
            )


def _number(doc: Document, loc: tuple, node: dict, key: str, default: int) -> int:
    """A whole number of a node's entry (a size, a rank, a port), or an error at its line."""
    value = node.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SourceError(
            doc.value_where((*loc, key)) or doc.where(loc), f"{key} {value!r}: a whole number is expected"
        )
    return value


def _fill(pattern: re.Pattern[str], text: str, values: dict[str, str]) -> str:
    """``text`` with the variables ``values`` gives filled in; others (a host's IP) left as written."""
    return pattern.sub(lambda m: values.get(m[1], m[0]), text)


def _raw_env(doc: Document, i: int, template: dict) -> dict[str, tuple[str, Where]]:
    """A template's env as written, the runner's port variable included (the argv refers to it)."""
    envs = template.get("envs") or {}
    if not isinstance(envs, dict):
        raise SourceError(doc.where(("templates", i, "envs")), "envs must be a mapping of NAME: value")
    return {str(k): (str(v), doc.value_where(("templates", i, "envs", k))) for k, v in envs.items()}


def _single_node(doc: Document, data: dict) -> list[Test]:
    tests = []
    for i, case in enumerate(data.get("test_cases") or []):
        _check_keys(doc, ("test_cases", i), case, CASE_KEYS, ("model", "server_cmd"))
        tokens: list[tuple[str, Where | None]] = []
        for key in ("server_cmd", "server_cmd_extra"):
            argv = case.get(key) or []
            if not isinstance(argv, list):
                raise SourceError(doc.where(("test_cases", i, key)), f"{key} must be an argv list")
            tokens += [(str(t), doc.value_where(("test_cases", i, key, j))) for j, t in enumerate(argv)]
        name = str(case.get("name") or f"{doc.path.stem}-{i}")
        envs = case.get("envs")
        node = ConfigNode(
            tokens, _env(doc, ("test_cases", i, "envs"), envs), doc.where(("test_cases", i)), _planned_env(envs)
        )
        tests.append(
            Test(
                family=slug(name),
                title=name,
                model=str(case["model"]),
                nodes=[node],
                benchmarks=_benchmarks(doc, ("test_cases", i, "benchmarks"), case.get("benchmarks")),
                where=doc.where(("test_cases", i, "name")),
                requests=_requests(doc, ("test_cases", i), case),
            )
        )
    return tests


def _requests(doc: Document, loc: tuple, case: dict) -> list[dict[str, Any]]:
    """A single-node test's request tests as ppconf's explicit requests: each of its `prompts`
    sent to each endpoint its `test_content` names, with its `api_keyword_args`. vLLM samples at
    temperature 1 unless a request says otherwise, so a request the config leaves unseeded gets
    `seed: 0`: the case and its reference then sample alike and their answers can be compared
    (vllm-ascend's own test only checks that each request is answered)."""
    mode = case.get("service_mode")
    if mode not in (None, "openai"):
        raise SourceError(
            doc.value_where((*loc, "service_mode")) or doc.where((*loc, "service_mode")),
            f"service_mode {mode!r}: only 'openai' is mapped (ppconf does not launch EPD deployments)",
        )
    content = case.get("test_content")
    if content is None or content == []:
        return []  # no request tests: the config's benchmarks and ppconf's own comparison stand
    prompts = case.get("prompts")
    if not prompts:
        raise SourceError(
            doc.where((*loc, "test_content")),
            "test_content without prompts: ppconf sends the config's own prompts (vllm-ascend's default list "
            "is not part of the config)",
        )
    kwargs = dict(case.get("api_keyword_args") or {})
    if "seed" not in kwargs and kwargs.get("temperature", 1) != 0:
        kwargs["seed"] = 0
    out = []
    for j, kind in enumerate(content):
        endpoint = TEST_CONTENT.get(str(kind))
        if endpoint is None:
            raise SourceError(
                doc.value_where((*loc, "test_content", j)) or doc.where((*loc, "test_content")),
                f"test_content {kind!r}: not mapped (ppconf maps {', '.join(sorted(TEST_CONTENT))})",
            )
        for n, prompt in enumerate(prompts):
            request: dict[str, Any] = {"name": f"{slug(str(kind))}-{n}", "endpoint": endpoint}
            if endpoint == "chat":
                request["messages"] = [{"role": "user", "content": str(prompt)}]
            else:
                request["prompt"] = str(prompt)
            out.append(request | kwargs)
    return out


def _benchmarks(doc: Document, loc: tuple, body: Any) -> dict[str, tuple[dict[str, Any], Where]]:
    out = {}
    for key, bench in (body or {}).items():
        if bench is None:  # vllm-ascend's way of leaving a benchmark out
            continue
        _check_keys(doc, (*loc, key), bench, tuple(sorted(BENCH_KEYS)), BENCH_NEEDS)
        out[str(key)] = (bench, doc.where((*loc, key)))
    return out


def _test(test: Test, base: Matrix, parser: Any | None, topologies: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    per_node = [flags_of(n.tokens, parser) for n in test.nodes]
    sides: dict[str, tuple[list[Flag], dict[str, str]]] = {}
    kv_features: dict[str, list[str]] = {}
    if test.prefill:
        topology, kv_features = _pd_topology(test, per_node, base)
        hosts = {"prefill": test.prefill, "decode": test.decode}
        by_role = {
            role: _same_flags([per_node[i] for i in idx], [f"host {i}" for i in idx], {"--kv-transfer-config"})
            for role, idx in hosts.items()
        }
        env_by_role = {role: _same_env([test.nodes[i] for i in idx]) for role, idx in hosts.items()}
        flags, role_flags = _split_flags(by_role["prefill"], by_role["decode"])
        env, role_env = _split_env(env_by_role["prefill"], env_by_role["decode"])
        sides = {role: (role_flags[role], role_env[role]) for role in hosts}
    else:
        topology = _topology(test, per_node[0])
        flags = _same_flags(per_node, [f"node {i}" for i in range(len(per_node))], set())
        env = {k: v for k, (v, _) in _same_env(test.nodes).items()}
    for f in [*flags, *(f for side, _ in sides.values() for f in side)]:
        if f.value is not None and "$" in f.value:
            raise SourceError(
                f.value_where, f"{f.name} {f.value!r}: a shell variable ppconf cannot fill (launches are argv lists)"
            )
        if f.name == "--kv-transfer-config":
            raise SourceError(f.where, "--kv-transfer-config without disaggregated_prefill: not mapped")
    flags = [_json_normalised(f) for f in flags]
    sides = {role: ([_json_normalised(f) for f in own], own_env) for role, (own, own_env) in sides.items()}
    name, value = ENGINE_READY_ENV  # their runner's, where the config sets none
    if name not in env and not any(name in own_env for _, own_env in sides.values()):
        env = {**env, name: value}
    elif name not in env:  # one instance of a P/D pair sets its own: the other runs with the runner's
        sides = {role: (own, {name: value, **own_env}) for role, (own, own_env) in sides.items()}
    # a feature one instance's own flags express is the case's too (its rules and cells apply),
    # and the other instance runs without it, as the config has it
    features = _features(flags, base)
    own_features = {role: _features(own, base) + kv_features[role] for role, (own, _) in sides.items()}
    for names in own_features.values():
        features += [name for name in names if name not in features]
    shared_features = set(_features(flags, base))
    group_args = _decided_by_config(flags, features, base)
    serve_args = [a for f in flags if f.name not in group_args for a in f.argv()]
    variant: dict[str, Any] = {
        # the config names a checkpoint, not its architecture: rules on `arch` do not match it
        "architecture": "unknown",
        "supports_pp": True,
        "model": test.model,
        "platforms": [PLATFORM],
        "serve_args": serve_args,
        "env": env,
    }
    group_sides: dict[str, Any] = {}
    for role, (own_flags, own_env) in sides.items():
        # what one instance of the pair takes beyond the flags and env both share; its JSON flags
        # a feature would change go to the group's side, which decides over features
        decided = _decided_by_config(own_flags, features, base)
        side: dict[str, Any] = {}
        if len(decided) < len(own_flags):
            side["args"] = [a for f in own_flags if f.name not in decided for a in f.argv()]
        if own_env:
            side["env"] = own_env
        if side:
            variant[role] = side
        group_side: dict[str, Any] = {}
        if decided:
            group_side["args"] = [a for f in own_flags if f.name in decided for a in f.argv()]
        skipped = [f for f in features if f not in shared_features and f not in own_features[role]]
        if skipped:
            group_side["skip_features"] = skipped
        if group_side:
            group_sides[role] = group_side
    score, phases = _scores(test)
    if score is not None:
        variant["reference"] = {"kind": "score", "score": score}
    family = {"title": test.title, "variants": {"nightly": variant}}
    name = _topology_name(topology, base, topologies)
    group: dict[str, Any] = {
        "families": [test.family],
        "topologies": [name],
        "features": ["+".join(features) or "none"],
    }
    if group_args:
        group["args"] = [a for f in flags if f.name in group_args for a in f.argv()]
    group.update(group_sides)
    if test.requests:
        phases = [*phases, {"kind": "explicit", "name": "test-content", "explicit": test.requests}]
    if phases:
        group["workload"] = [{"kind": "sequential"}, *phases]
    return family, group


def _same_env(nodes: list[ConfigNode]) -> dict[str, tuple[str, Where]]:
    """The env the nodes share (each value with where it was written); a name set on some nodes
    only, or set to another value on one, is an error: ppconf gives the launches of one instance
    one env."""
    first = nodes[0].env
    for node in nodes[1:]:
        for name in sorted(set(first) ^ set(node.env)):
            where = (first.get(name) or node.env[name])[1]
            raise SourceError(where, f"env {name} is set on some nodes only: ppconf gives every node one env")
        for name, (value, where) in node.env.items():
            if value != first[name][0]:
                raise SourceError(where, f"env {name}={value!r} differs from the first node's {first[name][0]!r}")
    bad = next((n for n in first if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)), None)
    if bad:
        raise SourceError(first[bad][1], f"env name {bad!r} is not a shell identifier")
    return first


def _split_flags(prefill: list[Flag], decode: list[Flag]) -> tuple[list[Flag], dict[str, list[Flag]]]:
    """The flags both instances of a P/D pair give alike, and each instance's own (a flag on one
    side only, or with another value there)."""
    values = {f.name: f.value for f in decode}
    shared = [f for f in prefill if f.name in values and values[f.name] == f.value]
    names = {f.name for f in shared}
    return shared, {
        "prefill": [f for f in prefill if f.name not in names],
        "decode": [f for f in decode if f.name not in names],
    }


def _split_env(
    prefill: dict[str, tuple[str, Where]], decode: dict[str, tuple[str, Where]]
) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The env both instances of a P/D pair set alike, and each instance's own."""
    shared = {k: v for k, (v, _) in prefill.items() if k in decode and decode[k][0] == v}
    return shared, {
        role: {k: v for k, (v, _) in env.items() if k not in shared}
        for role, env in (("prefill", prefill), ("decode", decode))
    }


def _same_flags(nodes: list[list[Flag]], labels: Any, also: set[str]) -> list[Flag]:
    """The flags every launch of one instance shares, once planned flags are left out: ppconf
    gives each launch of an instance one set of flags; a flag on one launch only is an error."""

    def kept(flags: list[Flag]) -> dict[str, Flag]:
        return {f.name: f for f in flags if f.name not in PLANNED and f.name not in also}

    first = kept(nodes[0])
    for label, flags in zip(labels[1:], nodes[1:], strict=True):
        other = kept(flags)
        for name in sorted(set(first) | set(other)):
            a, b = first.get(name), other.get(name)
            if a is None or b is None or a.value != b.value:
                where = (b or a).where  # type: ignore[union-attr]
                raise SourceError(
                    where,
                    f"{name} is {a.value if a else 'not given'!s} on {labels[0]} and {b.value if b else 'not given'!s} "
                    f"on {label}: ppconf gives every launch of one instance the same flags (only the parallel "
                    f"sizes differ)",
                )
    return list(first.values())


def _int(flags: list[Flag], name: str, default: int = 1) -> int:
    f = next((f for f in flags if f.name == name), None)
    if f is None:
        return default
    try:
        return int(str(f.value))
    except ValueError:
        raise SourceError(f.value_where, f"{name} {f.value!r}: not a number") from None


def _sizes(flags: list[Flag]) -> dict[str, int]:
    return {key: _int(flags, flag) for flag, key in PARALLEL.items()}


def _topology(test: Test, flags: list[Flag]) -> dict[str, Any]:
    out: dict[str, Any] = {**_sizes(flags), "nnodes": test.hosts or len(test.nodes)}
    backend = next((f for f in flags if f.name == "--distributed-executor-backend"), None)
    if backend is not None:
        if backend.value not in ("mp", "ray"):
            raise SourceError(
                backend.value_where, f"--distributed-executor-backend {backend.value!r}: ppconf plans mp or ray"
            )
        out["backend"] = backend.value
    names = {f.name for f in flags}
    if out["dp"] > 1 and out["nnodes"] > 1:
        out["dp_mode"] = "external" if "--data-parallel-rank" in names else "internal"
    return out


def _pd_topology(test: Test, per_node: list[list[Flag]], base: Matrix) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The pair's topology, and by side the feature whose own connector a side's config gives."""
    for i in [*test.prefill, *test.decode]:
        if i >= len(per_node):
            raise SourceError(test.where, f"disaggregated_prefill names host {i}, the config has {len(per_node)}")
    prefill, decode = per_node[test.prefill[0]], per_node[test.decode[0]]
    out: dict[str, Any] = {**_sizes(prefill), "nnodes": test.side_hosts.get("prefill", len(test.prefill))}
    out["decode"] = {**_sizes(decode), "nnodes": test.side_hosts.get("decode", len(test.decode))}
    for side, flags in ((out, prefill), (out["decode"], decode)):
        # a server per DP rank (external DP): the side's ranks are ppconf's dp_mode external
        if side["dp"] > 1 and any(f.name == "--data-parallel-rank" for f in flags):
            side["dp_mode"] = "external"
    connector = None
    by_feature: dict[str, list[str]] = {"prefill": [], "decode": []}
    for role, hosts in (("prefill", test.prefill), ("decode", test.decode)):
        for i in hosts:
            feature = _kv_feature(per_node[i], role, base)
            if feature is not None:
                by_feature[role] += [feature] if feature not in by_feature[role] else []
                continue
            connector = _kv_transfer(test.nodes[i], per_node[i], role, out, connector)
    if connector is not None:
        out["connector"] = connector
    return out, by_feature


def _kv_feature(flags: list[Flag], role: str, base: Matrix) -> str | None:
    """The feature whose own connector for this side (``kv-transfer-config`` on its side) the
    host's config is, but for its port, which ppconf's plan assigns (``harness.plan.pd``)."""
    kv = next((f for f in flags if f.name == "--kv-transfer-config"), None)
    if kv is None:
        return None
    config = {k: v for k, v in _json(kv).items() if k != "kv_port"}
    for name, feature in base.features.items():
        own = feature.side(role).configs.get("kv-transfer-config")
        if own and {k: v for k, v in own.items() if k != "kv_port"} == config:
            return name
    return None


# The keys of --kv-transfer-config ppconf's P/D plan writes itself (harness.plan.pd), by value
KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
KV_PLANNED = ("kv_connector", "kv_role", "kv_port", "engine_id", "kv_connector_extra_config")
KV_SIZES = {"dp_size": "dp", "tp_size": "tp", "pp_size": "pp"}


def _kv_transfer(node: ConfigNode, flags: list[Flag], role: str, topology: dict, connector: str | None) -> str:
    """The connector of one P/D host's --kv-transfer-config, checked against what ppconf's plan
    writes in its place (the connector, the host's role, ports, and the pair's sizes): anything
    else the config says there would be lost, and is an error at its line."""
    kv = next((f for f in flags if f.name == "--kv-transfer-config"), None)
    if kv is None:
        raise SourceError(node.where, f"a {role} host without --kv-transfer-config")
    config = _json(kv)
    for key in config:
        if key not in KV_PLANNED:
            raise SourceError(
                _key_where(kv, key),
                f"--kv-transfer-config key {key!r}: not mapped (ppconf's P/D plan writes {', '.join(KV_PLANNED)})",
            )
    mine = config.get("kv_connector")
    if not mine:
        raise SourceError(kv.where, "--kv-transfer-config names no kv_connector")
    if connector is not None and mine != connector:
        raise SourceError(
            _key_where(kv, "kv_connector"),
            f"kv_connector {mine!r} on a {role} host, {connector!r} on the prefill host: "
            "ppconf's P/D pair has one connector",
        )
    if config.get("kv_role", KV_ROLES[role]) != KV_ROLES[role]:
        raise SourceError(
            _key_where(kv, "kv_role"), f"kv_role {config['kv_role']!r} on a {role} host: ppconf plans {KV_ROLES[role]}"
        )
    extra = config.get("kv_connector_extra_config") or {}
    for side, sizes in extra.items():
        instance = topology if side == "prefill" else topology["decode"] if side == "decode" else None
        if instance is None or not isinstance(sizes, dict):
            raise SourceError(
                _key_where(kv, "kv_connector_extra_config", side),
                f"kv_connector_extra_config key {side!r}: not mapped (ppconf writes prefill, decode)",
            )
        for key, value in sizes.items():
            if key == "pp_layer_partition" and side == "prefill":
                # ppconf's plan writes the prefill's partition there: the one its env gives
                given = node.env.get(PARTITION_ENV, ("", None))[0] if role == "prefill" else value
                if value != given:
                    raise SourceError(
                        _key_where(kv, "kv_connector_extra_config", side, key),
                        f"kv_connector_extra_config.prefill.pp_layer_partition {value!r}: the prefill host's "
                        f"{PARTITION_ENV} is {given or 'not set'!r} (ppconf writes it from the case's partition)",
                    )
                continue
            if key not in KV_SIZES or value != instance[KV_SIZES[key]]:
                size = f"{KV_SIZES[key]}={instance[KV_SIZES[key]]}" if key in KV_SIZES else "no such size"
                raise SourceError(
                    _key_where(kv, "kv_connector_extra_config", side, key),
                    f"kv_connector_extra_config.{side}.{key} {value!r}: the {side} instance has {size} "
                    f"(ppconf writes these sizes from the topology)",
                )
    return str(mine)


def _key_where(flag: Flag, *path: str) -> Where | None:
    """Where a key of a JSON flag's value is written: each key of ``path`` searched for from the
    place of the one before it, starting at the value's start (that start, if one is not found)."""
    start = flag.value_where
    if start is None:
        return flag.where
    lines = Path(start.file).read_text().splitlines()
    line, col = start.line - 1, start.column - 1
    for key in path:
        for n in range(line, len(lines)):
            found = lines[n].find(f'"{key}"', col if n == line else 0)
            if found >= 0:
                line, col = n, found
                break
        else:
            return start
    return Where(start.file, line + 1, col + 1)


def _topology_name(topology: dict[str, Any], base: Matrix, topologies: dict) -> str:
    """The shipped topology of these values, or a new one named after them."""
    for name, t in base.topologies.items():
        mine = t.model_dump(exclude={"title", "aliases"}, exclude_defaults=True)
        if mine == _defaults_out(topology):
            return name
    parts = [f"tp{topology['tp']}"]
    parts += [f"{k}{topology[k]}" for k in ("pp", "dp") if topology[k] > 1]
    if topology["nnodes"] > 1:
        parts.append(f"{topology['nnodes']}node")
    if "decode" in topology:
        d = topology["decode"]
        parts = ["pd", "p", *parts, "d", f"tp{d['tp']}"] + [f"{k}{d[k]}" for k in ("pp", "dp") if d[k] > 1]
    parts += [topology[k] for k in ("backend", "dp_mode") if k in topology]
    name = "-".join(str(p) for p in parts) + "-nightly"
    entry = {"title": f"vllm-ascend nightly layout {name}", **topology}
    if topologies.get(name, entry) != entry:
        raise SourceError(None, f"two configs need topologies both named {name!r}")
    topologies[name] = entry
    return name


def _defaults_out(topology: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in topology.items() if not (k in ("tp", "pp", "dp", "nnodes") and v == 1)}
    if "decode" in out:
        out["decode"] = {k: v for k, v in out["decode"].items() if v != 1}
    return out


def _json(flag: Flag) -> dict[str, Any]:
    try:
        value = json_input.loads(str(flag.value), flag.name)
    except JsonInputError as err:
        raise SourceError(flag.value_where, f"{flag.name}: {err.message}") from None
    if not isinstance(value, dict):
        raise SourceError(flag.value_where, f"{flag.name}: a JSON object is expected")
    return value


def _json_normalised(flag: Flag) -> Flag:
    """A JSON flag written over several lines, as one line of compact JSON."""
    if flag.name[2:] not in JSON_FLAGS:
        return flag
    return Flag(flag.name, json.dumps(_json(flag), separators=(",", ":")), flag.where, flag.value_where)


def _features(flags: list[Flag], base: Matrix) -> list[str]:
    """The shipped features the flags express (those the matrix defines)."""
    found = []
    for f in flags:
        if f.name in SWITCH_FEATURES:
            found.append(SWITCH_FEATURES[f.name])
        elif f.name == "--speculative-config":
            method = str(_json(f).get("method", ""))
            if method not in SPECULATIVE:
                raise SourceError(
                    f.value_where,
                    f"speculative method {method!r}: no feature expresses it{suggest(method, SPECULATIVE)}",
                )
            found.append(SPECULATIVE[method])
        elif f.name == "--compilation-config":
            mode = _json(f).get("cudagraph_mode")
            if mode is not None and str(mode).upper() != "NONE":
                found.append("graph-mode")
    return [name for name in found if name in base.features]


def _differs(fragment: Any, given: Any) -> bool:
    if isinstance(fragment, dict):
        return not isinstance(given, dict) or any(_differs(v, given.get(k)) for k, v in fragment.items())
    return fragment != given


def _decided_by_config(flags: list[Flag], features: list[str], base: Matrix) -> set[str]:
    """The JSON flags whose values a recognised feature would change: they go to the suite group,
    which decides over features, so the launch keeps the config's values."""
    by_name = {f.name: f for f in flags}
    out = set()
    for name in features:
        for flag, fragment in base.features[name].configs.items():
            given = by_name.get("--" + flag)
            if given is not None and _differs(fragment, _json(given)):
                out.add(given.name)
    return out


def _scores(test: Test) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The AISBench accuracy score and the performance phases of a test's benchmarks."""
    score = None
    phases = []
    for key, (bench, where) in test.benchmarks.items():
        kind = bench.get("case_type")
        source = f"AISBench {bench.get('dataset_conf')} on {bench.get('dataset_path')}"
        if kind == "accuracy":
            if score is not None:
                raise SourceError(
                    where, f"benchmarks.{key}: a second accuracy benchmark (a case is judged on one score)"
                )
            score = {
                "tool": "aisbench",
                "dataset_config": str(bench["dataset_conf"]),
                "request_config": str(bench["request_conf"]),
                "max_out_len": int(bench["max_out_len"]),
                "batch_size": int(bench["batch_size"]),
                "baseline": float(bench.get("baseline", 1)),
                "threshold": float(bench.get("threshold", 1)),
            }
            if bench.get("dataset_path"):
                score["baseline_dataset"] = str(bench["dataset_path"])
            if "num_prompts" in bench:
                score["limit"] = int(bench["num_prompts"])
            kwargs = {k: bench[k] for k in GENERATION if k in bench}
            if kwargs:
                score["generation_kwargs"] = kwargs
        elif kind == "performance":
            phase: dict[str, Any] = {
                "kind": "concurrent",
                "name": slug(key),
                "requests": int(bench["batch_size"]),
                "max_tokens": int(bench["max_out_len"]),
                "deadline_s": 3600,
            }
            baseline = float(bench.get("baseline", 0))
            if baseline > 0:  # a baseline of 0 is a warm-up: vllm-ascend's gate holds at once
                # measured as they measure it: AISBench in perf mode with the case's configs and load
                aisbench: dict[str, Any] = {
                    "dataset_config": str(bench["dataset_conf"]),
                    "request_config": str(bench["request_conf"]),
                    "max_out_len": int(bench["max_out_len"]),
                    "batch_size": int(bench["batch_size"]),
                }
                if "num_prompts" in bench:
                    aisbench["num_prompts"] = int(bench["num_prompts"])
                if "request_rate" in bench:
                    aisbench["request_rate"] = float(bench["request_rate"])
                if bench.get("dataset_path"):
                    aisbench["baseline_dataset"] = str(bench["dataset_path"])
                kwargs = {k: bench[k] for k in GENERATION if k in bench}
                if kwargs:
                    aisbench["generation_kwargs"] = kwargs
                phase["perf_baseline"] = {
                    "output_tokens_per_s": baseline,
                    "ratio": float(bench.get("threshold", 0.97)),
                    "source": source,
                    "aisbench": aisbench,
                }
            phases.append(phase)
        else:
            raise SourceError(where, f"benchmarks.{key}.case_type {kind!r}: accuracy or performance")
    for phase in phases:
        if not re.fullmatch(NAME, phase["name"]):
            raise SourceError(test.where, f"benchmark name {phase['name']!r} cannot name a phase")
    return score, phases
