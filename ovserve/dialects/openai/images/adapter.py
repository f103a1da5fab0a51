"""``/images/generations`` and ``/images/edits`` for the request envelope.

Contract: :class:`ImagesEndpoint` prepares an :class:`~ovserve.core.images.ImageJob` from a
generation's JSON or an edit's form (``prepare``: every 4xx before engine work; the request's
``model`` may name one of the model's LoRA adapters, as vLLM names LoRA models); ``complete``
answers OpenAI's ``ImagesResponse``; ``stream`` (``stream: true``) sends each partial image as the
engine decodes it, then one completed event per image with the usage. The image metrics (images,
denoising steps, seconds) are recorded once the images are out.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ovserve.core.images import ImageJob, prepare_images
from ovserve.dialects.body import Body
from ovserve.dialects.openai.images.request import ImageEditRequest, ImageGenerationRequest
from ovserve.dialects.openai.images.response import (
    CompletedEvent,
    Image,
    ImagesResponse,
    ImageStreamError,
    ImagesUsage,
    PartialImageEvent,
)
from ovserve.engine.messages import ImageProgress, ImageResult
from ovserve.errors import EngineError, OvserveError
from ovserve.models.served import ModelRegistry


@dataclass(frozen=True, slots=True)
class ImageCall:
    job: ImageJob
    streaming: bool
    edit: bool


class ImagesEndpoint:
    """Both image routes (see the module doc)."""

    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    async def prepare(self, request: ImageGenerationRequest | ImageEditRequest, caller: str) -> ImageCall:
        edit = isinstance(request, ImageEditRequest)
        fields = request.fields if isinstance(request, ImageEditRequest) else request
        model = self.models.get(fields.model)
        adapter = fields.model if fields.model in model.spec.images.aliases else None
        ask = (
            fields.ask(adapter, request.image, request.mask)
            if isinstance(request, ImageEditRequest)
            else fields.ask(adapter)
        )
        job = await prepare_images(model, ask, edit=edit)
        return ImageCall(job, bool(fields.stream), edit)

    async def complete(self, call: ImageCall) -> ImagesResponse:
        job = call.job
        result = None
        async for event in job.run():
            if isinstance(event, ImageResult):
                result = event
        if result is None:
            raise EngineError("the engine ended the image request without its images")
        self._record(job)
        return ImagesResponse(
            created=int(time.time()),
            data=[Image(b64_json=_base64(image)) for image in result.images],
            background="opaque",
            output_format=job.params.output_format,  # type: ignore[arg-type]
            size=job.size,
            quality="auto",
            usage=self._usage(job),
        )

    async def stream(self, call: ImageCall) -> AsyncIterator[Body]:
        job, prefix = call.job, "image_edit" if call.edit else "image_generation"
        async for event in job.run():
            # What each event says of its image besides the image itself (validated as the events are built).
            made: dict[str, Any] = {
                "created_at": int(time.time()),
                "size": job.size,
                "quality": "auto",
                "background": "opaque",
                "output_format": job.params.output_format,
            }
            if isinstance(event, ImageProgress):
                if event.index is None:  # the denoising started: nothing to show yet
                    continue
                for image in event.images:
                    yield PartialImageEvent(
                        type=f"{prefix}.partial_image",  # type: ignore[arg-type]
                        b64_json=_base64(image),
                        partial_image_index=event.index,
                        **made,
                    )
                continue
            self._record(job)
            for image in event.images:
                yield CompletedEvent(
                    type=f"{prefix}.completed",  # type: ignore[arg-type]
                    b64_json=_base64(image),
                    usage=self._usage(job),
                    **made,
                )

    def failure_event(self, call: ImageCall, error: OvserveError) -> ImageStreamError:
        return ImageStreamError.of(error)

    @staticmethod
    def _usage(job: ImageJob) -> ImagesUsage:
        return ImagesUsage.of(job.prompt_tokens, job.input_image_tokens, job.output_image_tokens)

    @staticmethod
    def _record(job: ImageJob) -> None:
        if job.recorder is not None:
            job.recorder.images(job.params.n, job.steps_run, job.engine_seconds())


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
