"""Versions of the stack on each node, read on the node by the node's own interpreter (never
imported by the driver, which may not even have vLLM installed), with the node's set_env script
sourced first as for a launch, so CANN's variables point where the launch's will. This module
holds the script and how its answer reads; ``harness.check.serving.stack`` runs it on the nodes:

    probe_versions(cluster, models) -> {"node1": {"python": "3.11.9", "vllm": "0.32.0", "torch": "2.9.0", ...,
                                                  "model /models/X": "config 1f2e..., weights index 9a8b..."}, ...}

The machine is part of the stack: "isa" is the node's instruction set (``isa`` summarises it;
which kernels vLLM-CPU and torch run depends on it) and, on Ascend, "soc" names the NPU's SoC
beside CANN's version.

A node that cannot be probed gets {"error": why}: a sign-off then refuses to name what it signed.
``differences`` says what differs between the nodes of one deployment: a run refuses to launch it;
nodes whose machines differ (``MACHINE``) are only warned of. The checkpoints' identities are for
that comparison only: ``without_models`` is the stack a run records.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass

DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "transformers", "ray")
# a stack's line: the SoC beside CANN, the instruction set last
ORDER = tuple("vllm vllm-cpu vllm-ascend torch torch-npu cann soc npu-driver transformers ray isa".split())

# The extensions, as /proc/cpuinfo names them, that decide which kernels run: vLLM-CPU loads
# _C_AVX2, _C_AVX512 or _C by AVX-512 and AVX512-BF16 and takes its AMX attention and MLA backends
# when amx_tile is there; torch and oneDNN pick their GEMMs by AVX-512, VNNI, BF16, FP16, AMX (x86)
# and by dot product, BF16, I8MM, SVE (Arm). Everything else in the flags (mitigations, virtualisation
# hints) differs between equal machines and is left out.
ISA_FLAGS = {
    "x86_64": (
        "avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
        "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    ),
    "aarch64": ("asimd", "asimddp", "asimdhp", "bf16", "i8mm", "sve", "sve2", "svebf16", "sme"),
    "s390x": ("vx", "vxe", "vxe2", "nnpa"),
}  # fmt: skip
# Machines whose /proc/cpuinfo names the processor (POWER9) or the ISA string (rv64imafdcv) instead.
ISA_MODEL = {"ppc64le": "cpu", "riscv64": "isa"}


def isa(cpuinfo: str, machine: str, flags: Mapping[str, tuple[str, ...]], model: Mapping[str, str]) -> str:
    """A node's instruction set in one short line that equal machines share: the machine, then
    the extensions of ``flags`` that every processor in ``cpuinfo`` (/proc/cpuinfo) has, sorted:
    "x86_64 avx2 avx512_bf16 avx512f". Runs on the nodes (its source travels in ``SCRIPT``)."""
    fields: dict[str, list[str]] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    if machine in model:
        names = sorted({v.split(",")[0].split()[0].split("_")[0] for v in fields.get(model[machine], [])})
        return " ".join([machine, *names]) if names else machine + " (its model is not in /proc/cpuinfo)"
    lines = fields.get("flags") or fields.get("features") or []
    if not lines:
        return machine + (" (no flags in /proc/cpuinfo)" if cpuinfo else " (no /proc/cpuinfo)")
    common = set(lines[0].split()).intersection(*(line.split() for line in lines[1:]))
    return " ".join([machine, *sorted(common & set(flags.get(machine, ())))])


# CANN keeps its version in text files of the toolkit; torch_npu can also report it (CANN >=
# 8.1.RC1) but importing it is slow, so it is asked only when no file said.
SCRIPT = (
    "from __future__ import annotations\n"
    f"DISTRIBUTIONS = {DISTRIBUTIONS!r}\nISA_FLAGS = {ISA_FLAGS!r}\nISA_MODEL = {ISA_MODEL!r}\n"
    + inspect.getsource(isa)
    + r"""
import glob, importlib.metadata as m, json, os, platform, re, sys
out = {"python": sys.version.split()[0]}
try:
    with open("/proc/cpuinfo", errors="replace") as f:
        cpuinfo = f.read()
except OSError:
    cpuinfo = ""
out["isa"] = isa(cpuinfo, platform.machine(), ISA_FLAGS, ISA_MODEL)
for name in DISTRIBUTIONS:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass

def version_in(path, keys=("version", "Version")):
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in keys and value.strip():
            return value.strip().strip("[]")
    return None

