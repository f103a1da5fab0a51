#!/usr/bin/env python3
"""An agent-like conversation over Anthropic's Messages API: TTFT per turn and the prefix cache.

What an agent such as Claude Code sends: a long system prompt and a set of tools that stay the
same on every turn, and a conversation that grows (the user's request, the assistant's tool call,
the tool's result, the next request...), resent whole each turn, streamed. One server
(``ovserve serve`` with ``--model_alias 'claude-*'``) gets ``--conversations`` such conversations of
``--turns`` turns one after the other (a new session id in each system prompt, so a conversation
never reuses another's cache), each turn with ``max_tokens`` ``--max_tokens``. Per turn: TTFT (the
request sent -> its first content delta, as a client sees it), the prompt's ``input_tokens`` and
the ``cache_read_input_tokens`` the server reported. The system prompt is sized with
``/v1/messages/count_tokens`` to ``--system_tokens`` with the tools (~8k by default).

    python scripts/bench_agent.py --model_path models/bench-qwen2.5-0.5b-int8 --out agent.json

Prints a markdown table (medians over the conversations, turn by turn) with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarks.report import machine_info  # noqa: E402

HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
PARAGRAPH = (
    "You are a coding agent working in a repository. Read files before you edit them, keep changes small, "
    "run the tests after each change, and explain what you did in one short paragraph. Prefer the project's "
    "own helpers over new ones; match the surrounding style; never commit secrets. "
)
USER_TURNS = [
    "Find where the request timeout is configured and tell me its default.",
    "Now open that file and show me the function that applies it.",
    "Add a log line when the timeout fires, with the request id.",
    "Run the tests for that module.",
    "Summarise the change in one sentence for the commit message.",
]


def tools() -> list[dict[str, Any]]:
    """Twelve tools with realistic schemas (Claude Code's are of this kind, and larger)."""
    names = ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch", "TaskCreate", "TaskList", "TaskGet",
             "NotebookEdit", "TodoWrite"]  # fmt: skip
    return [
        {
            "name": name,
            "description": f"{name}: " + PARAGRAPH[: 80 + 10 * position],
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "an absolute path"},
                    "pattern": {"type": "string", "description": "what to look for"},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            },
        }
        for position, name in enumerate(names)
    ]


def system_prompt(url: str, model: str, target: int, session: str) -> str:
    """A system prompt that makes, with the tools, about ``target`` prompt tokens."""
    base = f"Session {session}.\n"

    def count(paragraphs: int) -> int:
        body = {"model": model, "system": base + PARAGRAPH * paragraphs, "tools": tools(),
                "messages": [{"role": "user", "content": USER_TURNS[0]}]}  # fmt: skip
        answer = httpx.post(f"{url}/v1/messages/count_tokens", json=body, headers=HEADERS, timeout=120)
        answer.raise_for_status()
        return int(answer.json()["input_tokens"])

    one, ten = count(1), count(11)
    per_paragraph = (ten - one) / 10
    paragraphs = max(1, round(1 + (target - one) / per_paragraph))
    return base + PARAGRAPH * paragraphs


def turn(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed request: TTFT, the usage, and the assistant's content blocks."""
    started = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    with httpx.stream("POST", f"{url}/v1/messages", json={**body, "stream": True}, headers=HEADERS, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line.removeprefix("data: "))
            kind = event["type"]
            if kind == "message_start":
                usage.update(event["message"]["usage"])
            elif kind == "content_block_start":
                blocks[event["index"]] = dict(event["content_block"])
            elif kind == "content_block_delta":
                if first is None:
                    first = time.perf_counter() - started
                delta, block = event["delta"], blocks[event["index"]]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "input_json_delta":
                    block["input"] = json.loads(delta["partial_json"])
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "signature_delta":
                    block["signature"] = delta["signature"]
            elif kind == "message_delta":
                usage.update({key: value for key, value in event["usage"].items() if value is not None})
            elif kind == "error":
                raise RuntimeError(event)
    total = time.perf_counter() - started
    return {"ttft_s": first if first is not None else total, "total_s": total, "usage": usage,
            "content": [blocks[index] for index in sorted(blocks)]}  # fmt: skip


def conversation(url: str, model: str, system: str, turns: int, max_tokens: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    results = []
    for number in range(turns):
        messages.append({"role": "user", "content": USER_TURNS[number % len(USER_TURNS)]})
        body = {"model": model, "max_tokens": max_tokens, "system": system, "tools": tools(), "messages": messages,
                "temperature": 0.0}  # fmt: skip
        result = turn(url, body)
        results.append(result)
        content = result["content"] or [{"type": "text", "text": "ok"}]
        messages.append({"role": "assistant", "content": content})
        calls = [block for block in content if block["type"] == "tool_use"]
        if calls:  # an agent answers every call before it asks again
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call["id"], "content": "exit 0: 12 passed"} for call in calls
            ]})  # fmt: skip
            messages.append({"role": "assistant", "content": "Done."})
    return results


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError("the server did not become ready")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model_path", type=Path, default=ROOT / "models" / "bench-qwen2.5-0.5b-int8")
    parser.add_argument("--port", type=int, default=18650)
    parser.add_argument("--system_tokens", type=int, default=8000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=3)
    parser.add_argument("--max_tokens", type=int, default=32)
    parser.add_argument("--serve_args", default="", help="more ovserve serve flags")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)

    url = f"http://127.0.0.1:{args.port}"
    model = "claude-opus-4-8"  # an alias, as an agent sends it
    command = [sys.executable, "-m", "ovserve", "serve", "--model_path", str(args.model_path), "--model_name",
               args.model_path.name, "--model_alias", "claude-*", "--host", "127.0.0.1", "--port", str(args.port),
               *args.serve_args.split()]  # fmt: skip
    load_before = os.getloadavg()
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_ready(url, server)
        runs = []
        for _ in range(args.conversations):
            system = system_prompt(url, model, args.system_tokens, uuid.uuid4().hex)
            runs.append(conversation(url, model, system, args.turns, args.max_tokens))
    finally:
        server.terminate()
        server.wait(timeout=60)
    load_after = os.getloadavg()
    print(f"model {args.model_path.name}; load average before {load_before[0]:.1f}, after {load_after[0]:.1f} "
          f"(1 min); {args.conversations} conversations, medians\n")  # fmt: skip
    print("| turn | prompt tokens | cache_read_input_tokens | TTFT s | TTFT vs turn 1 |")
    print("|---|---|---|---|---|")
    rows = []
    first_ttft = statistics.median(run[0]["ttft_s"] for run in runs)
    for number in range(args.turns):
        ttft = statistics.median(run[number]["ttft_s"] for run in runs)
        prompt = statistics.median(run[number]["usage"]["input_tokens"] for run in runs)
        cached = statistics.median(run[number]["usage"].get("cache_read_input_tokens", 0) for run in runs)
        rows.append({"turn": number + 1, "prompt_tokens": prompt, "cache_read_input_tokens": cached, "ttft_s": ttft})
        print(f"| {number + 1} | {prompt:.0f} | {cached:.0f} | {ttft:.2f} | {ttft / first_ttft:.2f}x |")
    if args.out:
        document = {
            "machine": machine_info(),
            "load_average": {"before": load_before, "after": load_after},
            "args": {key: str(value) for key, value in vars(args).items()},
            "turns": rows,
            "runs": runs,
        }
        args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
