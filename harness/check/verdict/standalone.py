"""The standalone part of a repro bundle: the exact requests a failing case was sent, what the
reference answered and what the case answered, and a client that sends them again and says
whether the failure is still there — runnable with Python alone (``urllib``), without ppconf.

``requests.json`` holds the traffic in the order the check sent it: the suite's sequential
prompts one at a time, then each phase's requests (its warm-up alone, its requests at once in
threads, streamed where the phase streams them, its closing requests), greedy, with the flags
ppconf's client sends (token ids back, EOS ignored). ``expected.json`` holds, per request that
differed, the reference's token ids (expected) and the case's (observed). ``client.py`` reads both beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.cases.phases.kind import PhasePlan
from harness.launch import Deployment
from harness.matrix.schema import Accuracy
from harness.registry import PHASE_KINDS
from harness.results.result import Observation

CLIENT = '''#!/usr/bin/env python3
"""Send the failing case's requests again and compare the answers with the reference's.

    python3 client.py [--url http://HOST:PORT]

Start the server first (commands.sh). Exit status 1 when a request still differs from the
reference (the failure reproduced), 0 when none does. Python 3.8+, standard library only."""

import argparse
import json
import sys
import threading
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def post(url, body, timeout):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def model_of(url, timeout):
    with urllib.request.urlopen(url + "/v1/models", timeout=timeout) as r:
        return json.loads(r.read())["data"][0]["id"]


def complete(url, model, request, timeout, stream=False):
    body = {
        "model": model,
        "prompt": request["prompt"],
        "max_tokens": request["max_tokens"],
        "temperature": 0,
        "logprobs": 1,
        "return_tokens_as_token_ids": True,
        "ignore_eos": True,
    }
    if not stream:
        choice = post(url + "/v1/completions", body, timeout)["choices"][0]
        return [int(t.rsplit(":", 1)[1]) for t in choice["logprobs"]["tokens"]]
    data = json.dumps({**body, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data, {"Content-Type": "application/json"})
    ids = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                ids += [int(t.rsplit(":", 1)[1]) for t in (choice.get("logprobs") or {}).get("tokens") or []]
    return ids


def at_once(url, model, requests, timeout, answers, stream):
    start = threading.Barrier(len(requests))  # sent together, as the check sent them

    def one(r):
        start.wait()
        answers[r["label"]] = complete(url, model, r, timeout, stream)

    threads = [threading.Thread(target=one, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=json.loads((HERE / "requests.json").read_text())["url"])
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()
    traffic = json.loads((HERE / "requests.json").read_text())
    expected = json.loads((HERE / "expected.json").read_text())
    url = args.url.rstrip("/")
    model = model_of(url, args.timeout)
    answers = {}
    for phase in traffic["phases"]:
        for r in phase["warmup"]:
            answers[r["label"]] = complete(url, model, r, args.timeout)
        if phase["at_once"]:
            at_once(url, model, phase["requests"], args.timeout, answers, phase["streamed"])
        else:
            for r in phase["requests"]:
                answers[r["label"]] = complete(url, model, r, args.timeout)
        for r in phase["after"]:
            answers[r["label"]] = complete(url, model, r, args.timeout)
    differ = 0
    for label, want in sorted(expected.items()):
        got = answers.get(label)
        if got is None:
            print(f"{label}: not sent by this client")
        elif got == want["expected"]:
            print(f"{label}: equals the reference (not reproduced)")
        else:
            differ += 1
            same = " (as observed)" if got == want["observed"] else ""
            print(f"{label}: differs from the reference{same}\\n  expected {want['expected']}\\n  got      {got}")
    print(f"{differ} of {len(expected)} requests differ from the reference")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _url(d: Deployment | None) -> str:
    """The address clients send to, as the deployment launched it: a P/D pair's proxy, else its
    API server."""
    served = sorted((s for s in d.launches if s.port) if d else [], key=lambda s: s.role != "proxy")
    return f"http://{served[0].host}:{served[0].port}" if served else "http://127.0.0.1:8000"


def traffic(accuracy: Accuracy | None, phases: tuple[PhasePlan, ...]) -> list[dict[str, Any]]:
    """The requests in the order the check sends them (see the module's text)."""
    out = []
    if accuracy is not None:
        n = accuracy.max_tokens
        seq = [{"label": f"text:{i}", "prompt": p, "max_tokens": n} for i, p in enumerate(accuracy.prompts)]
        out.append(
            {
                "name": "sequential",
                "kind": "sequential",
                "at_once": False,
                "streamed": False,
                "warmup": [],
                "requests": seq,
                "after": [],
            }
        )
    for plan in phases:
        data = plan.to_json()
        out.append(
            {
                "name": plan.name,
                "kind": plan.kind,
                "at_once": plan.in_flight > 1,
                "streamed": PHASE_KINDS[plan.kind].streamed,
                "warmup": data["warmup"],
                "requests": data["requests"],
                "after": data["after"],
            }
        )
    return out


def expected(obs: Observation) -> dict[str, dict[str, Any]]:
    """Per request that differed from the reference: its token ids and the case's."""
    diffs = [*(obs.accuracy.diffs if obs.accuracy else []), *(d for p in obs.workload for d in p.diffs)]
    return {
        d.request: {"expected": d.baseline_ids, "observed": d.observed_ids, "why": d.why}
        for d in diffs
        if d.request and d.baseline_ids is not None
    }


def write(
    out: Path, d: Deployment | None, obs: Observation, accuracy: Accuracy | None, phases: tuple[PhasePlan, ...]
) -> None:
    """requests.json, expected.json and client.py in the bundle's folder ``out``."""
    safe_write.write_text(
        out / "requests.json", json.dumps({"url": _url(d), "phases": traffic(accuracy, phases)}, indent=1) + "\n"
    )
    safe_write.write_text(out / "expected.json", json.dumps(expected(obs), indent=1) + "\n")
    safe_write.write_text(out / "client.py", CLIENT)
    (out / "client.py").chmod(0o755)
