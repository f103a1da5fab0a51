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
# PostgreSQL, for the Responses store's tests on that backend (tests/postgres.py starts one in a
# temporary directory). Installed only where it is absent.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -q postgresql >/dev/null
  else
    sudo apt-get install -y -q postgresql >/dev/null
  fi
fi
# HAProxy, the router of the local scale-out rehearsal (scripts/cluster.sh) and of
# tests/e2e/test_scale_out.py. Installed only where it is absent.
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -q haproxy >/dev/null
  else
    sudo apt-get install -y -q haproxy >/dev/null
  fi
fi
# Headless Chromium and its WebDriver, for the browser console's test (tests/e2e/test_console.py,
# through selenium). Installed only where they are absent.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -q chromium chromium-driver >/dev/null
  else
    sudo apt-get install -y -q chromium chromium-driver >/dev/null
  fi
fi
# The Claude Code CLI, which tests/e2e/test_claude_code.py runs against the server (the worked
# example of docs/anthropic.md). Best effort: without npm or its registry that test is skipped.
if command -v npm >/dev/null 2>&1 && ! command -v claude >/dev/null 2>&1; then
  npm install -g --silent @anthropic-ai/claude-code@2.1.197 >/dev/null 2>&1 \
    || echo "setup: the Claude Code CLI could not be installed; tests/e2e/test_claude_code.py will be skipped" >&2
fi
