#!/usr/bin/env bash
# Creates .venv (once) and installs ovserve with every extra. torch is pinned through
# constraints.txt: an unpinned torch pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
if [ ! -f .venv/.ovserve-installed ] || [ pyproject.toml -nt .venv/.ovserve-installed ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q -c constraints.txt torch==2.13.0
  python -m pip install -q -c constraints.txt -e ".[dev]"
  # optimum-intel pulls a torchvision built for another torch; it breaks imports and is not needed.
  python -m pip uninstall -q -y torchvision 2>/dev/null || true
  touch .venv/.ovserve-installed
fi
