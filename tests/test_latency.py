"""Inter-token latency only where it was measured: stream events that reached the client together
(in one event, or read back to back) give no latency, and say so instead of printing one."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.cases.workload import plan_phase
from harness.check.serving.client import Client, Timing
from harness.check.traffic.evidence import perf_gates, phase_record
from harness.check.traffic.latency import Coalescing, coalesced, engine_token_s, unmeasured_itl
from harness.check.traffic.phases import PhaseOutputs
from harness.matrix.schema import Compare, PerfGate, Phase
from harness.results.result import PhaseRecord
from reports.traffic import phase_row

# 16 tokens of one request as the smoke run's client saw them: [arrival, tokens, time the client
# waited on the socket for the event]: the first two waited for, then the rest parsed back to back
# (about 20 µs apart) from what one socket read returned
COALESCED = Timing(
    0.0, ((0.412, 1, 0.4), (0.431, 1, 0.019)) + tuple((0.431 + 0.00002 * i, 1, 0.00001) for i in range(1, 15))
)
# the same tokens one engine step (about 30 ms) apart, each waited for
SPACED = Timing(0.0, tuple((0.412 + 0.03 * i, 1, 0.029) for i in range(16)))
# four events of four tokens: the server put several tokens in one event
BUNDLED = Timing(0.0, tuple((0.412 + 0.12 * i, 4, 0.11) for i in range(4)))
# events the client waited for, but sent in bursts a fraction of a millisecond apart
BURST = Timing(0.0, tuple((0.412 + 0.03 * (i // 4) + 0.0003 * (i % 4), 1, 0.0002) for i in range(16)))
# the engine's own account over the phase: 30 ms per token
ENGINE = {"engine_itl_sum_s": 0.45, "engine_itl_count": 15.0, "steps": 20.0}


def test_coalesced_tokens_are_counted_per_stream():
    assert coalesced(COALESCED, 0.003) == Coalescing(15, same_read=14)
    assert coalesced(SPACED, 0.003) == Coalescing(15)
    assert coalesced(BUNDLED, 0.003) == Coalescing(15, same_event=12)
    assert coalesced(BURST, 0.003) == Coalescing(15, too_close=12)
    assert coalesced(BURST, 0.0001) == Coalescing(15)


def test_the_engines_own_time_per_token_sets_the_floor():
    assert engine_token_s(ENGINE, 2.0) == (pytest.approx(0.03), "the engine's mean inter-token latency")
    assert engine_token_s({"steps": 40.0}, 2.0) == (pytest.approx(0.05), "the phase's time over its engine steps")
    assert engine_token_s({}, 2.0) == (None, "")


def test_coalesced_streams_are_not_measured_and_say_why():
    why = unmeasured_itl([COALESCED, COALESCED], ENGINE, 1.0)
    assert why == (
        "stream chunks coalesced: 28 of 30 tokens arrived with the previous one (0 in the same event, "
        "28 in the same read, 0 within 3 ms of it); the engine's mean inter-token latency 30 ms"
    )
    assert unmeasured_itl([BUNDLED], ENGINE, 1.0).startswith("stream chunks coalesced: 12 of 15 tokens")
    assert "12 within 3 ms of it" in unmeasured_itl([BURST], ENGINE, 1.0)
    # without the engine's metrics the floor is half a millisecond: 0.3 ms gaps are still below it
    assert "12 within 0.5 ms of it); " not in unmeasured_itl([BURST], {}, 1.0)
    assert unmeasured_itl([BURST], {}, 1.0).endswith("12 within 0.5 ms of it)")


def test_a_recorded_smoke_run_is_not_measured():
    # a real PP2 run on a loaded 2-core host: the API server sent each request's tokens in bursts
    recorded = json.loads((Path(__file__).parent / "data/latency/smoke-pp2-concurrent.json").read_text())
    timings = [Timing.from_json(s) for s in recorded["streams"]]
    assert unmeasured_itl(timings, recorded["metrics"], recorded["wall_s"]) == (
        "stream chunks coalesced: 70 of 76 tokens arrived with the previous one (0 in the same event, "
        "70 in the same read, 0 within 0.371 ms of it); the engine's mean inter-token latency 3.71 ms"
    )
    # the ITL they would have printed: the client's parsing time, far below the engine's 3.7 ms
    gaps = sorted(g for t in timings for g in t.inter_token())
    assert gaps[len(gaps) // 2] < 0.0001


def test_well_spaced_streams_are_measured():
    assert unmeasured_itl([SPACED, SPACED], ENGINE, 1.0) is None
    assert unmeasured_itl([SPACED], {}, 1.0) is None
    # one gap in sixteen below the floor is within what a loaded client may see
    one_late = Timing(0.0, (*SPACED.chunks[:-1], (SPACED.chunks[-2][0] + 0.0001, 1, 0.00001)))
    assert unmeasured_itl([one_late], ENGINE, 1.0) is None


def test_a_gate_on_an_unmeasured_figure_says_so_and_fails():
    gate = PerfGate(tpot_s=0.05, ratio=0.97)
    why = unmeasured_itl([COALESCED], ENGINE, 1.0)
    held, failed, _ = perf_gates(gate, {"itl_p50_s": None}, unmeasured={"itl_p50_s": why})
    assert held == [] and failed == [f"median TPOT not measured: {why}"]
    # the coalesced figure itself (20 µs) would have held the gate
    held, failed, _ = perf_gates(gate, {"itl_p50_s": 0.00002})
    assert failed == [] and held[0].startswith("median TPOT 2e-05 s <=")


def test_the_phase_record_and_its_report_row_show_the_flag():
    plan = plan_phase(Phase(kind="concurrent", requests=1, perf_baseline=PerfGate(tpot_s=0.05, ratio=1.0)), 2)
    why = unmeasured_itl([COALESCED], ENGINE, 1.0)
    got = PhaseOutputs(
        metrics={"peak_running": 2.0},
        perf={"output_tokens_per_s": 16.0, "itl_p50_s": None, "itl_p99_s": None},
        unmeasured={"itl_p50_s": why, "itl_p99_s": why},
        streams=[COALESCED],
    )
    rec = phase_record(plan, Compare(), got, None, {})
    assert rec.problems == [f"median TPOT not measured: {why}"]
    assert rec.streams[0][:2] == [[0.412, 1, 0.4], [0.431, 1, 0.019]]
    # the record keeps the stream events through its JSON, and the report names the reason
    again = PhaseRecord.model_validate_json(rec.model_dump_json())
    assert again.unmeasured == rec.unmeasured and again.streams == rec.streams
    row = phase_row("c", again)
    assert row["itl"] == f"not measured: {why}"
    assert phase_row("c", again.model_copy(update={"unmeasured": {}}))["itl"] == "— / —"
    assert PhaseOutputs.from_json(got.to_json()).streams[0].to_json() == COALESCED.to_json()


class _Sse(BaseHTTPRequestHandler):
    """Streams four one-token completion events: ``gap_s`` apart, or all in one write."""

    gap_s = 0.0

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        events = [
            "data: "
            + json.dumps(
                {"choices": [{"text": f"t{i}", "logprobs": {"tokens": [f"token_id:{i}"], "token_logprobs": [-0.1]}}]}
            )
            + "\n\n"
            for i in range(4)
        ]
        if self.gap_s:
            for e in events:
                self.wfile.write(e.encode())
                self.wfile.flush()
                time.sleep(self.gap_s)
        else:
            self.wfile.write("".join(events).encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.mark.parametrize("gap_s, seen", [(0.0, Coalescing(3, same_read=3)), (0.05, Coalescing(3))])
def test_the_client_records_each_event_as_it_arrives(gap_s, seen):
    handler = type("Sse", (_Sse,), {"gap_s": gap_s})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = Client(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=10)
    try:
        completion, timing = client.stream_timed("m", "p", 4)
    finally:
        client.close()
        server.shutdown()
    assert completion.token_ids == (0, 1, 2, 3) and [n for _, n, _ in timing.chunks] == [1, 1, 1, 1]
    # events written at once were already read when the client asked for them; spaced ones waited for
    assert coalesced(timing, 0.005) == seen
    assert (unmeasured_itl([timing], {}, 1.0) is None) is (seen.together == 0)
