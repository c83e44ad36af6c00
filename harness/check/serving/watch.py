"""Waiting on a request while watching the deployment that serves it.

The verdict comes as soon as the request finishes, a process exits, or the expected error
pattern appears in a log — not at some RPC timeout deep inside vLLM.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.check import logs
from harness.check.serving.live import LiveDeployment


def watch_request(
    live: LiveDeployment, fn: Callable[[], Any], deadline_s: float, error: str | None
) -> tuple[Any, str | None, logs.LogLine | None]:
    """Run ``fn`` in a thread while watching ``live``: (result, problem, matched expected-error line)."""
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
        if error and (line := logs.search_errors(live.log_paths, error)):
            return None, "expected error appeared", line
        if gone := live.exited():
            t.join(1.0)
            return None, f"process exited during the request: {gone}", None
    if t.is_alive():
        return None, f"no answer within {deadline_s:.0f} s", None
    if "error" in box:
        return None, box["error"], None
    return box["result"], None, None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A SIGTERM to ppconf tears the live deployment down like Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
