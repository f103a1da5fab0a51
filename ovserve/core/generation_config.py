"""Where every sampling value comes from: request > generation_config.json > built-in default.

This is the only place that decides the precedence (vLLM's ``to_sampling_params``, OVMS's
``base_generation_config_builder``). The result is a plain :class:`GenerationParams`, sent as is
to the engine process (``ovserve.engine.messages.AddRequest``), which turns it into an
``openvino_genai.GenerationConfig`` field by field, so the engine never falls back to a value
nobody chose.
"""

from __future__ import annotations

import logging
from typing import Any

from ovserve.core.conversation import Sampling
from ovserve.engine.messages import GenerationParams
from ovserve.engine.spec import PipelineKind
from ovserve.errors import BadRequestError, ContextLengthExceededError, UnsupportedParameterError
from ovserve.models.defaults import ModelDefaults

log = logging.getLogger(__name__)

# OVMS's documented defaults for /v3/chat/completions (docs: "Request" tables).
BUILTIN_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    # OVMS: "When multinomial sampling is active, defaults to 40 if not set."
    "top_k": 40,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "length_penalty": 1.0,
    "ignore_eos": False,
}

# Temperatures below this are greedy decoding.
GREEDY_BELOW = 1e-5

# The engine's beam search refuses these penalties (generation_config.cpp: "not currently
# supported by beam search"): sent with beam search they are refused, as model defaults dropped.
_BEAM_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


# OVMS's built-in fallbacks for the drafting pipelines (docs: speculative / prompt lookup).
DEFAULT_NUM_ASSISTANT_TOKENS = 5
DEFAULT_MAX_NGRAM_SIZE = 3

# Which request fields each pipeline kind accepts beyond the common ones.
_DRAFTING_FIELDS: dict[PipelineKind, frozenset[str]] = {
    PipelineKind.SPECULATIVE: frozenset({"num_assistant_tokens", "assistant_confidence_threshold"}),
    PipelineKind.PROMPT_LOOKUP: frozenset({"num_assistant_tokens", "max_ngram_size"}),
}


def resolve_max_new_tokens(
    sampling: Sampling,
    defaults: ModelDefaults,
    *,
    prompt_tokens: int,
    context_length: int,
    max_tokens_limit: int | None,
    prompt_param: str = "messages",
) -> int:
    """How many tokens this request may generate.

    The engine has no context-length check of its own (a 4096-context model happily generates
    5000 tokens), so the server refuses what cannot fit and caps what was not asked for.
    ``max_tokens: null`` sent explicitly (``sampling.max_tokens_removed``) skips the model's
    ``max_new_tokens``: only the operator's ``max_tokens_limit`` and the context bound the output.
    ``sampling.clamp_max_tokens``: a request over either bound gets the bound, not a 400.
    """
    requested, limit_param = sampling.max_tokens, sampling.max_tokens_param
    if prompt_tokens == 0:
        # The engine cannot start from nothing ("Prompt length cannot be 0").
        raise BadRequestError(f"the {prompt_param} encodes to no tokens", param=prompt_param)
    if prompt_tokens >= context_length:
        raise ContextLengthExceededError(
            f"the prompt has {prompt_tokens} tokens but the model's context length is {context_length}; "
            f"shorten the {prompt_param}",
            param=prompt_param,
            prompt_tokens=prompt_tokens,
            maximum=context_length - 1,
        )
    room = context_length - prompt_tokens
    if requested is not None and sampling.clamp_max_tokens:
        return min(requested, room, max_tokens_limit or room)
    if requested is not None:
        if max_tokens_limit is not None and requested > max_tokens_limit:
            raise BadRequestError(
                f"{limit_param} ({requested}) exceeds this model's max_tokens_limit ({max_tokens_limit})",
                param=limit_param,
            )
        if requested > room:
            raise ContextLengthExceededError(
                f"the prompt has {prompt_tokens} tokens and {limit_param} asks for {requested} more, but the "
                f"model's context length is {context_length}; ask for at most {room}",
                param=limit_param,
            )
        return requested
    # Not sent: OVMS uses max_tokens_limit as the default, then the model's max_new_tokens;
    # otherwise generation runs until EOS, which the context length bounds.
    model_default = None if sampling.max_tokens_removed else defaults.values.get("max_new_tokens")
    for ceiling in (max_tokens_limit, model_default):
        if ceiling is not None:
            return min(int(ceiling), room)
    return room


