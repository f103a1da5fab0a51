"""Text completion: prompts -> a :class:`CompletionJob`, no chat template.

Each prompt is encoded as is, with the tokenizer's special tokens (BOS), as OVMS and vLLM do. A
list of prompts runs as one engine request per prompt, concurrently; choice ``i * n + j`` is the
j-th completion of prompt i, as OpenAI numbers them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ovserve.core.conversation import Sampling
from ovserve.core.job import Job, ready_model, sampling_params
from ovserve.engine.messages import EnginePrompt, VisionPrompt
from ovserve.errors import BadRequestError
from ovserve.models.served import ModelRegistry


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompts:
    """The core's input for a text completion."""

    model: str
    prompts: list[str]
    sampling: Sampling
    origin: str = "prompt"  # what a complaint about a prompt names


@dataclass(kw_only=True)
class CompletionJob(Job):
    id_prefix = "cmpl"

    prompts: list[str]
    prompt_ids: list[list[int]]

    def engine_prompts(self) -> list[EnginePrompt]:
        if self.model.vision is not None:
            # A VLM pipeline takes prompt text, never token ids (ids fail its step() and, with
            # other requests in the step, have killed the engine process).
            return [VisionPrompt(prompt, []) for prompt in self.prompts]
        return list(self.prompt_ids)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for ids in self.prompt_ids)


class CompletionGeneration:
    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    async def prepare(self, request: Prompts) -> CompletionJob:
        model = ready_model(self.models, request.model)
        if model.vision is not None:
            for prompt in request.prompts:  # a VLM reads image placeholders in the text as image slots
                model.vision.check_prompt(prompt, 0, param=request.origin)
        prompt_ids = [
            await model.encode_prompt(prompt, add_special_tokens=True, param=request.origin)
            for prompt in request.prompts
        ]
        for position, ids in enumerate(prompt_ids):
            if not ids:  # the engine cannot start from nothing
                raise BadRequestError(f"prompt {position} encodes to no tokens", param=request.origin)
        # One sampling configuration serves every prompt: the longest one bounds the output.
        longest = max(len(ids) for ids in prompt_ids)
        params = sampling_params(request.sampling, model, prompt_tokens=longest, param=request.origin)
        return CompletionJob(model=model, params=params, prompts=request.prompts, prompt_ids=prompt_ids)
