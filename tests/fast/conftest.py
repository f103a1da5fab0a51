"""The fast layer: the real aiohttp app in-process, with a scripted engine behind the real protocol.

Each test builds a :class:`~ovserve.models.served.ServedModel` with :func:`fast_model` (a fake
character tokenizer, a small chat template, no model files) whose ``EngineClient`` starts a
:class:`~tests.fast.scripted_engine.ScriptedEngine` instead of an engine process: the commands
and events are the typed wire messages of ``ovserve.engine.messages``, through a real pipe, so
the client's dispatch, cancellation and restart code runs as in production. The app is
``ovserve.app.create_app`` driven by pytest-aiohttp's ``aiohttp_client``.

The stand-in exists for speed (the whole layer runs in seconds, no model is built) and for fault
injection (an engine that refuses, is overloaded, or dies mid-stream on cue). It never replaces
the end-to-end tests in ``tests/e2e``: what a script says is what the test author believes the
engine does, and only the real engine can tell whether that belief is true.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ovserve.clock import SYSTEM_CLOCK, Clock, ManualClock

if TYPE_CHECKING:
    from ovserve.models.served import ServedModel
    from tests.fast.harness import FastModel, Served

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/fast is marked: ``pytest -m fast`` runs only this layer.
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.fast)


ServeFactory = Callable[..., Awaitable["Served"]]


@pytest.fixture
async def serve(aiohttp_client: Any) -> AsyncIterator[ServeFactory]:
    """``await serve(fast_model(...), ...)``: the app on those models; waits for the engines unless
    ``wait=False``; its timers (idle unloads, keep_alive) run on ``clock`` (the fixture
    :func:`clock` moves by hand); ``measure`` replaces the manager's reader of an engine's memory
    (scripted engines have no process); other keyword arguments are server settings."""
    # The app's modules, imported by the tests that serve it: xdist's controller loads this file
    # too, before it starts a worker, and needs none of them (~1 s of CPU).
    from ovserve.api import keys
    from ovserve.app import create_app
    from ovserve.models.served import ModelRegistry
    from ovserve.settings.schema import ServerSettings
    from tests.fast.harness import Served

    made: list[FastModel] = []

    async def start(
        *models: FastModel,
        wait: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        measure: Callable[[ServedModel], int | None] | None = None,
        **settings_fields: Any,
    ) -> Served:
        made.extend(models)
        # model_construct: the model settings point at no model directory.
        settings = ServerSettings.model_construct(models=[fast.model.settings for fast in models], **settings_fields)
        app = create_app(settings, ModelRegistry([fast.model for fast in models]), clock=clock)
        if measure is not None:  # before any engine starts: a load measures its engine at once
            app[keys.RESIDENCY].measure = measure
        client = await aiohttp_client(app)
        if wait:
            for task in app[keys.ENGINE_LOADS]:
                await task
        return Served(client, list(models))

    yield start
    for fast in made:
        fast.model.tokenizer.close()


@pytest.fixture
def clock() -> ManualClock:
    """A clock the test moves (``await clock.advance(seconds)``) instead of sleeping: pass it to
    ``serve(..., clock=clock)``."""
    return ManualClock()


@pytest.fixture
def messages() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Hi"}]
