#!/usr/bin/env python3
"""Schemathesis against a real ``ovserve serve``: schema-invalid requests get a 4xx, valid ones never a 5xx.

Builds the offline demo models if needed, serves ``tiny-llm`` (with a small ``max_tokens_limit``, so
requests that do reach generation are cheap), ``tiny-embed`` and ``tiny-rerank`` from a temporary
OVMS-layout repository of the shipped graphs (``graphs/``) on a free loopback port, so that every
operation of the document, retrieval ones included, reaches a model serving it; waits for readiness, then
runs schemathesis against the server's own ``/openapi.json`` in negative mode (``--mode``; positive
sends valid bodies, which is how a crash of the rerank pipeline on control characters was found)
with the ``negative_data_rejection`` (invalid data gets 4xx) and ``not_a_server_error`` (never a
5xx) checks, ``--examples`` cases per endpoint in the fuzzing phase plus the coverage phase's edge
cases. Before schemathesis starts, the bodies this fuzzer once found killing an engine or getting a
5xx (:data:`KNOWN_CRASHERS`) are sent to the same server, each three times: all must be answered
below 500. Prints schemathesis' summary and exits with its status (non-zero on any failure, a known
crasher's 5xx, or when the server logged an error, restarted an engine or died).

    .venv/bin/python scripts/fuzz_api.py                 # 1,000 per endpoint: >= 2,000 cases
    .venv/bin/python scripts/fuzz_api.py --examples 50   # a quick look while developing
    .venv/bin/python scripts/fuzz_api.py --examples 20 --include-path-regex 'embeddings|rerank|tokenize'
    .venv/bin/python scripts/fuzz_api.py --examples 10 --mode positive --include-path-regex '^/api/'   # Ollama's
    .venv/bin/python scripts/fuzz_api.py --examples 30 --mode positive   # valid bodies: no 5xx
    .venv/bin/python scripts/fuzz_api.py --examples 10 --mode positive --seed 0   # what the test suite runs

The ``model`` property of the document is an enum of the served names, so cases whose other fields
are valid reach the model and the engine, rather than stopping at the 404 for an unknown model.
The operations are the document's, Ollama's ``/api/*`` among them; its model-store operations
(``/api/pull``...) answer every body with a 400, which schemathesis reports as a warning
("mostly rejected generated data"), not a failure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLM = "tiny-llm"
RETRIEVAL_MODELS = ("tiny-embed", "tiny-rerank")
STARTUP_TIMEOUT_S = 180.0

# Valid bodies that killed an engine process or got a 5xx, found by this fuzzer in positive mode.
KNOWN_CRASHERS: list[tuple[str, dict[str, object]]] = [
    # The rerank pipeline's paired tokenizer wrote the query's tokens once per document into a buffer
    # sized for one copy ((documents - 2) x query tokens > the documents' tokens): the heap was
    # corrupted and the engine died. The fuzzer's body (punctuation and unassigned code points: many
    # tokens per character), then the same fault with plain words.
    (
        "/v3/rerank",
        {
            "model": "tiny-rerank",
            "query": "a\U000d4bcf\x80\xda\xad\\\U000f57f6\xa1\U0002cac3!\U0006a763\xe7\xfb\xa9\x99\u78c7^\x04"
            "\x08x\U0009c984\xcc\U0003be8e\xcf#",
            "documents": [
                {"text": "\U000b25e8\U00010e67k\xb8", "\xd1l": 3.631084857264779e16},
                {"text": "\xa6"},
                {"text": "\x10\xdd\xe1\x93\xaf"},
                "\x06\U000e4a8a\xfc",
            ],
            "return_documents": None,
            "top_n": None,
        },
    ),
    (
        "/v3/rerank",
        {"model": "tiny-rerank", "query": "what is the capital city of france please", "documents": ["a", "b", "c"]},
    ),
    # Documents of control characters only: the same fault, and a batch of only such texts tokenizes
    # to a single row (a 500 when counted, one embedding for several inputs).
    ("/v3/rerank", {"model": "tiny-rerank", "query": "hello", "documents": ["world", "\x17", "x", "\u200b\x0f"]}),
    ("/v3/rerank", {"model": "tiny-rerank", "query": "q", "documents": ["\x17", "\x0f"]}),
    ("/v3/embeddings", {"model": "tiny-embed", "input": ["\x17", "\x0f"]}),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ovserve exited with {process.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"ovserve not ready after {STARTUP_TIMEOUT_S} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def send_known_crashers(url: str, rounds: int = 3) -> list[str]:
    """POST every :data:`KNOWN_CRASHERS` body ``rounds`` times; what went wrong (empty: nothing)."""
    failures = []
    for _ in range(rounds):
        for path, body in KNOWN_CRASHERS:
            request = urllib.request.Request(
                f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status = response.status
            except urllib.error.HTTPError as error:
                status = error.code
            except (urllib.error.URLError, OSError) as error:
                failures.append(f"{path} {json.dumps(body)[:120]}: {error}")
                continue
            if status >= 500:
                failures.append(f"{path} {json.dumps(body)[:120]}: {status}")
    return failures


def schemathesis_command(url: str, args: argparse.Namespace) -> list[str]:
    executable = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    command = [
        executable,
        "run",
        f"{url}/openapi.json",
        "--mode",
        args.mode,
        "--phases",
        "examples,coverage,fuzzing",
        "--checks",
        "negative_data_rejection,not_a_server_error",
        "--max-examples",
        str(args.examples),
        "--workers",
        str(args.workers),
        "--request-timeout",
        "60",
        "--generation-database",
        "none",
        "--continue-on-failure",
        "--suppress-health-check",
        "all",
        "--no-color",
        # Otherwise any field named like a secret ("max_tokens", "stop_token_ids") shows as [Filtered].
        "--output-sanitize",
        "false",
    ]
    if args.seed is not None:
        command += ["--seed", str(args.seed)]
    if args.include_path_regex is not None:
        command += ["--include-path-regex", args.include_path_regex]
    if args.report_dir is not None:
        command += ["--report", "junit,ndjson", "--report-dir", str(args.report_dir)]
    return command


def write_repository(directory: Path, models: dict[str, Path], max_tokens_limit: int) -> Path:
    """An OVMS config.json over the shipped graphs, pointed at ``models``; returns its path."""
    entries = []
    for name, model_dir in models.items():
        graph = (ROOT / "graphs" / name / "graph.pbtxt").read_text(encoding="utf-8")
        models_path = f'models_path: "../../models/{name}"'
        if models_path not in graph:
            raise RuntimeError(f"graphs/{name}/graph.pbtxt no longer reads {models_path}")
        replacement = f"models_path: {json.dumps(str(model_dir))}"
        if name == LLM:  # requests that do reach generation stay cheap
            replacement += f",\n          max_tokens_limit: {max_tokens_limit}"
        (directory / name).mkdir()
        (directory / name / "graph.pbtxt").write_text(graph.replace(models_path, replacement), encoding="utf-8")
        entries.append({"config": {"name": name, "base_path": name}})
    config = directory / "config.json"
    config.write_text(json.dumps({"model_config_list": entries}), encoding="utf-8")
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models-dir", type=Path, default=ROOT / "models", help="where the demo models live")
    parser.add_argument("--examples", type=int, default=1000, help="fuzzing-phase cases per endpoint")
    parser.add_argument("--workers", type=int, default=1, help="concurrent schemathesis workers")
    parser.add_argument("--seed", type=int, default=None, help="schemathesis seed, to reproduce a run")
    parser.add_argument("--max-tokens-limit", type=int, default=8, help="tiny-llm's max_tokens_limit")
    parser.add_argument("--include-path-regex", default=None, help="fuzz only the operations whose path matches")
    parser.add_argument("--report-dir", type=Path, default=None, help="also write JUnit and NDJSON reports here")
    parser.add_argument(
        "--mode",
        choices=("negative", "positive", "all"),
        default="negative",
        help="schema-invalid requests (each must get a 4xx), valid ones (none may get a 5xx), or both",
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from scripts.make_demo_models import build_demo_models, build_retrieval_models

    retrieval = build_retrieval_models(args.models_dir)
    models = {LLM: build_demo_models(args.models_dir)[LLM], **{name: retrieval[name] for name in RETRIEVAL_MODELS}}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="ovserve-fuzz-") as tmp:
        log_path = Path(tmp) / "ovserve.log"
        config = write_repository(Path(tmp), models, args.max_tokens_limit)
        serve = [sys.executable, "-m", "ovserve", "serve", "--config_path", str(config)]
        serve += ["--host", "127.0.0.1", "--port", str(port)]
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(serve, stdout=log_file, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_ready(process, url, log_path)
            crashed = send_known_crashers(url)
            print(f"known crashers: {len(KNOWN_CRASHERS)} bodies x 3 sent, {len(crashed)} answered 5xx or not at all")
            print("\n".join(crashed))
            started = time.monotonic()
            status = subprocess.run(schemathesis_command(url, args), cwd=ROOT, check=False).returncode
            print(f"schemathesis exited {status} after {time.monotonic() - started:.0f} s")
            alive = process.poll() is None
        finally:
            stop(process)
        # ovserve's own errors (the error middleware's "unhandled error", engine failures); aiohttp's
        # HTTP parser also logs a traceback for the capability probe's NUL header, answered 400.
        log_lines = log_path.read_text(errors="replace").splitlines()
        errors = [line for line in log_lines if " ERROR ovserve" in line]
        deaths = sum("engine process of" in line and " died " in line for line in log_lines)
        print(f"server: {'still up' if alive else 'DIED'} at the end, {len(errors)} errors in its log")
        print(f"engine deaths: {deaths}")
        print("\n".join(errors[:50]))
        if not alive:
            print(log_path.read_text(errors="replace")[-20000:])
    return status or int(bool(crashed)) or int(not alive) or int(bool(errors)) or int(bool(deaths))


if __name__ == "__main__":
    sys.exit(main())
