#!/usr/bin/env bash
# Install everything and run the whole suite: lint, types, Dockerfile lint, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export HF_HUB_OFFLINE=1
ruff check .
ruff format --check .
mypy
lint-imports
hadolint Dockerfile
bash scripts/validate_deploy.sh
# Two workers, each given whole test files (--dist loadfile), so a module's shared server starts
# once; OVSERVE_TEST_WORKERS=0 runs in this process alone.
python -m pytest -q -n "${OVSERVE_TEST_WORKERS:-2}" --dist loadfile "$@"
