from harness.check import logs

API = """\
(APIServer pid=8089) WARNING 11-30 20:29:17 [system_utils.py:255] Found ulimit of 20000 ... `OSError: [Errno 24] Too many open files`.
(Worker_PP1 pid=8241) ERROR 11-30 20:29:31 [multiproc_executor.py:953] Traceback (most recent call last):
(Worker_PP1 pid=8241) ERROR 11-30 20:29:31 [multiproc_executor.py:953]     raise ValueError(f"{len(partitions)=} does not match {pp_size=}.")
(Worker_PP1 pid=8241) ERROR 11-30 20:29:31 [multiproc_executor.py:953] ValueError: len(partitions)=3 does not match pp_size=2.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""  # noqa: E501 - vLLM's own log lines, kept verbatim

ASSERT = """\
(Worker_PP1 pid=1) ERROR 11-30 20:29:31 [x.py:1]   File "gpu_model_runner.py", line 10, in sync
(Worker_PP1 pid=1) ERROR 11-30 20:29:31 [x.py:1]     assert self.intermediate_tensors is not None
(Worker_PP1 pid=1) ERROR 11-30 20:29:31 [x.py:1]            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
(Worker_PP1 pid=1) ERROR 11-30 20:29:31 [x.py:1] AssertionError
"""


def test_root_cause_skips_warnings_and_wrappers(tmp_path):
    (tmp_path / "api.log").write_text(API)
    cause = logs.root_cause({"node0-api": tmp_path / "api.log"})
    assert cause.text == "ValueError: len(partitions)=3 does not match pp_size=2."
    assert (cause.log, cause.line) == ("node0-api", 4)


def test_bare_assertion_gets_its_source_line(tmp_path):
    (tmp_path / "a.log").write_text(ASSERT)
    cause = logs.root_cause({"a": tmp_path / "a.log"})
    assert cause.text == "AssertionError (assert self.intermediate_tensors is not None)"


def test_search_all_logs_in_order(tmp_path):
    (tmp_path / "a.log").write_text("nothing\n")
    (tmp_path / "b.log").write_text("x\nValueError: sum(partitions)=3 does not match num_hidden_layers=5.\n")
    hit = logs.search({"a": tmp_path / "a.log", "b": tmp_path / "b.log"}, r"sum\(partitions\)=3")
    assert (hit.log, hit.line) == ("b", 2)
    assert logs.search({"a": tmp_path / "a.log"}, "nope") is None


def test_silent_disable_only_counts_warnings(tmp_path):
    (tmp_path / "a.log").write_text(
        "(APIServer pid=1) INFO 11-30 1:1:1 [a.py:1] async scheduling is on\n"
        "(APIServer pid=1) WARNING 11-30 1:1:1 [vllm.py:1638] Async scheduling is disabled because ...\n"
    )
    found = logs.warnings_matching({"a": tmp_path / "a.log"}, ["Async scheduling is disabled"])
    assert [f.line for f in found] == [2]


def test_a_claimed_error_is_never_found_in_an_info_or_warning_record(tmp_path):
    """vLLM logs its non-default arguments at INFO: a loose pattern matching a flag there must not
    turn a server that worked into a rejection."""
    log = tmp_path / "node0-api.log"
    log.write_text(
        "(APIServer pid=1) INFO 12-01 09:00:00 [utils.py:1] non-default args: {'async_scheduling': True}\n"
        "(APIServer pid=1) WARNING 12-01 09:00:01 [config.py:2] async_scheduling is experimental\n"
    )
    assert logs.search({"node0-api": log}, "async_scheduling") is not None
    assert logs.search_errors({"node0-api": log}, "async_scheduling") is None
    log.write_text(
        log.read_text()
        + "(EngineCore pid=2) ERROR 12-01 09:00:02 [core.py:3] ValueError: async_scheduling is not supported\n"
        + "pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
        + "  Value error, tp_size=1 must be divisible by dcp_size=2.\n"
    )
    assert logs.search_errors({"node0-api": log}, "async_scheduling").line == 3
    assert logs.search_errors({"node0-api": log}, r"tp_size=1 must be divisible").line == 5
