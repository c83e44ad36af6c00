#!/usr/bin/env bash
# The main job on the embedded default: install, then run the smoke-cpu suite for real on this host.
# Extra arguments go to `ppconf run` (e.g. --out runs/smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/ppconf run --suite smoke-cpu "$@"
