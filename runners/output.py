"""What a short program run on a node gave back, whichever way the node is reached."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class NodeOutput:
    node: str
    returncode: int | None  # None: the node did not run it (unreachable, timeout); see error
    stdout: str = ""
    stderr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0
