"""The worked example of docs/anthropic.md: the Claude Code CLI, as shipped, on the long-context demo model.

``claude -p`` sends what it always sends (a ~30k-token prompt: its system prompt and 24 tools,
``thinking: adaptive``, ``context_management``, eight ``anthropic-beta`` features, a system message
inside ``messages``, ``max_tokens`` 64000 streamed) to ``ANTHROPIC_BASE_URL``. It must exit 0 with
the model's answer, its second run must read the prompt from the prefix cache, and it must talk to
no host but the server: every ``connect()`` it makes is traced (strace), and must reach loopback.

Skipped where the CLI is not installed (``scripts/setup.sh`` installs it with npm when it can).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_server

CLAUDE = shutil.which("claude")
pytestmark = pytest.mark.skipif(CLAUDE is None, reason="the Claude Code CLI is not installed (npm)")
# The first run prefills ~30k tokens: tens of seconds on an idle 2-core machine, minutes beside neighbours.
RUN_TIMEOUT_S = 600


def _claude(tmp_path: Path, url: str, prompt: str, trace: Path | None) -> dict[str, Any]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),  # a fresh profile: no login, no settings
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_AUTH_TOKEN": "ovserve-demo-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    command = [CLAUDE or "claude", "-p", prompt, "--output-format", "json"]
    if trace is not None:
        command = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *command]
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_claude_code_runs_on_the_long_context_demo_model(demo_models: dict[str, Path], tmp_path: Path) -> None:
    server = start_server(
        tmp_path,
        demo_models["tiny-llm-64k"],
        "--model_alias",
        "claude-*",
        "--api_key",
        "ovserve-demo-key",
        model_name="tiny-llm-64k",
    )
    trace = tmp_path / "connect.trace" if shutil.which("strace") else None
    try:
        first = _claude(tmp_path, server.url, "Say hello", trace)
        second = _claude(tmp_path, server.url, "Say hello", None)
    finally:
        server.stop()
    for run in (first, second):
        assert run["is_error"] is False and run["stop_reason"] == "end_turn", run
        assert run["result"].strip(), run  # the demo model's (random) answer
    usage = second["usage"]
    assert usage["input_tokens"] > 20_000  # Claude Code's prompt: far beyond tiny-llm's 2,048 tokens
    # The second turn is served from the prefix cache: all of its prompt but the tail.
    assert usage["cache_read_input_tokens"] > 0.9 * usage["input_tokens"], usage
    if trace is not None:
        pattern = r"sa_family=AF_INET6?, sin6?_port=htons\((\d+)\),[^\n]*?\"([^\"]+)\""
        addresses = re.findall(pattern, trace.read_text())
        assert addresses, "no connection traced"
        assert {host for _, host in addresses} <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, addresses
        assert {int(port) for port, _ in addresses} == {server.port}, addresses
