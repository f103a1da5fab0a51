"""Faults injected into a real engine process, for the end-to-end tests: failures the real
pipeline cannot be made to produce on cue (a ``step()`` that raises, a ``step()`` that hangs, a
``step()`` that works in silence for long, a slow vision encoder, slow steps).
:class:`FaultInjectingLoop` is the continuous-batching loop with those hooks; the engine process
runs it only when its spec carries an :class:`~ovserve.engine.spec.EngineFault` (set from
``OVSERVE_TEST_*`` variables by tests), so a production engine never checks for them. Each fault
fires for a request whose ``max_tokens`` is the number the variable names.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ovserve.engine.continuous import EngineLoop, _Active
from ovserve.engine.messages import GenerationParams
from ovserve.engine.spec import SLOW_ADMISSION_S, SLOW_STEP_S, EngineFault

log = logging.getLogger("ovserve.engine")


class FaultInjectingLoop(EngineLoop):
    def __init__(self, *args: Any, fault: EngineFault, **kwargs: Any) -> None:
        # The continuous loop's own arguments, passed on as they came: only the fault is added.
        super().__init__(*args, **kwargs)
        self._fault = fault
        self._fail_next_step = False
        self._stall_next_step = False
        self._busy_next_step = False

    def _register(self, request_id: int, handle: Any, params: GenerationParams) -> _Active:
        if params.max_new_tokens == self._fault.fail_step_on_max_new_tokens:
            self._fail_next_step = True
        if params.max_new_tokens == self._fault.stall_step_on_max_new_tokens:
            self._stall_next_step = True
        if params.max_new_tokens == self._fault.busy_step_on_max_new_tokens:
            self._busy_next_step = True
        return super()._register(request_id, handle, params)

    def _step_pipeline(self) -> None:
        slow = self._fault.slow_step_on_max_new_tokens
        if slow and any(active.params.max_new_tokens == slow for active in self._active.values()):
            time.sleep(SLOW_STEP_S)
        if self._fail_next_step:
            self._fail_next_step = False
            raise RuntimeError("injected step failure (EngineSpec.fault)")
        if self._stall_next_step:
            log.warning("injected stall (EngineSpec.fault): this engine stops making progress")
            threading.Event().wait()  # forever, as a hung step() would; the watchdog kills us
        if self._busy_next_step:
            self._busy_next_step = False
            self._work_in_silence(self._fault.busy_step_seconds)
        super()._step_pipeline()

    @staticmethod
    def _work_in_silence(seconds: float) -> None:
        """Burn CPU on the stepping thread without a word, for ``seconds`` of wall clock (on a crowded
        machine it gets its share of a core, as a real step would)."""
        log.warning("injected long step (EngineSpec.fault): %g s of work before this step", seconds)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sum(range(10_000))
        log.warning("injected long step done")

    def _admit(self, request_id: int, text: str, images: list[Any], cfg: Any, params: GenerationParams) -> Any:
        if params.max_new_tokens == self._fault.slow_admission_on_max_new_tokens:
            time.sleep(SLOW_ADMISSION_S)  # a vision encoder that takes its time
        return super()._admit(request_id, text, images, cfg, params)
