"""Building what an engine process runs: the pipeline of an :class:`EngineSpec` (continuous
batching -- plain, speculative, prompt lookup --, stateful; embeddings and rerank models come from
``ovserve.engine.retrieval``, speech models from ``ovserve.engine.speech``, image models from
``ovserve.engine.images``), the generation
config of each request, and the measurements taken on a new pipeline before it serves (its KV
block size, its vocabulary).

Every pipeline, whatever its kind, is built on the CPU with the bounds on the plugin's JIT kernel
caches (:func:`ovserve.engine.memory.bound_kernel_caches`): the spec handed to the retrieval and
speech builders carries them in its ``plugin_config``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np

from ovserve.engine.compile_cache import compile_cache_lock
from ovserve.engine.loop import STEPS_TO_FREE
from ovserve.engine.memory import bound_kernel_caches
from ovserve.engine.messages import GenerationParams
from ovserve.engine.retrieval import build_retrieval_model
from ovserve.engine.spec import VISION_ENCODER_FILE, EngineSpec, PipelineKind, SchedulerSettings

log = logging.getLogger("ovserve.engine")

# GenerationConfig's own "consider every token" value (SIZE_MAX).
_NO_TOP_K = 2**64 - 1
# The block-size probe's request id: far from the server's ids, which count up from 0.
_PROBE_REQUEST_ID = 2**62


def build_generation_config(pipe: Any, params: GenerationParams) -> Any:
    """Map resolved :class:`GenerationParams` onto the pipeline's config.

    ``pipe.get_config()`` carries the model's eos/stop token ids; every sampling field is then
    set explicitly so nothing falls back to a value the server did not choose.
    """
    # ContinuousBatchingPipeline.get_config() / LLMPipeline.get_generation_config(): same content.
    cfg = pipe.get_config() if hasattr(pipe, "get_config") else pipe.get_generation_config()
    cfg.max_new_tokens = params.max_new_tokens
    cfg.ignore_eos = params.ignore_eos
    cfg.repetition_penalty = params.repetition_penalty
    cfg.presence_penalty = params.presence_penalty
    cfg.frequency_penalty = params.frequency_penalty
    cfg.apply_chat_template = False  # the server already rendered the template
    cfg.logprobs = 1 if params.logprobs else 0
    if params.stop:
        # The engine matches stop strings at token granularity; the server trims exactly.
        cfg.stop_strings = set(params.stop)
        cfg.include_stop_str_in_output = True
    requested_stops = set(params.stop_token_ids)
    if requested_stops and params.ignore_eos:
        # The engine's ignore_eos ignores every stop token; ignore_eos means the model's EOS only
        # (vLLM), so the request's stop tokens replace the EOS ids and ignore_eos goes off.
        # validate() wants eos_token_id among the stop ids: one of the request's stands in.
        cfg.ignore_eos = False
        cfg.eos_token_id = min(requested_stops)
        cfg.stop_token_ids = requested_stops
    elif requested_stops:
        # Added to the model's EOS ids, which get_config() already put there.
        cfg.stop_token_ids = set(cfg.stop_token_ids) | requested_stops
    if params.beam_search:
        cfg.do_sample = False
        cfg.num_beams = params.best_of
        cfg.num_beam_groups = 1
        cfg.num_return_sequences = params.n
        cfg.length_penalty = params.length_penalty
    elif params.temperature == 0.0:
        cfg.do_sample = False
        cfg.num_return_sequences = 1
    else:
        cfg.do_sample = True
        cfg.temperature = params.temperature
        cfg.top_p = params.top_p
        # get_config() carries generation_config.json's top_k: "no filter" must be set explicitly.
        cfg.top_k = params.top_k if params.top_k > 0 else _NO_TOP_K
        cfg.min_p = params.min_p
        cfg.num_return_sequences = params.n
        # OVMS: an omitted seed means a random one; the engine's default would repeat itself.
        seed = params.seed
        cfg.rng_seed = seed if seed is not None else random.getrandbits(32)
    if params.structured_output:
        import openvino_genai as ov_genai

        # Compiled by the engine (xgrammar); a pattern it rejects fails add_request -> the client's 400.
        cfg.structured_output_config = _structured_output_config(ov_genai, params.structured_output)
    # Speculative / prompt-lookup knobs; the server only sends them to pipelines that use them.
    if params.num_assistant_tokens is not None:
        cfg.num_assistant_tokens = params.num_assistant_tokens
    if params.assistant_confidence_threshold is not None:
        cfg.assistant_confidence_threshold = params.assistant_confidence_threshold
    if params.max_ngram_size is not None:
        cfg.max_ngram_size = params.max_ngram_size
    cfg.validate()
    return cfg


def _structured_output_config(ov_genai: Any, spec: dict[str, str]) -> Any:
    """The engine object of a GrammarSpec (see ovserve.core.guided)."""
    config = ov_genai.StructuredOutputConfig
    if "trigger" not in spec:
        return config(regex=spec["regex"])
    tag = config.Tag(spec["begin"], config.Regex(spec["regex"]), spec["end"])
    return config(compound_grammar=config.TriggeredTags(triggers=[spec["trigger"]], tags=[tag]))


def _scheduler_config(settings: SchedulerSettings) -> Any:
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = settings.cache_size
    scheduler.max_num_seqs = settings.max_num_seqs
    scheduler.max_num_batched_tokens = settings.max_num_batched_tokens
    scheduler.dynamic_split_fuse = settings.dynamic_split_fuse
    scheduler.enable_prefix_caching = settings.enable_prefix_caching
    return scheduler


def build_pipeline(spec: EngineSpec) -> Any:
    """The pipeline of ``spec.kind``: continuous batching (plain, speculative, prompt lookup) or
    stateful; for embeddings and rerank, the retrieval model (``ovserve.engine.retrieval``); for
    speech, ``ovserve.engine.speech``. Built holding its model cache (``ovserve.engine.compile_cache``)."""
    compiled = [spec.model_path] + ([spec.draft_models_path] if spec.draft_models_path else [])
    with compile_cache_lock(spec.plugin_config, compiled):
        return _build_pipeline(spec)


def _build_pipeline(spec: EngineSpec) -> Any:
    import openvino_genai as ov_genai

    # Every kind, not only generation: the CPU plugin's JIT kernel caches would otherwise grow for
    # hours (ovserve.engine.memory). An embeddings engine compiles kernels for every (batch, length)
    # input shape it meets: one pass over the 4,080 shapes of batches of 1-8 inputs of 3-512 tokens
    # took the demo model's engine from 170 to 2,432 MiB without the bounds (docs/operations.md).
    properties = bound_kernel_caches(spec.device, spec.plugin_config)
    spec = dataclasses.replace(spec, plugin_config=properties)
    if spec.kind is PipelineKind.SPEECH_TO_TEXT:
        from ovserve.engine.speech import SpeechToText

        return SpeechToText(spec)
    if spec.kind is PipelineKind.TEXT_TO_SPEECH:
        from ovserve.engine.speech import TextToSpeech

        return TextToSpeech(spec)
    if spec.kind is PipelineKind.IMAGE_GENERATION:
        from ovserve.engine.images import ImageGenerator

        return ImageGenerator(spec)
    if not spec.kind.generates:
        return build_retrieval_model(spec)
    properties = dict(properties)
    if spec.kind is PipelineKind.STATEFUL:
        return ov_genai.LLMPipeline(str(spec.model_path), spec.device, **properties)
    if spec.kind is PipelineKind.SPECULATIVE:
        assert spec.draft_models_path is not None and spec.draft_scheduler is not None
        draft_device = spec.draft_device or spec.device
        # The draft is compiled into the same model cache (its CPU-only cache mode only on the CPU).
        cached = {key: value for key, value in spec.plugin_config.items() if key == "CACHE_DIR"}
        if draft_device.upper() == "CPU" and "CACHE_MODE" in spec.plugin_config:
            cached["CACHE_MODE"] = spec.plugin_config["CACHE_MODE"]
        properties["draft_model"] = ov_genai.draft_model(
            str(spec.draft_models_path),
            draft_device,
            scheduler_config=_scheduler_config(spec.draft_scheduler),
            **bound_kernel_caches(draft_device, cached),
        )
    elif spec.kind is PipelineKind.PROMPT_LOOKUP:
        properties["prompt_lookup"] = True
    return ov_genai.ContinuousBatchingPipeline(
        str(spec.model_path), _scheduler_config(spec.scheduler), spec.device, properties
    )


def vocab_size(model_path: Path) -> int | None:
    """The ids the model can generate (its config's ``vocab_size``), if the config says."""
    try:
        config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    # A VLM keeps its language model's settings in a nested config.
    nested = [config.get(key) for key in ("text_config", "llm_config")]
    sizes = [config.get("vocab_size")] + [sub.get("vocab_size") for sub in nested if isinstance(sub, dict)]
    return next((size for size in sizes if isinstance(size, int) and size > 0), None)


def is_vlm(model_path: Path) -> bool:
    """A VLM directory (openvino_genai's layout): its prompts are never token ids."""
    return (model_path / VISION_ENCODER_FILE).is_file()


def kv_block_tokens(device: str) -> int:
    """Tokens per KV-cache block on ``device``: openvino_genai's ``DeviceConfig`` pages the cache in
    blocks of 16 tokens on a GPU (any device string that names one) and 32 elsewhere (the CPU: one
    block holds 1-32 tokens, measured with ``PipelineMetrics.cache_usage``)."""
    return 16 if "GPU" in device else 32


def measure_block_bytes(pipe: Any) -> int | None:
    """The bytes of one KV block, measured with a one-token request before readiness.

    One token takes one block, so the cache's usage (a percentage of its blocks) tells its block
    count, and its size in bytes the block's; the KV precision and layout the plugin chose need
    not be known. The request also compiles the first inference before any client waits for it.
    """
    import openvino as ov

    cfg = pipe.get_config()
    cfg.max_new_tokens = 2  # still running after the first step, when the usage is read
    cfg.ignore_eos = True
    cfg.do_sample = False
    cfg.apply_chat_template = False
    token = pipe.get_tokenizer().encode("a", add_special_tokens=False).input_ids.data[0][:1].tolist() or [0]
    handle = pipe.add_request(_PROBE_REQUEST_ID, ov.Tensor(np.array([token], dtype=np.int64)), cfg)
    pipe.step()
    metrics = pipe.get_metrics()
    while pipe.has_non_finished_requests():
        pipe.step()
    if handle.can_read():  # read() with nothing pending would block
        handle.read_all()
    for _ in range(STEPS_TO_FREE):  # the pipeline frees the request in the steps that follow
        pipe.step()
    usage = float(metrics.cache_usage) / 100.0
    if usage <= 0:
        log.warning("could not measure the KV block size; cached_tokens are counted without a capacity bound")
        return None
    blocks = round(1 / usage)
    return int(metrics.kv_cache_size_in_bytes) // blocks if blocks else None
