"""The engine process: builds one model's pipeline and runs the loop that drives it.

Why a process: ``step()`` holds the GIL for the whole step, so an in-process engine stalls the
server's event loop by up to a step (and no engine thread can report during one: the watchdog reads
its CPU time instead, ``ovserve.engine.watchdog``). The loops: ``continuous`` (continuous batching,
LLM or VLM), ``stateful`` (``LLMPipeline``), ``retrieval_loop`` (embeddings, rerank); what they share
is in ``loop``; pipelines and generation configs are built in ``pipelines``. Test faults
(``EngineSpec.fault``) run in a loop of their own (``faults``): a production engine never checks
for them.

The process reports its load as it goes: a :class:`~ovserve.engine.messages.Loading` as each stage
starts (compiling, warming up), then ``Ready`` or ``Fatal``.
"""

from __future__ import annotations

import logging
import os

from ovserve.engine.channel import PipeChannel
from ovserve.engine.continuous import EngineLoop
from ovserve.engine.faults import FaultInjectingLoop
from ovserve.engine.memory import pin_malloc_thresholds
from ovserve.engine.messages import Fatal, Loading, LoadStage, Ready
from ovserve.engine.pipelines import build_pipeline, is_vlm, kv_block_tokens, measure_block_bytes, vocab_size
from ovserve.engine.prefix_cache import PrefixCacheModel
from ovserve.engine.retrieval_loop import RetrievalEngineLoop
from ovserve.engine.spec import EngineSpec, PipelineKind
from ovserve.engine.stateful import StatefulEngineLoop


def main(conn: PipeChannel, spec: EngineSpec, log_level: int = logging.INFO) -> None:
    """Entry point of the engine process (``multiprocessing`` spawn target)."""
    logging.basicConfig(level=log_level, format=f"%(asctime)s %(levelname)s [engine {spec.name}] %(message)s")
    # Before the pipeline and any request: freed buffers must go back to the OS (ovserve.engine.memory).
    pin_malloc_thresholds()
    # Each stage is reported as it starts (GET /v3/models' load_stage): a big model's load is minutes.
    conn.send([Loading(LoadStage.COMPILING)])
    try:
        pipe = build_pipeline(spec)
    except Exception as exc:
        conn.send([Fatal(f"could not load {spec.model_path} ({spec.kind.value}) on {spec.device}: {exc}")])
        return
    if spec.kind.generates:  # the token table, and for continuous batching a first inference (the block probe)
        conn.send([Loading(LoadStage.WARMING_UP)])
    loop: EngineLoop | StatefulEngineLoop | RetrievalEngineLoop
    if not spec.kind.generates:
        loop = RetrievalEngineLoop(pipe, conn, spec)
    elif spec.kind.continuous_batching:
        block_size = kv_block_tokens(spec.device)
        text = not is_vlm(spec.model_path)
        prefix_cache = PrefixCacheModel(block_size) if spec.scheduler.enable_prefix_caching and text else None
        # The block's bytes turn the cache's size into its block count (/metrics, the prefix-cache
        # model's capacity). Drafting pipelines refuse a request without their drafting settings, and
        # a VLM's prompts are no token ids: those report no block count.
        measurable = text and spec.kind is PipelineKind.CONTINUOUS_BATCHING
        block_bytes = measure_block_bytes(pipe) if measurable else None
        loop_args = (pipe, conn, prefix_cache, block_bytes, vocab_size(spec.model_path), block_size)
        loop = EngineLoop(*loop_args) if spec.fault is None else FaultInjectingLoop(*loop_args, fault=spec.fault)
    else:
        loop = StatefulEngineLoop(pipe, conn, vocab_size(spec.model_path))
    conn.send([Ready(os.getpid())])
    loop.start_reader()
    loop.run()
