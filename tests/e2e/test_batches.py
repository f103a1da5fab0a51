"""OpenAI's Batch API with the real ``openai`` SDK against the real engine (tiny-llm): upload, create,
poll until done, download; each answer equals the interactive one (greedy); cancel; list."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai

from tests.conftest import Server, start_server, wait_for

CHAT = "/v1/chat/completions"


def _body(question: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"Count to {question}."}]
    return {"model": "tiny-llm", "messages": messages, "max_tokens": 6, "temperature": 0}


def _input(count: int, *, url: str = CHAT, body: Any = _body) -> bytes:
    lines = [{"custom_id": f"req-{n}", "method": "POST", "url": url, "body": body(n)} for n in range(count)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _wait(client: openai.OpenAI, batch_id: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        time.sleep(0.1)  # a client's polling interval
    raise AssertionError(f"batch {batch_id} still {batch.status} after {timeout} s")


def test_a_chat_batch_completes_with_the_interactive_answers(server: Server) -> None:
    client = server.client()
    uploaded = client.files.create(file=("input.jsonl", _input(20)), purpose="batch")
    assert uploaded.object == "file" and uploaded.purpose == "batch" and uploaded.bytes == len(_input(20))
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h", metadata={"job": "e2e"}
    )
    assert batch.status == "validating" and batch.metadata == {"job": "e2e"}
    done = _wait(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None and (done.request_counts.total, done.request_counts.completed) == (20, 20)
    assert done.output_file_id is not None and done.error_file_id is None
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    output = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    assert sorted(line["custom_id"] for line in output) == sorted(f"req-{n}" for n in range(20))
    by_id = {line["custom_id"]: line["response"]["body"] for line in output}
    for question in (0, 7):
        interactive = client.chat.completions.create(**_body(question))
        batched = by_id[f"req-{question}"]
        assert batched["choices"][0]["message"]["content"] == interactive.choices[0].message.content
        assert batched["usage"]["completion_tokens"] == interactive.usage.completion_tokens  # type: ignore[union-attr]
    assert batch.id in [one.id for one in client.batches.list(limit=5).data]
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"


def test_a_batch_cancelled_at_once_ends_cancelled(server: Server) -> None:
    client = server.client()
    uploaded = client.files.create(file=("input.jsonl", _input(20)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    done = _wait(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    try:
        client.batches.cancel(batch.id)
    except openai.ConflictError as exc:
        assert exc.status_code == 409
    else:
        raise AssertionError("cancelling a cancelled batch must be refused")


def test_a_malformed_batch_fails_with_its_line_numbers(server: Server) -> None:
    client = server.client()
    data = _input(2) + b"{oops\n"
    uploaded = client.files.create(file=("bad.jsonl", data), purpose="batch")
    done = _wait(client, client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h").id)
    assert done.status == "failed" and done.errors is not None and done.errors.data is not None
    assert [(error.line, error.code) for error in done.errors.data] == [(3, "invalid_json_line")]
    client.files.delete(uploaded.id)
    try:
        client.files.retrieve(uploaded.id)
    except openai.NotFoundError:
        pass
    else:
        raise AssertionError("a deleted file must be a 404")


def test_a_batch_survives_sigkill_and_completes_after_a_restart(tiny_llm: Path, tmp_path: Path) -> None:
    """The acceptance's crash test at 20 lines: SIGKILL mid-batch, restart on the same --files_dir;
    the batch completes, every custom_id exactly once in the output, none lost."""
    files_dir = tmp_path / "files"
    args = ("--files_dir", str(files_dir), "--batch_concurrency", "1")
    first = start_server(tmp_path, tiny_llm, *args)
    try:
        client = first.client()
        uploaded = client.files.create(file=("input.jsonl", _input(20, body=_long_body)), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
        assert wait_for(lambda: _completed(client, batch.id) >= 3, timeout=120)
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    second = start_server(tmp_path, tiny_llm, *args)
    try:
        client = second.client()
        done = _wait(client, batch.id)
        assert done.status == "completed" and done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (20, 0)
        assert done.output_file_id is not None
        output = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(line["custom_id"] for line in output) == sorted(f"req-{n}" for n in range(20))
    finally:
        second.stop()


def _long_body(question: int) -> dict[str, Any]:
    return {**_body(question), "max_tokens": 48, "ignore_eos": True}


def _completed(client: openai.OpenAI, batch_id: str) -> int:
    counts = client.batches.retrieve(batch_id).request_counts
    return counts.completed if counts is not None else 0


def test_the_batch_command_runs_a_file_shows_progress_and_downloads_the_output(server: Server, tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_input(5))
    output, errors = tmp_path / "output.jsonl", tmp_path / "errors.jsonl"
    command = [sys.executable, "-m", "ovserve", "batch", str(requests), "--url", server.url, "--poll", "0.2"]
    done = subprocess.run(
        [*command, "--output", str(output), "--errors", str(errors)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert "5/5 done, 0 failed, completed" in done.stderr
    assert sorted(json.loads(line)["custom_id"] for line in output.read_text().splitlines()) == [
        f"req-{n}" for n in range(5)
    ]
    assert not errors.exists()  # no request failed: no error file
    missing = subprocess.run([*command[:4], str(tmp_path / "nope.jsonl")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no such file" in missing.stderr
