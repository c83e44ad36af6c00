"""lm-evaluation-harness as a task-score tool (the optional ``eval`` extra, ``local-completions``
against the server's OpenAI API).

The tokenizer lm-eval needs to split context from continuation is a local folder or the server's
own (``/tokenize``, which vLLM serves with ``--enable-tokenizer-info-endpoint``). The user's task
YAML is never edited: a copy written into the work folder ``include``s it by absolute path and
overrides only where the data comes from, with absolute file paths.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.check.scores.tool import ScoreError, ScoreTool, offline_env, run_tool

SEED = 1234
LOG_NAME = "lm-eval.log"
# datasets' builder for each dataset file suffix
BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _where(path: Path, node: Any, key: str) -> str:
    try:
        line = node.lc.key(key)[0] + 1
    except (AttributeError, KeyError, TypeError):
        return str(path)
    return f"{path}:{line}"


def _load_task(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], dict[str, Path]]:
    """The task's top-level keys merged over its ``include``s as lm-eval merges them (the
    including file wins), and for each key the file that set it."""
    path = path.resolve()
    if path in seen:
        raise ScoreError(f"{seen[-1]}: include cycle through {path}")
    if not path.is_file():
        where = f"{seen[-1]}: include " if seen else ""
        raise ScoreError(f"{where}task file not found: {path}")
    # ruamel.yaml comes with the `eval` extra: AISBench alone needs none of it
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        # round-trip mode keeps lm-eval's `!function` tags as opaque values
        doc = YAML(typ="rt").load(path.read_text())
    except YAMLError as e:
        raise ScoreError(f"{path}: invalid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ScoreError(f"{path}: an lm-eval task file must be a mapping")
    merged: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    includes = doc.get("include") or []
    for inc in includes if isinstance(includes, list) else [includes]:
        inc_path = Path(str(inc))
        cfg, src = _load_task(inc_path if inc_path.is_absolute() else path.parent / inc_path, (*seen, path))
        cfg.pop("task_list", None)
        merged.update(cfg)
        origin.update({k: src[k] for k in cfg})
    for key, value in doc.items():
        if key != "include":
            merged[key] = value
            origin[key] = path
    return merged, origin


def _absolute_files(files: Any, base: Path) -> Any:
    if isinstance(files, dict):
        return {str(k): _absolute_files(v, base) for k, v in files.items()}
    if isinstance(files, list):
        return [_absolute_files(v, base) for v in files]
    return str(base / str(files))  # an absolute entry stays as it is


def resolve_task(task_file: Path, dataset: Path | None, out_dir: Path) -> tuple[str, Path]:
    """Write the copy of ``task_file`` that lm-eval runs into ``out_dir``; return the task's
    name and the copy's path.

    With ``dataset``, that file becomes the split the task evaluates (``test_split``, else
    ``validation_split``). Without it, the task's own ``dataset_kwargs.data_files`` are resolved
    against the folder of the file that names them.
    """
    task_file = task_file.resolve()
    cfg, origin = _load_task(task_file)
    name = cfg.get("task")
    if not isinstance(name, str) or not name:
        raise ScoreError(f"{task_file}: needs `task: NAME` (one task; groups are not supported), got {name!r}")
    override: dict[str, Any] = {"include": str(task_file)}
    if dataset is not None:
        split = cfg.get("test_split") or cfg.get("validation_split")
        if not split:
            raise ScoreError(
                f"{task_file}: names neither `test_split` nor `validation_split`, "
                f"so there is no split to read {dataset} into"
            )
        builder = BUILDERS.get(dataset.suffix)
        if builder is None:
            raise ScoreError(
                f"dataset {dataset}: unsupported file type {dataset.suffix!r}; use one of {', '.join(BUILDERS)}"
            )
        if not dataset.is_file():
            raise ScoreError(f"dataset file not found: {dataset}")
        override.update(
            dataset_path=builder, dataset_name=None, dataset_kwargs={"data_files": {str(split): str(dataset.resolve())}}
        )
    else:
        kwargs = cfg.get("dataset_kwargs")
        files = kwargs.get("data_files") if isinstance(kwargs, dict) else None
        if files is not None:
            src = origin["dataset_kwargs"]
            resolved = _absolute_files(files, src.parent)
            for f in _flat(resolved):
                if not glob.glob(f):  # datasets takes glob patterns too
                    raise ScoreError(f"{_where(src, kwargs, 'data_files')}: data file not found: {f}")
            override["dataset_kwargs"] = {**_plain(kwargs), "data_files": resolved}
    copy = out_dir / f"{name}.yaml"
    import io

    from ruamel.yaml import YAML

    text = io.StringIO()
    YAML(typ="safe", pure=True).dump(override, text)
    safe_write.write_text(copy, text.getvalue())
    return name, copy


def _flat(files: Any) -> list[str]:
    if isinstance(files, dict):
        return [f for v in files.values() for f in _flat(v)]
    if isinstance(files, list):
        return [f for v in files for f in _flat(v)]
    return [files]


def _plain(node: Any) -> Any:
    return json.loads(json.dumps(node, default=str))


def lm_eval_argv(
    base_url: str,
    model_name: str,
    task_dir: Path,
    task: str,
    out_dir: Path,
    limit: int | None,
    tokenizer: str | None,
    request_timeout_s: float,
) -> list[str]:
    model_args = {
        "model": model_name,
        "base_url": f"{base_url.rstrip('/')}/v1/completions",
        "tokenizer_backend": "huggingface" if tokenizer else "remote",
        # token ids in the prompt: the server scores exactly the split lm-eval computed
        "tokenized_requests": True,
        "num_concurrent": 1,
        "max_retries": 3,
        "timeout": max(1, int(request_timeout_s)),
        "seed": SEED,
    }
    if tokenizer:
        model_args["tokenizer"] = str(tokenizer)
    argv = [
        sys.executable,
        "-m",
        "lm_eval",
        "run",
        "--model",
        "local-completions",
        # JSON, not key=value: a path or model name with a comma stays whole
        "--model_args",
        json.dumps(model_args),
        "--include_path",
        str(task_dir),
        "--tasks",
        task,
        "--output_path",
        str(out_dir),
        "--log_samples",
        "--seed",
        str(SEED),
    ]
    if limit is not None:
        argv += ["--limit", str(limit)]
    return argv


def evaluate_lm_eval(
    base_url: str,
    model_name: str,
    score: Any,
    base_dir: Path,
    workdir: Path,
    timeout_s: float,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """Run ``score.task`` (relative to ``base_dir``) with lm-eval's ``local-completions`` against
    the server at ``base_url``; its task copy, log and outputs stay under ``workdir``."""
    if find_spec("lm_eval") is None:
        raise ScoreError("lm-eval is not installed: pip install -e '.[eval]'")
    base_dir, workdir = Path(base_dir), Path(workdir)
    dataset = base_dir / score.dataset if score.dataset else None
    # a rerun in the same folder must neither index the last run's task copy nor read its numbers
    out_dir = workdir / "lm-eval-output"
    for stale in (workdir / "task", out_dir):
        shutil.rmtree(stale, ignore_errors=True)
    task, copy = resolve_task(base_dir / score.task, dataset, workdir / "task")
    argv = lm_eval_argv(base_url, model_name, copy.parent, task, out_dir, score.limit, tokenizer, timeout_s)
    env = offline_env(workdir)
    log_path = workdir / LOG_NAME
    started = time.monotonic()
    run_tool(argv, {**os.environ, **env}, log_path, timeout_s)
    duration = time.monotonic() - started
    return {
        "tool": "lm-eval",
        **read_results(out_dir, task, score.metric),
        "command": argv,
        "env": env,
        "log": str(log_path),
        "duration_s": round(duration, 3),
    }


def _metric_key(results: dict[str, Any], metric: str, path: Path) -> str:
    if "," in metric:  # "metric,filter" as lm-eval writes it
        if metric in results:
            return metric
        candidates = []
    else:
        candidates = [k for k in results if k.split(",", 1)[0] == metric]
        if len(candidates) == 1:
            return candidates[0]
    known = sorted(k for k in results if "," in k and "_stderr," not in k)
    if candidates:
        raise ScoreError(f"{path}: metric {metric!r} has several filters; name one of {', '.join(candidates)}")
    raise ScoreError(f"{path}: no metric {metric!r} in the results; the task reports {', '.join(known) or 'none'}")


def read_results(out_dir: Path, task: str, metric: str) -> dict[str, Any]:
    found = sorted(out_dir.glob("**/results_*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ScoreError(f"lm-eval finished but wrote no results_*.json under {out_dir}")
    path = found[-1]
    data = json.loads(path.read_text())
    results = data.get("results", {}).get(task)
    if results is None:
        raise ScoreError(f"{path}: no results for task {task!r}")
    key = _metric_key(results, metric, path)
    name, _, filt = key.partition(",")
    stderr = results.get(f"{name}_stderr,{filt}")
    samples = sorted(path.parent.glob(f"samples_{task}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    return {
        "task": task,
        "metric": key,
        "value": float(results[key]),
        "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
        "samples": data.get("n-samples", {}).get(task, {}).get("effective"),
        "results_file": str(path),
        "samples_file": str(samples[-1]) if samples else None,
    }


def missing_task(score: Any, base_dir: Path) -> str | None:
    task = base_dir / score.task
    return None if task.is_file() else f"score task file {task} not found"


TOOL = ScoreTool("lm-eval", evaluate_lm_eval, missing_task)
