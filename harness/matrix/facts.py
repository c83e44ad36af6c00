"""What a platform's engine accepts, generated from its source (``scripts/ascend_facts.py`` writes
``matrices/ascend/vllm-ascend-facts.json``): the ``--additional-config`` keys it reads, the env
names it reads, and the port ranges its transports allocate from. A platform names its facts
file (``facts:``, beside the matrix file) and ``lint --plans`` checks its plans against it."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, ValidationError

from harness.matrix.strict import Strict


class Source(Strict):
    repository: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    commit: str = Field(min_length=1)

    def link(self, read_in: str) -> str:
        """``path:line`` of the source read, as a link at the commit read."""
        path, _, line = read_in.partition(":")
        return f"https://github.com/{self.repository}/blob/{self.commit}/{path}" + (f"#L{line}" if line else "")


class ReadKey(Strict):
    """A key the engine reads from a JSON config, with the keys it reads inside it (none: a value
    the engine does not look into); an open key passes any key on (``**kwargs``)."""

    read_in: str
    open: bool = False
    keys: dict[str, ReadKey] = {}


class RemovedKey(Strict):
    read_in: str
    message: str  # what the engine raises when it is given


class Read(Strict):
    read_in: str


class ReservedPorts(Strict):
    """Ports a transport picks at random on each node: ``[first, first + per_device x devices)``."""

    transport: str
    used_by: str  # the connectors whose processes run the transport (a connector name contains it)
    first: int = Field(ge=1, le=65535)
    per_device: int = Field(ge=1)
    read_in: str

    def span(self, devices: int) -> range:
        return range(self.first, self.first + self.per_device * devices)

    def applies_to(self, connectors: list[str]) -> bool:
        return any(self.used_by.lower() in c.lower() for c in connectors)


class EngineFacts(Strict):
    source: Source
    additional_config: dict[str, ReadKey]
    removed_additional_config: dict[str, RemovedKey] = {}
    env: dict[str, Read]
    reserved_ports: list[ReservedPorts] = []

    def where(self, read_in: str) -> str:
        return self.source.link(read_in)


def read_facts(path: Path) -> EngineFacts:
    """A facts file; a problem in it a ValueError naming the file."""
    if not path.is_file():
        raise ValueError(f"facts file {path} not found (scripts/ascend_facts.py writes it)")
    try:
        return EngineFacts.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, ValidationError) as err:
        raise ValueError(f"{path}: {' '.join(str(err).split())}") from None
