"""Hot config reload: ``config.json`` (and the graphs it names) read again while the server serves.

Contract (:meth:`ConfigReloader.reload`, run by ``POST /v1/config/reload`` and, every
``--file_system_poll_wait_seconds``, by :meth:`ConfigReloader.watch` when the files changed):

- The new config is read and every new or changed model's server side (tokenizer, template) is
  loaded before anything changes. Any mistake refuses the whole reload: :class:`ConfigError`
  names the file, line and field; it is logged, and the running set keeps serving unchanged.
- Then, by model name: an added model is served at once (loaded now, or on demand); a removed one
  leaves the registry (new requests: 404), finishes the requests it holds, and unloads; a changed
  one (any setting but its residency options) is replaced: the old one drains and unloads, the
  new one loads after it (requests for it meanwhile wait for that load). A change of only
  ``pinned``, ``lazy_load`` or ``idle_unload_timeout`` applies to the running model.
- Reloads run one at a time; the poller logs a broken file once, not at every poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ovserve.errors import BadRequestError, complaints
from ovserve.models.manager import ResidencyManager
from ovserve.models.residency import ModelState
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.settings.graph import RESIDENCY_OPTIONS, GraphError, read_config
from ovserve.settings.schema import ModelSettings, ServerSettings, models_from_config
from ovserve.ticks import sleep_to_next_tick

log = logging.getLogger(__name__)


class ConfigError(BadRequestError):
    """The config cannot be served as it is now: nothing was changed."""

    default_code = "invalid_config"


@dataclass
class ReloadReport:
    """Model names by what the reload did to them (``POST /v1/config/reload``'s answer)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def anything(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def _serving_settings(settings: ModelSettings) -> dict[str, object]:
    """What makes two models the same engine: every setting but the residency options."""
    return settings.model_dump(exclude=set(RESIDENCY_OPTIONS))


class ConfigReloader:
    def __init__(self, settings: ServerSettings, models: ModelRegistry, manager: ResidencyManager) -> None:
        assert settings.config_path is not None
        self.settings = settings
        self.path = settings.config_path
        self.models = models
        self.manager = manager
        self._lock = asyncio.Lock()
        # The files as they were when last applied, and as last tried (a broken version is logged once).
        self._applied = self._seen = self.fingerprint()

    def fingerprint(self) -> str:
        """A digest of config.json and of every graph it names (as far as it can be read)."""
        digest = hashlib.sha256()
        files = [self.path]
        with contextlib.suppress(GraphError):  # a broken config is its own content's digest
            files += [entry.graph_path for entry in read_config(self.path)]
        for path in files:
            digest.update(str(path).encode())
            try:
                digest.update(Path(path).read_bytes())
            except OSError as exc:
                digest.update(f"unreadable: {exc.errno}".encode())
        return digest.hexdigest()

    async def watch(self, interval: float) -> None:
        """Reload whenever the files change, checking every ``interval`` seconds."""
        loop = asyncio.get_running_loop()
        while True:
            await sleep_to_next_tick(interval)  # with the other housekeeping (ovserve.ticks)
            seen = await loop.run_in_executor(None, self.fingerprint)
            if seen in (self._applied, self._seen):
                continue
            self._seen = seen
            with contextlib.suppress(ConfigError):  # logged by reload(); the next change is tried
                await self.reload()

    async def reload(self) -> ReloadReport:
        """Read the config again and apply it (see the module doc); :class:`ConfigError` when it
        cannot be served, with nothing changed."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            fingerprint = await loop.run_in_executor(None, self.fingerprint)
            try:
                wanted = await loop.run_in_executor(None, self._read)
                report, built = await self._build(wanted)
            except ConfigError as exc:
                log.error("config reload refused, the running models keep serving unchanged: %s", exc.message)
                raise
            self._apply(wanted, report, built)
            self._applied = self._seen = fingerprint
            if report.anything:
                log.info(
                    "config reloaded from %s: added %s, removed %s, changed %s",
                    self.path, report.added or "none", report.removed or "none", report.changed or "none",
                )  # fmt: skip
            return report

    def _read(self) -> dict[str, ModelSettings]:
        try:
            models = models_from_config(self.path, self.settings.host_plugin_config)
        except GraphError as exc:
            raise ConfigError(str(exc)) from None
        except ValidationError as exc:
            raise ConfigError("; ".join(complaint.text for complaint in complaints(exc))) from None
        return {model.name: model for model in models}

    async def _build(self, wanted: dict[str, ModelSettings]) -> tuple[ReloadReport, dict[str, ServedModel]]:
        """What changes, and the server side of every model to add or replace, loaded off the loop."""
        report = ReloadReport()
        current = {model.name: model for model in self.models}
        report.removed = sorted(set(current) - set(wanted))
        to_build = []
        for name, settings in wanted.items():
            model = current.get(name)
            if model is None:
                report.added.append(name)
                to_build.append(settings)
            elif _serving_settings(model.settings) != _serving_settings(settings):
                report.changed.append(name)
                to_build.append(settings)
            else:
                report.unchanged.append(name)
        loop = asyncio.get_running_loop()
        built: dict[str, ServedModel] = {}
        try:
            for settings in to_build:
                built[settings.name] = await loop.run_in_executor(None, ServedModel.load, settings, self.settings)
        except Exception as exc:
            for model in built.values():
                model.close()
            failed = settings.name
            raise ConfigError(f"{settings.source}: model '{failed}' cannot be loaded: {exc}") from None
        return report, built

    def _apply(self, wanted: dict[str, ModelSettings], report: ReloadReport, built: dict[str, ServedModel]) -> None:
        """Swap the models in, in one go (no await: a request sees the old set or the new one)."""
        for name in report.removed:
            removed = self.models.remove(name)
            if removed is not None:
                self.manager.retire(removed)
        for name in report.changed:
            old = self.models.remove(name)
            if old is not None:
                self.manager.retire(old)
            self.manager.add(built[name], replacing=old)
        for name in report.added:
            self.manager.add(built[name])
        for name in report.unchanged:
            model = self.models.get(name)
            if model.settings != wanted[name]:  # only its residency options changed
                model.settings = wanted[name]
                self.manager.apply_policy(model)
                if model.residency.pinned and self.manager.state(model) is ModelState.UNLOADED:
                    self.manager.load_soon(model)
