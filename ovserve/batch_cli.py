"""``ovserve batch``: run a JSONL file of requests as a batch on a running server, for people
without an OpenAI SDK: upload it (``POST /v1/files``), create the batch (``POST /v1/batches``),
show its progress until it ends, then download its output (``--output``) and error (``--errors``)
files.

Progress goes to stderr, one line rewritten in place (``[#####-----] 12/20 done, 1 failed,
in_progress``); the batch's final object is printed to stdout as JSON. Exit status 0 when the
batch completed, 1 when it failed, expired or was cancelled (its ``errors`` are in the printed
object), 2 for a mistake on the command line or an answer that is not the server's (no server, a
4xx: its message on stderr). The API key comes from ``--api_key`` or ``OVSERVE_API_KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp

FINAL = ("completed", "failed", "expired", "cancelled")
_BAR = 30


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, help="the JSONL file of requests (OpenAI's batch input format)")
    parser.add_argument(
        "--endpoint",
        default="/v1/chat/completions",
        choices=("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"),
        help="the endpoint every line calls (default: /v1/chat/completions)",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default: http://127.0.0.1:8000)")
    parser.add_argument("--api_key", default=os.environ.get("OVSERVE_API_KEY"), help="default: $OVSERVE_API_KEY")
    parser.add_argument("--output", type=Path, help="where to write the output file (the answered requests)")
    parser.add_argument("--errors", type=Path, help="where to write the error file (the failed requests)")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between progress checks (default: 1)")


class _Refused(Exception):
    """The server answered with an error, or there is no server: one line for stderr."""


def _progress(batch: dict[str, Any]) -> str:
    counts = batch.get("request_counts") or {}
    total, completed, failed = counts.get("total", 0), counts.get("completed", 0), counts.get("failed", 0)
    done = completed + failed
    filled = _BAR * done // total if total else 0
    return f"\r[{'#' * filled}{'-' * (_BAR - filled)}] {done}/{total} done, {failed} failed, {batch['status']}"


async def _json(response: aiohttp.ClientResponse) -> Any:
    body = await response.json(content_type=None)
    if response.status >= 400:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else body
        raise _Refused(f"{response.method} {response.url.path}: {response.status}: {message}")
    return body


async def _download(session: aiohttp.ClientSession, file_id: str | None, target: Path | None) -> None:
    if file_id is None or target is None:
        return
    async with session.get(f"/v1/files/{file_id}/content") as response:
        if response.status >= 400:
            await _json(response)
        with target.open("wb") as out:
            async for chunk in response.content.iter_chunked(256 * 1024):
                out.write(chunk)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp  # only here: the other commands start without it (ovserve.__main__)

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with aiohttp.ClientSession(args.url, headers=headers) as session:
        with args.input.open("rb") as data:
            form = aiohttp.FormData()
            form.add_field("purpose", "batch")
            form.add_field("file", data, filename=args.input.name, content_type="application/jsonl")
            async with session.post("/v1/files", data=form) as response:
                uploaded = await _json(response)
        create = {"input_file_id": uploaded["id"], "endpoint": args.endpoint, "completion_window": "24h"}
        async with session.post("/v1/batches", json=create) as response:
            batch: dict[str, Any] = await _json(response)
        while batch["status"] not in FINAL:
            print(_progress(batch), end="", file=sys.stderr, flush=True)
            await asyncio.sleep(args.poll)
            async with session.get(f"/v1/batches/{batch['id']}") as response:
                batch = await _json(response)
        print(_progress(batch), file=sys.stderr)
        await _download(session, batch.get("output_file_id"), args.output)
        await _download(session, batch.get("error_file_id"), args.errors)
        return batch


def run(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        print(f"ovserve batch: no such file: {args.input}", file=sys.stderr)
        return 2
    import aiohttp

    try:
        batch = asyncio.run(_run(args))
    except (_Refused, aiohttp.ClientError, OSError) as exc:
        print(f"ovserve batch: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(batch, indent=2))
    return 0 if batch["status"] == "completed" else 1
