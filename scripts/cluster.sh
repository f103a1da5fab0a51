#!/usr/bin/env bash
# The local scale-out rehearsal (docs/scale-out.md): N replicas of `ovserve serve` on the demo model,
# one PostgreSQL they share as the Responses store, HAProxy in front. Foreground; Ctrl-C or SIGTERM
# stops every part and removes the temporary directories. Arguments go to scripts/cluster.py:
#   bash scripts/cluster.sh [--replicas 3] [--port 8000] [--first_replica_port 8001] [-- serve flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export HF_HUB_OFFLINE=1
# tiny-llm only (reused when complete: its marker), under the lock the tests' fixtures take.
mkdir -p models
(flock 9 && python -c 'import pathlib, scripts.make_demo_models as m; m.build([m.TINY_LLM_SPEC], pathlib.Path("models"))') \
  9>models/.build.lock
exec python scripts/cluster.py "$@"
