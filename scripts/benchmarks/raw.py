"""The raw ``ContinuousBatchingPipeline``, driven step by step in this process.

What the server's engine process does minus everything around it (HTTP, templating, the pipe to
the engine, detokenising per chunk): the ceiling the server is measured against. Workloads add
requests up front or from callbacks (a finished turn adds the next one), so a conversation or a
late long prompt runs the same way as against the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ovserve.engine.spec import EngineSpec

from .measure import Trace

OnDone = Callable[[Trace, list[int]], None]


@dataclass
class _Running:
    handle: Any
    trace: Trace
    ids: list[int]
    on_done: OnDone | None


class RawDriver:
    """One pipeline built from the engine spec the server would build for the same flags."""

    def __init__(self, spec: EngineSpec) -> None:
        import openvino_genai as ov_genai

        from ovserve.engine.pipelines import build_pipeline

        self._ov_genai = ov_genai
        self.pipe = build_pipeline(spec)
        self.tokenizer = self.pipe.get_tokenizer()
        self._running: list[_Running] = []
        self._next_id = 0

    def submit(self, tag: str, prompt_ids: list[int], max_tokens: int, on_done: OnDone | None = None) -> Trace:
        """Add a greedy request of exactly ``max_tokens`` output tokens (ignore_eos), as the workloads send."""
        import numpy as np
        import openvino as ov

        cfg = self.pipe.get_config()
        cfg.max_new_tokens = max_tokens
        cfg.ignore_eos = True
        cfg.do_sample = False
        cfg.apply_chat_template = False
        trace = Trace(tag=tag, start=time.perf_counter())
        handle = self.pipe.add_request(self._next_id, ov.Tensor(np.array([prompt_ids], dtype=np.int64)), cfg)
        self._next_id += 1  # a duplicate request id breaks step()
        self._running.append(_Running(handle, trace, [], on_done))
        return trace

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Step until every request has finished, or ``until()`` says to stop (the rest are dropped)."""
        running_status = self._ov_genai.GenerationStatus.RUNNING
        while self._running:
            self.pipe.step()
            now = time.perf_counter()
            for item in list(self._running):
                handle = item.handle
                if handle.can_read():  # read() with nothing pending blocks holding the GIL
                    for output in handle.read().values():
                        item.ids.extend(output.generated_ids)
                        item.trace.add(now, len(output.generated_ids))
                if handle.get_status() != running_status and not handle.can_read():
                    self._running.remove(item)
                    item.trace.end = now
                    item.trace.text = self.tokenizer.decode(item.ids)
                    if item.on_done is not None:
                        item.on_done(item.trace, item.ids)
            if until is not None and until():
                for item in self._running:
                    item.handle.cancel()
                # The scheduler frees a stopped request's KV blocks in a later step; without these
                # steps, destroying the pipeline logs "BlockManager leaked sequence block tables".
                for _ in range(2):
                    self.pipe.step()
                self._running.clear()
                return

    def warm_up(self, prompt_ids: list[int]) -> None:
        """Compile and allocate the KV cache on a prompt no measured request shares."""
        self.submit("warm-up", prompt_ids, 8)
        self.run()
