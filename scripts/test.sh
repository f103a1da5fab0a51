#!/usr/bin/env bash
# Install everything and run the whole suite: lint, types, Dockerfile lint, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export HF_HUB_OFFLINE=1
# The demo models most tests need (tiny-llm, its draft, tiny-vlm: ~1 min of one core on a clean
# clone) build while the linters run, under the lock the tests' fixtures take: mypy keeps one core
# busy for about as long, so the two overlap instead of the build taking a core from the tests. A
# test that needs them sooner waits on the lock; the other models build when a test first asks.
models_dir=${OVSERVE_TEST_MODELS:-models}
mkdir -p "$models_dir"
build_log=$(mktemp)
(flock 9 && exec python -c 'import sys, pathlib, scripts.make_demo_models as m; m.build_demo_models(pathlib.Path(sys.argv[1]))' \
  "$models_dir") 9>"$models_dir/.build.lock" >"$build_log" 2>&1 &
build=$!
trap 'kill "$build" 2>/dev/null || true; rm -f "$build_log"' EXIT
ruff check .
ruff format --check .
mypy
lint-imports
hadolint Dockerfile
bash scripts/validate_deploy.sh
# Two workers, each given whole test files (--dist loadfile), so a module's shared server starts
# once; OVSERVE_TEST_WORKERS=0 runs in this process alone.
python -m pytest -q -n "${OVSERVE_TEST_WORKERS:-2}" --dist loadfile "$@"
if ! wait "$build"; then  # the tests' fixtures built what it did not
  echo "test.sh: the early demo-model build failed:" >&2
  cat "$build_log" >&2
fi