def _drafting_params(
    request: Sampling, defaults: ModelDefaults, kind: PipelineKind
) -> tuple[int | None, float | None, int | None]:
    """num_assistant_tokens / assistant_confidence_threshold / max_ngram_size for ``kind``.

    Sent to a pipeline that cannot use them -> 400 naming the pipeline that does (OVMS would
    fail inside the engine). Resolution: request > generation_config.json > built-in.
    """
    accepted = _DRAFTING_FIELDS.get(kind, frozenset())
    for name in ("num_assistant_tokens", "assistant_confidence_threshold", "max_ngram_size"):
        if getattr(request, name) is not None and name not in accepted:
            users = [k.value for k, fields in _DRAFTING_FIELDS.items() if name in fields]
            raise BadRequestError(
                f"'{name}' applies to {' and '.join(users)} pipelines; this model is served by a {kind.value} pipeline",
                param=name,
            )
    if kind is PipelineKind.SPECULATIVE:
        if request.assistant_confidence_threshold is not None:
            return None, request.assistant_confidence_threshold, None
        if request.num_assistant_tokens is not None:
            return request.num_assistant_tokens, None, None
        # The model default may be either knob; a threshold wins only if it is the one configured.
        if "num_assistant_tokens" in defaults.values:
            return int(defaults.values["num_assistant_tokens"]), None, None
        if "assistant_confidence_threshold" in defaults.values:
            return None, float(defaults.values["assistant_confidence_threshold"]), None
        return DEFAULT_NUM_ASSISTANT_TOKENS, None, None
    if kind is PipelineKind.PROMPT_LOOKUP:
        tokens = request.num_assistant_tokens or defaults.values.get("num_assistant_tokens")
        ngram = request.max_ngram_size or defaults.values.get("max_ngram_size")
        return int(tokens or DEFAULT_NUM_ASSISTANT_TOKENS), None, int(ngram or DEFAULT_MAX_NGRAM_SIZE)
    return None, None, None


def resolve_generation_params(
    request: Sampling,
    defaults: ModelDefaults,
    *,
    max_new_tokens: int,
    best_of_limit: int,
    kind: PipelineKind = PipelineKind.CONTINUOUS_BATCHING,
) -> GenerationParams:
    """Resolve each sampling value as request, then generation_config.json, then built-in.

    ``max_new_tokens`` comes from :func:`resolve_max_new_tokens`, which needs the prompt length.
    """
    best_of = request.best_of if request.best_of is not None else request.n
    if best_of > best_of_limit:
        name = "best_of" if request.best_of is not None else "n"
        raise BadRequestError(f"{name} ({best_of}) exceeds this model's best_of_limit ({best_of_limit})", param=name)
    if kind is PipelineKind.STATEFUL and best_of > 1:
        # LLMPipeline streams one sequence at a time: one choice per request.
        name = "n" if request.n > 1 else "best_of"
        raise BadRequestError(
            f"this model is served by a stateful (LM) pipeline, which returns one choice: {name} must be 1", param=name
        )
    model_temperature = defaults.values.get("temperature", BUILTIN_DEFAULTS["temperature"])
    temperature = float(request.temperature if request.temperature is not None else model_temperature)
    if temperature < GREEDY_BELOW:
        # Such temperatures sample greedily anyway; as float32 they can reach the engine as 0,
        # which it refuses for sampling.
        temperature = 0.0
    # OVMS: best_of > 1 is the beam width; n > 1 at temperature 0 can only come from beams too.
    beam_search = (request.best_of is not None and request.best_of > 1) or (request.n > 1 and temperature == 0)
    if beam_search:
        for name, neutral in _BEAM_NEUTRAL.items():
            sent = getattr(request, name)
            if sent is not None and sent != neutral:
                raise UnsupportedParameterError(
                    f"{name} cannot be used with beam search (best_of > 1, or n > 1 at temperature 0)",
                    param=name,
                )

    def pick(name: str, sent: Any) -> Any:
        if sent is not None:
            return sent
        if beam_search and name in _BEAM_NEUTRAL:
            return _BEAM_NEUTRAL[name]
        if name in defaults.values:
            return defaults.values[name]
        return BUILTIN_DEFAULTS[name]

    num_assistant_tokens, assistant_confidence_threshold, max_ngram_size = _drafting_params(request, defaults, kind)
    # An explicit null (Databricks), 0 (llama.cpp) and -1 (OVMS) all mean no top-k filter.
    top_k = 0 if request.top_k_removed else pick("top_k", request.top_k)
    include_stop = request.include_stop_str_in_output
    return GenerationParams(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=float(pick("top_p", request.top_p)),
        top_k=0 if top_k is None or top_k < 0 else int(top_k),
        min_p=float(pick("min_p", request.min_p)),
        repetition_penalty=float(pick("repetition_penalty", request.repetition_penalty)),
        presence_penalty=float(pick("presence_penalty", request.presence_penalty)),
        frequency_penalty=float(pick("frequency_penalty", request.frequency_penalty)),
        length_penalty=float(pick("length_penalty", request.length_penalty)),
        ignore_eos=bool(pick("ignore_eos", request.ignore_eos)),
        seed=request.seed,
        stop=request.stop,
        stop_token_ids=request.stop_token_ids,
        include_stop=include_stop if include_stop is not None else request.stream,
        n=request.n,
        best_of=best_of,
        logprobs=request.logprobs,
        skip_special_tokens=request.skip_special_tokens,
        num_assistant_tokens=num_assistant_tokens,
        assistant_confidence_threshold=assistant_confidence_threshold,
        max_ngram_size=max_ngram_size,
        beam_search=beam_search,
    )
