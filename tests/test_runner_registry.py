"""Runners are found by the inventory's ``reach`` in one registry, each keeps one protocol, and a
runner's module (Ray's) is imported only by runs that reach a node that way."""

import subprocess
import sys
import typing

import pytest

from harness.plan.cluster import Cluster, Node
from runners import registry
from runners.errors import InfrastructureError
from runners.local import LocalNodeRunner
from runners.nodes import run_on_nodes
from runners.ssh import SshNodeRunner


def node(name: str, reach: str) -> Node:
    return Node(name=name, host="localhost", address="127.0.0.1", devices=[0], reach=reach)


def test_every_reach_an_inventory_may_name_has_a_runner():
    assert set(registry.RUNNERS) == set(typing.get_args(Node.model_fields["reach"].annotation))


def test_the_registry_starts_the_runner_of_each_reach():
    cluster = Cluster(name="c", platform="cpu", nodes=[node("n0", "local")])
    assert type(registry.runner("local", None)) is LocalNodeRunner
    ssh = registry.runner("ssh", cluster)
    assert type(ssh) is SshNodeRunner and set(ssh.nodes) == {"n0"}
    with pytest.raises(ValueError, match="no runner reaches nodes by 'telnet'"):
        registry.runner("telnet", cluster)


def test_short_programs_run_through_the_registry_in_order():
    cluster = Cluster(name="c", platform="cpu", nodes=[node("a", "local"), node("b", "local")])
    outs = run_on_nodes(
        cluster, [(cluster.nodes[1], [sys.executable, "-c", "print('b')"]), (cluster.nodes[0], ["true"])]
    )
    assert [(o.node, o.returncode, o.stdout) for o in outs] == [("b", 0, "b\n"), ("a", 0, "")]


@pytest.mark.needs_ray
def test_a_ray_node_without_a_ray_address_is_an_answer_not_an_exception():
    cluster = Cluster(name="c", platform="cpu", nodes=[node("a", "local"), node("r", "ray")])
    local, ray_node = run_on_nodes(cluster, [(n, ["true"]) for n in cluster.nodes])
    assert local.ok and ray_node.returncode is None and "no ray_address" in ray_node.error
    with pytest.raises(InfrastructureError, match="no ray_address"):
        registry.runner("ray", cluster)


def test_ray_is_imported_only_by_runs_that_reach_a_node_through_it():
    code = (
        "import sys; from harness.plan.cluster import Cluster, Node; from runners.nodes import run_on_nodes; "
        "from harness.check.serving.live import LiveDeployment; "
        "c = Cluster(name='c', platform='cpu', nodes=[Node(name='a', host='h', address='a', devices=[0])]); "
        "assert run_on_nodes(c, [(c.nodes[0], ['true'])])[0].ok; print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
