"""Files and batches on the PostgreSQL store (``--responses_store postgresql://...`` with a shared
``--files_dir``): two servers on one database and one directory are two replicas behind a router;
a file uploaded to one is read from the other, a batch created on one is followed, listed and
answered through the other. The database is the session's real PostgreSQL (a new one here).
The runner's claims, takeovers and remote cancels: ``tests/unit/test_batch_runner.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fast.harness import fast_model
from tests.fast.scripted_engine import reply
from tests.fast.test_batches import call, chat_line, jsonl, run_batch, upload
from tests.postgres import PostgresServer


async def test_a_batch_made_on_one_replica_is_read_and_downloaded_on_another(
    serve: Any, postgres: PostgresServer, tmp_path: Path
) -> None:
    shared = {"responses_store": postgres.new_database(), "files_dir": tmp_path / "shared-volume"}
    first = await serve(fast_model(reply("Hello")), replica_name="replica-1", **shared)
    second = await serve(fast_model(reply("Hello")), replica_name="replica-2", **shared)
    lines = [chat_line(f"req-{n}", f"question {n}") for n in range(5)]

    status, file = await upload(first, jsonl(*lines))
    assert status == 200
    assert await call(second, "GET", f"/v1/files/{file['id']}") == (200, file)
    assert (await call(second, "GET", f"/v1/files/{file['id']}/content"))[1] == jsonl(*lines)

    batch = await run_batch(second, jsonl(*lines))  # uploaded to and run by the second replica
    assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 5
    assert await call(first, "GET", f"/v1/batches/{batch['id']}") == (200, batch)
    listed = (await call(first, "GET", "/v1/batches"))[1]
    assert [one["id"] for one in listed["data"]] == [batch["id"]]
    status, content = await call(first, "GET", f"/v1/files/{batch['output_file_id']}/content")
    assert status == 200
    output = [json.loads(line) for line in content.decode().splitlines()]
    assert sorted(line["custom_id"] for line in output) == [f"req-{n}" for n in range(5)]
