"""The Files and Batch APIs' real answers match the app's own ``/openapi.json`` (their success
schemas are the response models': ``ovserve.api.openapi.batches``): an upload, the list, a file,
a deletion, a batch created, run, listed, read and refused a cancel once finished."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.fast.harness import fast_model
from tests.fast.scripted_engine import reply
from tests.fast.test_batches import call, chat_line, jsonl, run_batch, upload
from tests.served_openapi import ServedSchemas


async def test_files_and_batches_answer_what_the_document_describes(serve: Any) -> None:
    served = await serve(fast_model(reply("Hello")))
    _, document = await call(served, "GET", "/openapi.json")
    schemas = ServedSchemas(document)

    status, file = await upload(served, jsonl(chat_line("a")), purpose="user_data")
    assert status == 200
    schemas.validate_answer("/v3/files", file)
    schemas.validate_answer("/v3/files", (await call(served, "GET", "/v1/files"))[1], method="get")
    read = (await call(served, "GET", f"/v1/files/{file['id']}"))[1]
    schemas.validate_answer("/v3/files/{file_id}", read, method="get")
    deleted = (await call(served, "DELETE", f"/v1/files/{file['id']}"))[1]
    schemas.validate_answer("/v3/files/{file_id}", deleted, method="delete")

    batch = await run_batch(served, jsonl(chat_line("a"), chat_line("b")))
    assert batch["status"] == "completed"
    schemas.validate_answer("/v3/batches", batch)  # the same object as the creation's, once finished
    schemas.validate_answer("/v3/batches", (await call(served, "GET", "/v1/batches"))[1], method="get")
    status, refused = await call(served, "POST", f"/v1/batches/{batch['id']}/cancel")
    assert status == 409
    schemas.validate_component("ErrorBody", refused)
    with pytest.raises(jsonschema.ValidationError):  # the schema tells a Batch from what is not one
        schemas.validate_answer("/v3/batches", {**batch, "status": "done"})
