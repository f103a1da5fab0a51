"""Speculative / prompt-lookup acceptance, measured from what each engine step delivered.

The step API exposes no per-request acceptance counters (only ``generate()`` results carry
them), but each main-model step of a drafting pipeline yields 1 verified token plus the accepted
draft tokens: accepted = generated - steps. Drafted = steps x num_assistant_tokens when that knob
(not a confidence threshold) drives the draft. ``/metrics`` reports the totals (``ovserve_draft_*``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ovserve.engine.messages import GenerationParams, SequenceOutput
from ovserve.engine.spec import PipelineKind

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


class DraftingCounter:
    """One request's acceptance, added to its model's :class:`DraftingStats` at its finish.

    Only single-sequence requests count (each output of choice 0 is one main-model step).
    """

    def __init__(self, model: _DraftingModel, params: GenerationParams) -> None:
        self._model = model
        self._params = params
        self._generated = 0
        self._steps = 0

    def observe(self, output: SequenceOutput) -> None:
        if output.index != 0:
            return
        if output.token_count:
            self._generated += output.token_count
            self._steps += 1
        params = self._params
        if output.finish_reason is None or not self._steps or params.n != 1 or params.beam_search:
            return
        accepted, drafted = self._model.drafting.record(self._generated, self._steps, params.num_assistant_tokens)
        log.info(
            "request %d on %r (%s): %d tokens in %d steps, %d draft tokens accepted%s",
            output.request_id, self._model.name, self._model.kind.value, self._generated, self._steps, accepted,
            f" of {drafted} drafted" if drafted else "",
        )  # fmt: skip


class _DraftingModel(Protocol):
    """What the counter reads of a served model."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> PipelineKind: ...
    @property
    def drafting(self) -> DraftingStats: ...
