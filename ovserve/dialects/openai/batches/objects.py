"""OpenAI's Batch objects (``Batch``, ``ListBatchesResponse``, ``CreateBatchRequest``) and the line
formats of a batch's input and output files, as the OpenAPI document and OpenAI's batch guide
describe them."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ovserve.dialects.body import Body
from ovserve.dialects.openai.files.objects import EXPIRES_MAX_S, EXPIRES_MIN_S
from ovserve.json_types import JsonObject

# The endpoints a batch may run; each line's ``url`` must be the batch's.
BatchEndpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
ENDPOINTS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
Status = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"]
# A batch in one of these has work left: a restarted server resumes it.
UNFINISHED: tuple[Status, ...] = ("validating", "in_progress", "finalizing", "cancelling")
FINISHED: tuple[Status, ...] = ("failed", "completed", "expired", "cancelled")
WINDOW_S = {"24h": 24 * 3600}


class OutputExpiresAfter(BaseModel):
    """OpenAI's ``BatchFileExpirationAfter``: the batch's output and error files expire ``seconds``
    after they are made (the files' own ``created_at``, not the batch's)."""

    model_config = ConfigDict(extra="forbid")

    anchor: Literal["created_at"]
    seconds: int = Field(ge=EXPIRES_MIN_S, le=EXPIRES_MAX_S)


class CreateBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1)
    endpoint: BatchEndpoint
    completion_window: Literal["24h"]
    # OpenAI's Metadata: at most 16 pairs, keys up to 64 characters, values up to 512.
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    output_expires_after: OutputExpiresAfter | None = None


class BatchError(Body):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(Body):
    object: Literal["list"] = "list"
    data: list[BatchError]


class RequestCounts(Body):
    total: int
    completed: int
    failed: int


class Batch(Body):
    id: str
    object: Literal["batch"]
    endpoint: str
    model: str | None = None
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: Status
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts
    metadata: dict[str, str] | None = None
    # Kept with the batch for its output files, never sent: OpenAI's Batch object has no such field.
    output_expires_after: OutputExpiresAfter | None = Field(default=None, exclude=True)

    def encode(self) -> str:
        # Every field, null included: OpenAI's batch objects carry them all.
        return self.model_dump_json(by_alias=True)

    @property
    def output_expiry_s(self) -> int | None:
        """How long the batch's output and error files live once made; None: until deleted."""
        return self.output_expires_after.seconds if self.output_expires_after is not None else None

    def stored(self) -> str:
        """The JSON a store keeps: :meth:`encode`'s, and the output files' expiry when there is one
        (read back by ``model_validate_json``; a row written before the field reads as None)."""
        if self.output_expires_after is None:
            return self.encode()
        return json.dumps({**json.loads(self.encode()), "output_expires_after": self.output_expires_after.model_dump()})


class BatchList(Body):
    object: Literal["list"]
    data: list[Batch]
    first_id: str | None
    last_id: str | None
    has_more: bool

    def encode(self) -> str:
        return self.model_dump_json(by_alias=True)  # each batch whole, as Batch.encode writes it


class ListQuery(BaseModel):
    """``GET /v1/batches``'s query: newest first, at most ``limit`` (1 to 100) after ``after``."""

    model_config = ConfigDict(extra="ignore")

    after: str | None = None
    limit: int = Field(default=20, ge=1, le=100)


class InputLine(BaseModel):
    """One line of a batch's input file."""

    model_config = ConfigDict(extra="forbid")

    custom_id: str = Field(min_length=1, max_length=512)
    method: Literal["POST"]
    url: str
    body: JsonObject
