"""Which runner reaches a node, keyed by the inventory's ``reach`` (``harness.registry.RUNNERS``, as
wptrunner keys its products): a new way to reach nodes is one module whose ``RUNNER`` is its
``NodeRunner`` class, and one line there. A runner's module is imported only when a run reaches a
node that way (Ray only by runs that use Ray)."""

from __future__ import annotations

from harness.plan.cluster import Cluster
from harness.registry import RUNNERS
from runners.protocol import NodeRunner


def runner(reach: str, cluster: Cluster | None) -> NodeRunner:
    """A new runner for the nodes ``reach`` names; raises InfrastructureError when it cannot reach
    them (no Ray cluster at the inventory's address)."""
    if reach not in RUNNERS:
        raise ValueError(f"no runner reaches nodes by {reach!r} (known: {', '.join(RUNNERS)})")
    cls: type[NodeRunner] = RUNNERS[reach]
    return cls.for_cluster(cluster)
