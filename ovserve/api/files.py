"""HTTP handlers of OpenAI's Files API: ``POST /v1/files``, ``GET /v1/files``, ``GET`` and ``DELETE
/v1/files/{id}``, ``GET /v1/files/{id}/content`` (also under ``/v3``).

None of them touches a model: they read and write the files store
(``ovserve.dialects.openai.files.store``) only. An upload is a multipart form (``purpose`` and
``file``) read part by part: the file's bytes go to disk chunk by chunk as they arrive, each chunk
within ``--body_timeout``, and ``--max_file_mb`` / ``--max_file_lines`` are checked as they come
(aiohttp's ``--max_request_mb`` bound applies to whole bodies read at once, which this is not).
Files belong to the API key that uploaded them (``envelope.caller_of``). OpenAI's
``expires_after[anchor]`` and ``expires_after[seconds]`` fields (``ExpiresAfter``: both or
neither) make a file expire; OpenAI's other form fields are read past.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from ovserve.api import keys
from ovserve.api.envelope import caller_of, json_response, validated
from ovserve.dialects.openai.files.objects import (
    UPLOAD_PURPOSES,
    ExpiresAfter,
    FileDeleted,
    FileList,
    FileObject,
    ListQuery,
)
from ovserve.dialects.openai.files.store import Upload
from ovserve.errors import BadRequestError, RequestTimeoutError, UnsupportedMediaTypeError

T = TypeVar("T")

_CHUNK = 256 * 1024
_MAX_FIELD = 1024  # a form field other than the file (purpose): a name, not a document
_MAX_FILENAME = 255
_EXPIRY_FIELDS = {field.alias for field in ExpiresAfter.model_fields.values()}


async def _timely(request: web.Request, step: Awaitable[T]) -> T:
    timeout = request.app[keys.SETTINGS].body_timeout_s
    try:
        async with asyncio.timeout(timeout):
            return await step
    except TimeoutError:
        raise RequestTimeoutError(f"the upload stalled: no data for {timeout:g} s") from None


async def _field(request: web.Request, part: BodyPartReader) -> str:
    data = b""
    while chunk := await _timely(request, part.read_chunk(_MAX_FIELD)):
        data += chunk
        if len(data) > _MAX_FIELD:
            raise BadRequestError(f"the form field '{part.name}' is too long", param=part.name)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise BadRequestError(f"the form field '{part.name}' is not UTF-8 text", param=part.name) from None


async def _receive(request: web.Request, part: BodyPartReader) -> Upload:
    name = (part.filename or "upload").rsplit("/", 1)[-1][:_MAX_FILENAME] or "upload"
    upload = request.app[keys.FILES].upload(caller_of(request), name)
    try:
        while chunk := await _timely(request, part.read_chunk(_CHUNK)):
            await upload.write(chunk)
    except BaseException:
        await asyncio.shield(upload.abort())
        raise
    return upload


async def create_file(request: web.Request) -> web.Response:
    if request.content_type != "multipart/form-data":
        raise UnsupportedMediaTypeError(f"expected 'multipart/form-data' (a file upload), got '{request.content_type}'")
    purpose: str | None = None
    expiry: dict[str, str] = {}  # the expires_after[...] fields
    upload: Upload | None = None
    try:
        try:
            reader = await request.multipart()
            while (part := await _timely(request, reader.next())) is not None:
                if not isinstance(part, BodyPartReader):
                    raise BadRequestError("a nested multipart form is not a file upload")
                if part.name == "file" and upload is None:
                    upload = await _receive(request, part)
                elif part.name == "purpose":
                    purpose = await _field(request, part)
                elif part.name is not None and part.name in _EXPIRY_FIELDS:
                    expiry[part.name] = await _field(request, part)
                else:
                    await _timely(request, part.release())  # OpenAI's fields we do not know: read past
        except (ValueError, HttpProcessingError) as exc:  # a malformed multipart body
            raise BadRequestError(f"the multipart form cannot be read: {exc}") from None
        if upload is None:
            raise BadRequestError("the form has no 'file' part", param="file")
        if purpose not in UPLOAD_PURPOSES:
            allowed = " or ".join(f"'{one}'" for one in UPLOAD_PURPOSES)
            raise BadRequestError(f"'purpose' must be {allowed}, got {purpose!r}", param="purpose")
        expires_after = validated(ExpiresAfter, expiry).seconds if expiry else None
        stored = await upload.finish("batch" if purpose == "batch" else "user_data", expires_after=expires_after)
        return json_response(stored)
    except BaseException:
        if upload is not None:
            await asyncio.shield(upload.abort())
        raise


async def list_files(request: web.Request) -> web.Response:
    query = validated(ListQuery, dict(request.query))
    files, more = await request.app[keys.FILES].list(query, owner=caller_of(request))
    return json_response(
        FileList(
            object="list",
            data=files,
            first_id=files[0].id if files else None,
            last_id=files[-1].id if files else None,
            has_more=more,
        )
    )


async def get_file(request: web.Request) -> web.Response:
    found: FileObject = await request.app[keys.FILES].get(request.match_info["file_id"], owner=caller_of(request))
    return json_response(found)


async def file_content(request: web.Request) -> web.StreamResponse:
    path = await request.app[keys.FILES].path(request.match_info["file_id"], owner=caller_of(request))
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def delete_file(request: web.Request) -> web.Response:
    file_id = request.match_info["file_id"]
    await request.app[keys.FILES].delete(file_id, owner=caller_of(request))
    return json_response(FileDeleted(id=file_id, object="file", deleted=True))
