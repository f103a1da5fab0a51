"""The OpenAPI description of ``/v3/images/edits``: a multipart form, written here (it is not a
pydantic model; ``ovserve.dialects.openai.images.request.edit_parts`` reads it), whose text fields
are those of ``ImageGenerationRequest`` and whose answers are the generation's."""

from __future__ import annotations

from collections.abc import Mapping

from ovserve.api.openapi.schema import ERRORS, Schema, json_content, ref
from ovserve.dialects.openai.common import ErrorBody
from ovserve.dialects.openai.images.request import ImageGenerationRequest
from ovserve.json_types import JsonValue

_ERRORS = ("400", "404", "413", "415", "429", "503", "504")
_FILE: Schema = {"type": "string", "contentMediaType": "application/octet-stream"}


def image_edit_path(served: Mapping[str, str]) -> Schema:
    names = sorted(served)
    models: list[JsonValue] = [name for name in names if served[name] == "image_generation"] or list(names)
    fields = ImageGenerationRequest.model_json_schema()
    properties = dict(fields["properties"])
    properties["model"] = {"type": "string", "enum": models}
    properties["image"] = {**_FILE, "description": "the image to edit: png, jpeg, webp, gif or bmp"}
    properties["mask"] = {
        **_FILE,
        "description": "where to repaint: transparent pixels (or white ones in a mask without alpha); the "
        "image's dimensions",
    }
    form: Schema = {"type": "object", "required": ["image", "prompt", "model"], "properties": properties}
    if "$defs" in fields:
        form["$defs"] = fields["$defs"]
    error = json_content(ref(ErrorBody.__name__))
    errors: Schema = {status: {"description": ERRORS[status], "content": error} for status in _ERRORS}
    content = json_content(ref("ImagesResponse"))
    content["text/event-stream"] = {"schema": ref("ImageGenerationStreamEvent")}
    return {
        "/v3/images/edits": {
            "post": {
                "summary": "Edit an image (image to image; inpainting with a mask), OpenAI's shape",
                "operationId": "createImageEdit",
                "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": form}}},
                "responses": {"200": {"description": _STREAMED_EDIT, "content": content}, **errors},
            }
        }
    }


_STREAMED_EDIT = (
    "The images, or server-sent events when 'stream' is true (image_edit.partial_image, image_edit.completed, error)"
)