homes = [os.environ.get(v) for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")]
homes = [h for h in homes if h] + ["/usr/local/Ascend/ascend-toolkit/latest"]
for home in homes:
    for path in sorted(glob.glob(os.path.join(home, "*", "ascend_toolkit_install.info"))) + [
            os.path.join(home, "version.cfg"), os.path.join(home, "compiler", "version.info"),
            os.path.join(home, "runtime", "version.info")]:
        found = version_in(path, ("version", "Version", "toolkit_running_version", "runtime_running_version"))
        if found:
            out["cann"] = found
            break
    if "cann" in out:
        break
if "cann" not in out and "torch-npu" in out:
    try:
        from torch_npu.utils import get_cann_version
        out["cann"] = get_cann_version(module="CANN") or "unknown"
    except Exception as err:
        out["cann"] = "unknown (%s)" % type(err).__name__
# the SoC (Ascend910B3, Ascend910_9392): CANN's pyACL names it without opening a device
if "cann" in out or "torch-npu" in out:
    try:
        import acl
        out["soc"] = acl.get_soc_name() or "unknown"
    except Exception as err:
        out["soc"] = "unknown (%s)" % type(err).__name__
driver = version_in("/usr/local/Ascend/driver/version.info", ("Version", "version"))
if driver:
    out["npu-driver"] = driver
# the models named on the command line: a checkpoint directory's identity on this node
import hashlib
def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return None
for model in sys.argv[1:]:
    if not os.path.isdir(model):
        out["model " + model] = "absent"
        continue
    index = next((n for n in ("model.safetensors.index.json", "pytorch_model.bin.index.json")
                  if os.path.exists(os.path.join(model, n))), None)
    out["model " + model] = "config %s, weights index %s" % (
        digest(os.path.join(model, "config.json")) or "missing",
        digest(os.path.join(model, index)) if index else "none (one weights file)")
print(json.dumps(out))
"""
)

# What the guide requires to be the same on every node of a deployment: vLLM, vLLM Ascend, torch
# and torch_npu, CANN, the Python environment and the weights (a "model <path>" key: the checksums
# of the checkpoint's config.json and weights index).
SAME_EVERYWHERE = ("python", "vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "cann")
MODEL = "model "
# The machine: nodes of one kind share it, but a deployment over two kinds still runs (slower, or
# on other kernels), so a difference here is a warning, never a refusal.
MACHINE = ("isa", "soc")


def without_models(probed: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The stacks alone: which checkpoints a run asked about is not part of a node's stack (it
    would move the reference cache and the stack history with the cases selected)."""
    return {node: {k: v for k, v in got.items() if not k.startswith(MODEL)} for node, got in probed.items()}


def differences(
    versions: Mapping[str, Mapping[str, str | None]],
    nodes: list[str],
    model: str = "",
    keys: tuple[str, ...] = SAME_EVERYWHERE,
) -> list[str]:
    """What differs between the stacks of ``nodes`` in ``keys`` (and, for ``model``, its
    checkpoint): one line per differing item naming each node's value. Nodes whose probe failed
    are not compared (a sign-off refuses their unknown stack). ``keys=MACHINE``: their machines."""
    known = {n: versions[n] for n in sorted(set(nodes)) if n in versions and "error" not in versions[n]}
    if len(known) < 2:
        return []
    out = []
    for key in [*keys, *([MODEL + model] if model else [])]:
        values = {n: v.get(key) for n, v in known.items()}
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{v if v is not None else absent(key)} on {n}" for n, v in values.items())
            out.append(f"{key.strip()}: {shown}")
    return out


def absent(key: str) -> str:
    """What a stack without ``key`` says of it: a distribution is not installed; a machine's
    instruction set or SoC was not recorded (a run from before ppconf probed it)."""
    return "not recorded" if key in MACHINE else "not installed"


@dataclass(frozen=True)
class Change:
    """One item of a node's stack that moved between two runs: a distribution's version, or the
    machine (its instruction set, its SoC), which changes the kernels as much as a new engine."""

    node: str
    item: str  # a distribution, "cann", "isa", "soc", ...
    old: str | None  # None: the node (or the item) was not there before
    new: str | None

    def __str__(self) -> str:
        old = self.old or ("(not recorded)" if self.item in MACHINE else "(none)")
        return f"{self.node}: {self.item} {old} → {self.new or '(none)'}"

    def to_json(self) -> dict[str, str | None]:
        return {"node": self.node, "item": self.item, "before": self.old, "after": self.new}


def stack_changes(before: Mapping[str, Mapping], after: Mapping[str, Mapping]) -> list[Change]:
    """What moved from one run's stack to the next, on the nodes of the later run."""
    out = []
    for node in sorted(after):
        old, new = before.get(node) or {}, after.get(node) or {}
        for item in sorted(set(old) | set(new)):
            if old.get(item) != new.get(item):
                out.append(Change(node, item, old.get(item), new.get(item)))
    return out


# The distributions that are vLLM itself (the CPU build is published as vllm-cpu).
ENGINE = ("vllm", "vllm-cpu")
_VERSION = re.compile(r"\d+(\.\d+)+\S*")


def unknown(versions: Mapping[str, object]) -> str | None:
    """Why a node's probed versions name no stack (None when they do): the probe failed, said
    nothing, or gave no version of vLLM (an error text or a null where a version belongs)."""
    if not isinstance(versions, Mapping) or not versions:
        return "no versions were recorded"
    if "error" in versions:
        return str(versions["error"]) or "the version probe failed"
    empty = sorted(k for k, v in versions.items() if not isinstance(v, str) or not v.strip())
    if empty:
        return f"no version of {', '.join(empty)}"
    engine = [str(versions[k]) for k in ENGINE if k in versions]
    if not engine:
        return "no version of vLLM"
    if not all(_VERSION.fullmatch(v) for v in engine):
        return f"vLLM's version is not a version: {engine[0]!r}"
    return None


def stack(versions: dict[str, str]) -> str:
    """One line for a report header: "vllm 0.32.0, torch 2.9.0, ..." (or the probe's error)."""
    if "error" in versions:
        return versions["error"]
    order = {name: i for i, name in enumerate(ORDER)}
    keys = sorted((k for k in versions if k != "python"), key=lambda k: (order.get(k, len(order)), k))
    return ", ".join(f"{k} {versions[k]}" for k in keys)
