"""Model aliases: glob patterns a model is also known by (--model_alias, config.json "aliases")."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ovserve.engine.spec import ImageSettings
from ovserve.errors import ModelNotFoundError
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.settings.graph import GraphError, read_config


def model(name: str, *aliases: str) -> ServedModel:
    settings = SimpleNamespace(aliases=list(aliases), images=ImageSettings())  # no LoRA adapters
    return SimpleNamespace(name=name, settings=settings)  # type: ignore[return-value]


def test_a_name_resolves_to_its_model_or_the_first_whose_alias_matches() -> None:
    coder, chat = model("coder", "claude-*"), model("chat", "claude-*", "gpt-4o")
    registry = ModelRegistry([coder, chat])
    assert registry.get("chat") is chat
    assert registry.get("claude-sonnet-4-5") is coder  # the first model whose pattern matches
    assert registry.get("gpt-4o") is chat
    with pytest.raises(ModelNotFoundError) as unknown:
        registry.get("gpt-4o-mini")  # patterns match whole names, case and all
    assert "available: chat, coder" in unknown.value.message
    with pytest.raises(ModelNotFoundError):
        registry.get("Claude-sonnet")


def test_a_model_name_wins_over_another_models_alias() -> None:
    greedy, named = model("greedy", "*"), model("named")
    registry = ModelRegistry([greedy, named])
    assert registry.get("named") is named and registry.get("anything") is greedy


def _config(tmp_path: Path, entry: dict[str, object]) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "graph.pbtxt").write_text("node {}\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": "m", "base_path": "m", **entry}]}))
    return config


def test_config_json_entries_declare_aliases(tmp_path: Path) -> None:
    (entry,) = read_config(_config(tmp_path, {"aliases": ["claude-*", "gpt-4o"]}))
    assert entry.aliases == ("claude-*", "gpt-4o")


def test_config_json_aliases_must_be_a_list_of_names(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match="'aliases' must be a list"):
        read_config(_config(tmp_path, {"aliases": "claude-*"}))
