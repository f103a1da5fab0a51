"""Speculative / prompt-lookup acceptance, measured from what each engine step delivered.

The step API exposes no per-request acceptance counters (only ``generate()`` results carry
them), but each main-model step of a drafting pipeline yields 1 verified token plus the accepted
draft tokens: accepted = generated - steps. Drafted = steps x num_assistant_tokens when that knob
(not a confidence threshold) drives the draft. ``/metrics`` reports the totals (``ovserve_draft_*``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from ovserve.engine.messages import SequenceOutput
from ovserve.engine.spec import PipelineKind
from ovserve.generation_config import GenerationParams

# The engine client's logger: the per-request line keeps the name operators filter on.
log = logging.getLogger("ovserve.engine.client")

DRAFTING_KINDS = frozenset({PipelineKind.SPECULATIVE, PipelineKind.PROMPT_LOOKUP})


@dataclass
class DraftingStats:
    """One model's drafting totals."""

    requests: int = 0
    generated_tokens: int = 0
    verify_steps: int = 0
    accepted_tokens: int = 0
    drafted_tokens: int = 0

    def record(self, generated: int, steps: int, num_assistant_tokens: int | None) -> tuple[int, int | None]:
        accepted = max(0, generated - steps)
        drafted = steps * num_assistant_tokens if num_assistant_tokens else None
        self.requests += 1
        self.generated_tokens += generated
        self.verify_steps += steps
        self.accepted_tokens += accepted
        self.drafted_tokens += drafted or 0
        return accepted, drafted


async def record_drafting(
    outputs: AsyncIterator[SequenceOutput],
    params: GenerationParams,
    stats: DraftingStats,
    *,
    model: str,
    kind: PipelineKind,
) -> AsyncGenerator[SequenceOutput, None]:
    """``outputs`` unchanged, with the request's acceptance added to ``stats`` at its finish.

    Only single-sequence requests count (each output of choice 0 is one main-model step).
    Closing this generator closes ``outputs`` (which cancels the engine request).
    """
    generated = steps = 0
    async with contextlib.aclosing(outputs):  # type: ignore[type-var]
        async for output in outputs:
            if output.index == 0:
                if output.token_count:
                    generated += output.token_count
                    steps += 1
                if output.finish_reason is not None and steps and params.n == 1 and not params.beam_search:
                    # Recorded here: consumers may stop iterating at the finish, before the end.
                    accepted, drafted = stats.record(generated, steps, params.num_assistant_tokens)
                    log.info(
                        "request %d on %r (%s): %d tokens in %d steps, %d draft tokens accepted%s",
                        output.request_id, model, kind.value, generated, steps, accepted,
                        f" of {drafted} drafted" if drafted else "",
                    )  # fmt: skip
            yield output
