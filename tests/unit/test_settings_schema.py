"""Every setting is written once, in the schema: the flags, their environment variables and the
graph options are all read from ``ServerSettings``/``ModelSettings`` and agree with them."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from ovserve.__main__ import MODEL_FLAGS, SERVER_FLAGS, build_parser, flag_values, settings_from_flags
from ovserve.engine.spec import LoraAdapter
from ovserve.settings.flags import NOT_A_FLAG, Flag
from ovserve.settings.graph import IGNORED_OPTIONS, LEGACY_OPTIONS, UNSUPPORTED_OPTIONS
from ovserve.settings.graph_schema import LLM_OPTIONS_FIELDS
from ovserve.settings.schema import GRAPH_DEFAULTS, ModelSettings, ServerSettings, models_from_config
from tests.unit.test_graph_config import repository

FLAGS = [*MODEL_FLAGS, *SERVER_FLAGS]
GRAPH_OPTIONS = {name for name, _, _ in LLM_OPTIONS_FIELDS}


def value_of(settings: ServerSettings, flag: Flag) -> Any:
    """The settled value of ``flag``, wherever in the settings' sub-models it lives."""
    model = settings.models[0]
    for holder in (settings, settings.media, model, model.scheduler, model.retrieval, model.images):
        if flag.field_name in type(holder).model_fields:
            return getattr(holder, flag.field_name)
    raise AssertionError(f"--{flag.name} is not a setting")


def _voice_file(tmp_path: Path) -> Path:
    path = tmp_path / "alloy.bin"
    path.write_bytes(b"\0" * 2048)
    return path


def sample(flag: Flag, tiny_llm: Path, tmp_path: Path) -> tuple[str, Any]:
    """A valid value for ``flag`` other than its default, as text and as the schema holds it."""
    special: dict[str, tuple[str, Any]] = {
        "model_path": (str(tiny_llm), tiny_llm),
        "model_name": ("m", "m"),
        "draft_models_path": (str(tiny_llm), tiny_llm),
        "allowed_local_media_path": (str(tmp_path), tmp_path),
        "allowed_media_domains": ("example.com, 10.0.0.1", ["example.com", "10.0.0.1"]),
        "plugin_config": ('{"NUM_STREAMS": "2"}', {"NUM_STREAMS": "2"}),
        "tool_parser": ("qwen3", "qwen3"),
        "reasoning_parser": ("qwen3", "qwen3"),
        "device": ("GPU", "GPU"),
        "draft_device": ("CPU", "CPU"),
        "host": ("127.0.0.1", "127.0.0.1"),
        "pipeline_type": ("LM_CB", "LM_CB"),  # a draft model needs continuous batching
        "api_key": ("sk-test", ["sk-test"]),  # repeatable: one item per flag
        "model_alias": ("claude-*, gpt-4o", ["claude-*", "gpt-4o"]),  # repeatable, comma-separated
        "responses_store": ("none", "none"),
        "cache_dir": (str(tmp_path), tmp_path),
        "voices": (f"alloy={_voice_file(tmp_path)}", {"alloy": _voice_file(tmp_path)}),
        "max_resolution": ("1024x768", (1024, 768)),
        "default_resolution": ("512x384", (512, 384)),
        "resolution": ("512x512", ((512, 512),)),
        "lora_adapters": (f"style={_voice_file(tmp_path)}", {"style": LoraAdapter(path=_voice_file(tmp_path))}),
    }
    if flag.name in special:
        return special[flag.name]
    default = flag.field.get_default(call_default_factory=True)
    if flag.choices:
        text = next(choice for choice in flag.choices if choice not in {default, "VLM"})
    elif isinstance(default, bool):
        text = str(not default).lower()
    elif isinstance(default, (int, float)):
        text = str(default + 1)
    elif default is None:  # an optional bound, e.g. max_tokens_limit
        text = "64"
    else:
        raise AssertionError(f"no sample value for --{flag.name}")
    return text, TypeAdapter(flag.field.annotation).validate_python(text, strict=False)


def samples(tiny_llm: Path, tmp_path: Path) -> dict[str, tuple[str, Any]]:
    return {flag.name: sample(flag, tiny_llm, tmp_path) for flag in FLAGS if flag.name != "config_path"}


def test_the_command_line_writes_no_default_of_its_own() -> None:
    serve = build_parser().parse_args(["serve"])
    assert vars(serve) == {"command": "serve"}  # a flag not given is absent: the schema decides


