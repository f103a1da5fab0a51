"""OpenAI's File objects (``OpenAIFile``, ``ListFilesResponse``, ``DeleteFileResponse``) and the
query of a file list, as the OpenAPI document describes them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ovserve.dialects.body import Body

# What a client may upload for: a batch's input, or anything (``user_data``). OpenAI's other
# purposes (fine-tune, assistants, vision, evals) name features ovserve does not have.
UploadPurpose = Literal["batch", "user_data"]
# What a file may be: an upload, or a batch's output or error file (made by the server).
Purpose = Literal["batch", "user_data", "batch_output"]
UPLOAD_PURPOSES: tuple[str, ...] = ("batch", "user_data")
# OpenAI's bounds of an upload's expires_after[seconds]: 1 hour to 30 days.
EXPIRES_MIN_S, EXPIRES_MAX_S = 3600, 30 * 24 * 3600


class FileObject(Body):
    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    filename: str
    purpose: Purpose
    # Deprecated by OpenAI but still required by its schema: a stored file is always processed.
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None


class FileList(Body):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(Body):
    id: str
    object: Literal["file"]
    deleted: bool


class ListQuery(BaseModel):
    """``GET /v1/files``'s query: newest first by default, at most ``limit`` files after ``after``."""

    model_config = ConfigDict(extra="ignore")

    after: str | None = None
    limit: int = Field(default=10_000, ge=1, le=10_000)
    order: Literal["asc", "desc"] = "desc"
    purpose: Purpose | None = None


class ExpiresAfter(BaseModel):
    """An upload's ``expires_after[anchor]`` and ``expires_after[seconds]`` form fields (both, or
    neither): the file expires ``seconds`` after it was created."""

    model_config = ConfigDict(extra="forbid")

    anchor: Literal["created_at"] = Field(alias="expires_after[anchor]")
    seconds: int = Field(alias="expires_after[seconds]", ge=EXPIRES_MIN_S, le=EXPIRES_MAX_S)
