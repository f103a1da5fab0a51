"""The settings of models on demand: memory budget sizes, config.json's per-model residency options
(refused with file and line), the model cache's properties and directory, and the estimate of a
model never measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ovserve.engine.memory import machine_memory_bytes
from ovserve.models.residency import ENGINE_OVERHEAD_BYTES, WEIGHTS_FACTOR, Residency, files_bytes, static_estimate
from ovserve.settings.graph import GraphError
from ovserve.settings.resources import compile_cache_properties, parse_memory_size, resolve_cache_dir
from ovserve.settings.schema import ModelSettings, ServerSettings, models_from_config
from tests.unit.test_graph_config import repository


@pytest.mark.parametrize(
    ("text", "size"),
    [("1073741824", 1 << 30), ("512M", 512 << 20), ("1.5G", 3 << 29), ("2GiB", 2 << 30), ("64k", 64 << 10)],
)
def test_a_budget_is_bytes_with_binary_suffixes(text: str, size: int) -> None:
    assert parse_memory_size(text) == size


def test_a_budget_may_be_a_share_of_the_machine_memory() -> None:
    total = machine_memory_bytes()
    assert total is not None and total > 0
    assert parse_memory_size("50%") == total // 2


@pytest.mark.parametrize("text", ["lots", "12X", "0%", "150%", "-5G"])
def test_a_budget_that_is_no_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_memory_size(text)


def test_the_budget_flag_goes_through_the_schema(tiny_llm: Path) -> None:
    settings = ServerSettings.model_validate(
        {"models": [{"model_name": "m", "model_path": tiny_llm}], "models_memory_budget": "3G"}
    )
    assert settings.models_memory_budget == 3 << 30
    assert (
        ServerSettings.model_validate({"models": [{"model_name": "m", "model_path": tiny_llm}]}).cache_dir is not None
    )


def config_with(tmp_path: Path, tiny_llm: Path, **options: object) -> Path:
    config = {"model_config_list": [{"config": {"name": "m", "base_path": "m", **options}}]}
    return repository(tmp_path, tiny_llm, 'models_path: "TINY"', config)


def test_config_entries_carry_the_residency_options(tmp_path: Path, tiny_llm: Path) -> None:
    (model,) = models_from_config(config_with(tmp_path, tiny_llm, lazy_load=True, idle_unload_timeout_seconds=30))
    assert (model.lazy_load, model.idle_unload_timeout, model.pinned) == (True, 30, False)


def test_a_wrong_residency_option_is_refused_with_its_file_and_line(tmp_path: Path, tiny_llm: Path) -> None:
    path = tmp_path / "config.json"
    config = config_with(tmp_path, tiny_llm, idle_unload_timeout=-1)
    config.write_text(json.dumps(json.loads(config.read_text()), indent=2))
    with pytest.raises(GraphError) as refused:
        models_from_config(config)
    line = next(number for number, text in enumerate(path.read_text().splitlines(), 1) if "idle_unload_timeout" in text)
    assert f"{path}:{line}:" in str(refused.value)
    assert "idle_unload_timeout" in str(refused.value)


def test_a_pinned_model_cannot_load_lazily_or_idle_out(tmp_path: Path, tiny_llm: Path) -> None:
    for options in ({"pinned": True, "lazy_load": True}, {"pinned": True, "idle_unload_timeout": 10}):
        with pytest.raises(GraphError, match="pinned"):
            models_from_config(config_with(tmp_path, tiny_llm, **options))


def test_an_unknown_entry_field_is_still_refused(tmp_path: Path, tiny_llm: Path) -> None:
    with pytest.raises(GraphError, match="unknown field 'pinnned'"):
        models_from_config(config_with(tmp_path, tiny_llm, pinnned=True))


def test_the_model_cache_keeps_weights_out_on_the_cpu_only(tmp_path: Path) -> None:
    assert compile_cache_properties(tmp_path, "CPU") == {"CACHE_DIR": str(tmp_path), "CACHE_MODE": "OPTIMIZE_SIZE"}
    assert compile_cache_properties(tmp_path, "GPU") == {"CACHE_DIR": str(tmp_path)}


def test_a_plugin_config_cache_dir_wins_over_the_flag(tmp_path: Path, tiny_llm: Path) -> None:
    model = ModelSettings.model_validate({"name": "m", "path": tiny_llm, "plugin_config": {"CACHE_DIR": "/mine"}})
    assert model.engine_spec(tmp_path).plugin_config == {"CACHE_DIR": "/mine"}
    plain = ModelSettings.model_validate({"name": "m", "path": tiny_llm})
    assert plain.engine_spec(tmp_path).plugin_config["CACHE_DIR"] == str(tmp_path)
    assert "CACHE_DIR" not in plain.engine_spec(None).plugin_config


def test_the_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/me")
    assert resolve_cache_dir(Path("$XDG_CACHE_HOME/ovserve")) == Path("/var/cache/me/ovserve")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert resolve_cache_dir(Path("$XDG_CACHE_HOME/ovserve")) == Path.home() / ".cache" / "ovserve"


def test_a_model_never_measured_is_estimated_from_its_files_and_kv_cache(tiny_llm: Path) -> None:
    plain = ModelSettings.model_validate({"name": "m", "path": tiny_llm})
    weights = files_bytes(tiny_llm)
    assert static_estimate(plain) == ENGINE_OVERHEAD_BYTES + WEIGHTS_FACTOR * weights
    with_kv = ModelSettings.model_validate({"name": "m", "path": tiny_llm, "cache_size": 2})
    assert static_estimate(with_kv) == static_estimate(plain) + (2 << 30)


def test_once_measured_the_estimate_is_the_last_residency_peak() -> None:
    residency = Residency(estimate_before_measure=500)
    assert residency.estimate() == 500
    residency.resident = True
    residency.reserved = 500
    assert residency.accounted() == 500
    for rss in (100, 180, 150):
        residency.observe(rss)
    assert residency.accounted() == 500  # never less than it was placed with
    residency.observe(700)
    assert residency.accounted() == 700
    residency.freed()
    assert (residency.estimate(), residency.accounted()) == (700, 0)
    residency.resident, residency.reserved = True, residency.estimate()
    residency.observe(300)
    assert residency.accounted() == 700  # it may grow back to its last peak


def test_a_draft_model_adds_its_own_kv_cache_to_the_estimate(tiny_llm: Path) -> None:
    """The draft's KV cache is draft_cache_size when the graph sets it, else the main model's
    cache_size (OVMS's inheritance), as the engine allocates it."""
    main = {"name": "m", "path": tiny_llm, "cache_size": 2}
    without_draft = static_estimate(ModelSettings.model_validate(main))
    drafts = files_bytes(tiny_llm) * WEIGHTS_FACTOR
    inherited = ModelSettings.model_validate({**main, "draft_path": tiny_llm})
    assert static_estimate(inherited) == without_draft + drafts + (2 << 30)
    own = ModelSettings.model_validate({**main, "draft_path": tiny_llm, "draft_scheduler": {"cache_size": "1"}})
    assert own.draft_scheduler_settings().cache_size == 1  # validated: the engine gets the number, not "1"
    assert static_estimate(own) == without_draft + drafts + (1 << 30)