def test_flags_not_given_take_the_schema_defaults(tiny_llm: Path) -> None:
    args = build_parser().parse_args(["serve", "--model_path", str(tiny_llm), "--model_name", "m"])
    settings = settings_from_flags(flag_values(args, environ={}))
    for flag in FLAGS:
        if flag.name not in {"model_path", "model_name"}:
            assert value_of(settings, flag) == flag.field.get_default(call_default_factory=True), flag.name


def test_help_lists_every_flag_alias_choice_and_description(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in FLAGS:
        for name in flag.names:
            assert f"--{name} " in text
        assert flag.field.description, f"--{flag.name} has no help text"
        assert " ".join(flag.field.description.split()) in text
        if flag.choices:
            assert "{" + ",".join(flag.choices) + "}" in text
    assert "OVSERVE_<FLAG>" in text


def test_every_field_is_a_flag_or_marked_as_none() -> None:
    # A new setting needs no code but its field: it is a flag unless marked NOT_A_FLAG.
    def leaves(model: type[BaseModel]) -> set[str]:
        names = set()
        for name, field in model.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                names |= leaves(field.annotation)
            elif field.json_schema_extra != NOT_A_FLAG:
                names.add(name)
        return names

    assert {flag.field_name for flag in FLAGS} == leaves(ServerSettings) | leaves(ModelSettings)
    assert len({flag.name for flag in FLAGS}) == len(FLAGS)


@pytest.mark.parametrize("source", ["command line", "environment"])
def test_every_flag_sets_its_field_from_the_command_line_and_the_environment(
    source: str, tiny_llm: Path, tmp_path: Path
) -> None:
    values = samples(tiny_llm, tmp_path)
    if source == "command line":
        argv = [item for name, (text, _) in values.items() for item in (f"--{name}", text)]
        settings = settings_from_flags(flag_values(build_parser().parse_args(["serve", *argv]), environ={}))
    else:
        environ = {f"OVSERVE_{name.upper()}": text for name, (text, _) in values.items()}
        settings = settings_from_flags(flag_values(build_parser().parse_args(["serve"]), environ=environ))
    for flag in FLAGS:
        if flag.name in values:
            expected = values[flag.name][1]
            assert value_of(settings, flag) == expected, flag.name
            assert expected != flag.field.get_default(call_default_factory=True), flag.name


def test_ovserve_port_round_trips_and_the_command_line_wins(tiny_llm: Path) -> None:
    environ = {"OVSERVE_PORT": "9000", "OVSERVE_MODEL_PATH": str(tiny_llm), "OVSERVE_MODEL_NAME": "m"}
    assert settings_from_flags(flag_values(build_parser().parse_args(["serve"]), environ)).port == 9000
    args = build_parser().parse_args(["serve", "--rest_port", "9001"])
    assert settings_from_flags(flag_values(args, environ)).port == 9001


def test_environment_mistakes_name_the_flag(tiny_llm: Path) -> None:
    environ = {"OVSERVE_MODEL_PATH": str(tiny_llm), "OVSERVE_MODEL_NAME": "m", "OVSERVE_MAX_NUM_SEQS": "0"}
    with pytest.raises(ValidationError, match="greater than or equal to 1") as excinfo:
        settings_from_flags(flag_values(build_parser().parse_args(["serve"]), environ))
    assert "max_num_seqs" in str(excinfo.value)


def test_a_graph_that_sets_nothing_gets_the_schema_defaults(tiny_llm: Path, tmp_path: Path) -> None:
    (model,) = models_from_config(repository(tmp_path, tiny_llm, 'models_path: "TINY"'))
    settings = ServerSettings(models=[model])
    for flag in MODEL_FLAGS:
        if flag.name not in {"model_path", "model_name"}:
            expected = GRAPH_DEFAULTS.get(flag.field_name, flag.field.get_default(call_default_factory=True))
            assert value_of(settings, flag) == expected, flag.name


def _pbtxt(option: str, text: str, expected: Any) -> str:
    if isinstance(expected, bool | int) or option == "pipeline_type":
        return f"{option}: {text}"
    return f"{option}: {json.dumps(text) if option != 'plugin_config' else repr(text)}"


def test_every_graph_option_means_what_the_flag_of_its_name_means(tiny_llm: Path, tmp_path: Path) -> None:
    values = samples(tiny_llm, tmp_path)
    shared = {flag.name: name for flag in MODEL_FLAGS for name in flag.names if name in GRAPH_OPTIONS}
    assert set(shared) >= {"cache_size", "max_num_seqs", "best_of_limit", "plugin_config", "draft_models_path"}
    implemented = GRAPH_OPTIONS - set(UNSUPPORTED_OPTIONS) - set(LEGACY_OPTIONS) - set(IGNORED_OPTIONS)
    graph_only = {"models_path", "generation_config_path"} | {name for name in implemented if name.startswith("draft_")}
    assert implemented - set(shared.values()) <= graph_only, "a graph option without a setting of its name"

    lines = ['models_path: "TINY"', *(_pbtxt(option, *values[flag]) for flag, option in shared.items())]
    (from_graph,) = models_from_config(repository(tmp_path, tiny_llm, "\n".join(lines)))
    given = ["model_path", "model_name", *shared]
    argv = ["serve", *(item for name in given for item in (f"--{name}", values[name][0]))]
    from_flags = settings_from_flags(flag_values(build_parser().parse_args(argv), environ={}))
    graph_settings = ServerSettings(models=[from_graph])
    for flag in MODEL_FLAGS:
        if flag.name in shared:
            assert value_of(graph_settings, flag) == value_of(from_flags, flag) == values[flag.name][1], flag.name


def test_draft_graph_options_override_the_main_scheduler(tiny_llm: Path, tmp_path: Path) -> None:
    options = 'models_path: "TINY"\n draft_models_path: "TINY"\n cache_size: 3\n draft_max_num_seqs: 8'
    (model,) = models_from_config(repository(tmp_path, tiny_llm, options))
    draft = model.engine_spec().draft_scheduler
    assert draft is not None and draft.max_num_seqs == 8 and draft.cache_size == 3


def test_prefix_caching_is_turned_off_with_a_warning_for_speculative_decoding(
    tiny_llm: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """openvino_genai's speculative decoding fails sampled requests with prefix caching on
    (scripts/repro/speculative_prefix_cache.py): the command line's default and a graph's explicit
    true are both overridden, for the draft too, and the log says why."""
    argv = ["serve", "--model_path", str(tiny_llm), "--model_name", "m", "--draft_models_path", str(tiny_llm)]
    options = 'models_path: "TINY"\n draft_models_path: "TINY"\n enable_prefix_caching: true'
    with caplog.at_level("WARNING", logger="ovserve.settings.schema"):
        (from_flags,) = settings_from_flags(flag_values(build_parser().parse_args(argv), environ={})).models
        (from_graph,) = models_from_config(repository(tmp_path, tiny_llm, options))
    for model in (from_flags, from_graph):
        spec = model.engine_spec()
        assert spec.draft_scheduler is not None
        assert not model.scheduler.enable_prefix_caching
        assert not spec.scheduler.enable_prefix_caching and not spec.draft_scheduler.enable_prefix_caching
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 2, warnings
    assert all("prefix caching is turned off" in message and "speculative" in message for message in warnings)
    assert "graph.pbtxt" in warnings[1]


def test_prefix_caching_stays_on_without_a_draft_model(tiny_llm: Path, caplog: pytest.LogCaptureFixture) -> None:
    for extra in ([], ["--plugin_config", '{"prompt_lookup": true}']):
        argv = ["serve", "--model_path", str(tiny_llm), "--model_name", "m", *extra]
        with caplog.at_level("WARNING", logger="ovserve.settings.schema"):
            (model,) = settings_from_flags(flag_values(build_parser().parse_args(argv), environ={})).models
        assert model.scheduler.enable_prefix_caching and model.engine_spec().scheduler.enable_prefix_caching
    assert not [record for record in caplog.records if "prefix caching" in record.getMessage()]


def test_a_draft_scheduler_the_engine_would_refuse_is_refused_at_load(tiny_llm: Path, tmp_path: Path) -> None:
    from ovserve.settings.graph import GraphError

    options = 'models_path: "TINY"\n draft_models_path: "TINY"\n draft_max_num_seqs: 0'
    with pytest.raises(GraphError, match=r"graph\.pbtxt:8: field 'draft_max_num_seqs': draft scheduler max_num_seqs"):
        models_from_config(repository(tmp_path, tiny_llm, options))


def test_a_graph_value_the_schema_refuses_names_file_line_and_option(tiny_llm: Path, tmp_path: Path) -> None:
    from ovserve.settings.graph import GraphError

    with pytest.raises(GraphError) as excinfo:
        models_from_config(repository(tmp_path, tiny_llm, 'models_path: "TINY"\n best_of_limit: 0'))
    assert re.search(r"graph\.pbtxt:7: field 'best_of_limit': .*greater than or equal to 1", str(excinfo.value))


def test_literal_flags_offer_exactly_the_schema_choices() -> None:
    (pipeline,) = [flag for flag in FLAGS if flag.name == "pipeline_type"]
    assert pipeline.choices == typing.get_args(pipeline.field.annotation)
    assert typing.get_origin(pipeline.field.annotation) is Literal


def _documented(default: Any, cell: str) -> bool:
    """Whether a README table's default cell states ``default``."""
    cell = cell.strip().strip("`'")
    if default is None or default in ([], {}, ()):  # "none", "disabled", "detected from ...": no value
        return cell not in {"true", "false"} and not re.fullmatch(r"[\d.]+", cell)
    if isinstance(default, bool):
        return cell == str(default).lower()
    if isinstance(default, int | float):
        return re.fullmatch(r"[\d.]+", cell) is not None and float(cell) == default
    if isinstance(default, dict):
        return cell == json.dumps(default)
    if isinstance(default, tuple) and len(default) == 2:  # a resolution, WIDTHxHEIGHT
        return cell == f"{default[0]}x{default[1]}"
    return cell == str(default)


def test_readme_tables_state_the_schema_defaults() -> None:
    from pydantic_core import PydanticUndefined

    from tests.conftest import ROOT

    serving = (ROOT / "README.md").read_text().split("## Serve your own model")[0]
    by_name = {name.removeprefix("--"): flag for flag in FLAGS for name in flag.names}
    checked = set()
    for row in re.findall(r"^\| (`[^|]+) \|([^|]*)\|", serving, flags=re.MULTILINE):
        names = re.findall(r"`(?:--)?(\w+)`", row[0])
        cell = row[1].strip()
        cells = cell.split(", ") if len(cell.split(", ")) == len(names) else [cell] * len(names)
        for name, cell in zip(names, cells, strict=True):
            flag = by_name.get(name)
            if flag is None:
                continue
            default = flag.field.get_default(call_default_factory=True)
            if default is PydanticUndefined:
                assert cell.strip() == "required", name
            else:
                if not row[0].startswith("`--"):  # a graph option
                    default = GRAPH_DEFAULTS.get(flag.field_name, default)
                assert _documented(default, cell), f"README says {name} defaults to {cell!r}, the schema {default!r}"
            checked.add(flag.name)
    assert checked == {flag.name for flag in FLAGS}, "flags the README does not list"


# -- what the command line checks itself: where the models come from ------------------------------


def run_serve(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """``ovserve serve`` up to its settings; only mistakes are run, so it never starts serving."""
    from ovserve.__main__ import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", *argv]) == 2
    return capsys.readouterr().err


def test_serve_without_a_model_says_what_to_give(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "give --model_path and --model_name, or --config_path" in run_serve([], capsys, monkeypatch)


def test_config_path_and_model_path_exclude_each_other(
    tiny_llm: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--config_path", "graphs/config.json", "--model_path", str(tiny_llm)]
    assert "--config_path and --model_path/--model_name exclude each other" in run_serve(argv, capsys, monkeypatch)


def test_a_bad_environment_value_is_reported_as_its_flag(
    tiny_llm: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--model_path", str(tiny_llm), "--model_name", "m"]
    err = run_serve(argv, capsys, monkeypatch, OVSERVE_REST_PORT="1", OVSERVE_PORT="many")  # aliases: no variable
    assert err.startswith("ovserve: --port: Input should be a valid integer") and "Traceback" not in err


def test_model_flags_with_config_path_are_reported_as_ignored(
    tiny_llm: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = repository(tmp_path, tiny_llm, 'models_path: "TINY"')
    args = build_parser().parse_args(["serve", "--config_path", str(config), "--cache_size", "4"])
    (model,) = settings_from_flags(flag_values(args, environ={})).models
    assert model.scheduler.cache_size == 0
    assert "--cache_size is ignored with --config_path" in caplog.text


def test_parsers_can_be_turned_off_and_an_unknown_one_lists_the_choices(tiny_llm: Path) -> None:
    argv = ["serve", "--model_path", str(tiny_llm), "--model_name", "m", "--tool_parser", "none"]
    settings = settings_from_flags(flag_values(build_parser().parse_args([*argv, "--reasoning_parser", "none"]), {}))
    assert (settings.models[0].tool_parser, settings.models[0].reasoning_parser) == ("none", "none")
    with pytest.raises(ValidationError, match=r"unknown reasoning_parser 'think' \(known: .*qwen3, none\)"):
        settings_from_flags(flag_values(build_parser().parse_args([*argv, "--reasoning_parser", "think"]), {}))
