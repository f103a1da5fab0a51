"""Reads OVMS model repositories: ``config.json`` and each model's ``graph.pbtxt``.

The graph is parsed with the protobuf package's own text-format parser against the schema of
``ovserve.settings.graph_schema`` (MediaPipe's graph and OVMS's calculator options): the node's
options type says the model's task (text generation, embeddings, rerank, speech to text, text to
speech, image generation). The parse is strict
about fields, so a misspelled option is reported with its line and name instead of being
silently dropped; only *extensions* of unknown types (other handlers' options) are tolerated.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import message_factory, text_format

from ovserve.settings.graph_schema import GRAPH_CLASS, LORA_LOAD_MODES, PIPELINE_TYPES, POOL, POOLING_TYPES

log = logging.getLogger(__name__)

# OVMS options ovserve understands but does not implement: refused at startup, never ignored.
UNSUPPORTED_OPTIONS = {
    "draft_eagle3_mode": "EAGLE-3 draft models",
    "cache_eviction_config": "KV cache eviction",
    "sparse_attention_config": "sparse attention",
    "cache_interval_multiplier": "cache interval multiplier",
}
# Options older OVMS export scripts wrote: accepted with a warning.
LEGACY_OPTIONS = {
    "response_parser": "renamed to tool_parser in OVMS; used as tool_parser",
    "block_size": "the KV cache block size is chosen by the engine now; ignored",
    "draft_block_size": "the KV cache block size is chosen by the engine now; ignored",
}
# OVMS options that change nothing here: accepted with a warning.
IGNORED_OPTIONS = {
    "chat_template_mode": "ovserve renders chat templates with Jinja2 whatever the mode; ignored",
}


class GraphError(Exception):
    """A deployment file is wrong; the message names the file, the line and the field."""


_LLM_OPTIONS_TYPE = "mediapipe.LLMCalculatorOptions"
# The node options each task's calculator takes, and the task they declare.
_TASK_OF_OPTIONS = {
    _LLM_OPTIONS_TYPE: "text_generation",
    "mediapipe.EmbeddingsCalculatorOVOptions": "embeddings",
    "mediapipe.RerankCalculatorOVOptions": "rerank",
    "mediapipe.S2tCalculatorOptions": "speech_to_text",
    "mediapipe.SttCalculatorOptions": "speech_to_text",
    "mediapipe.T2sCalculatorOptions": "text_to_speech",
    "mediapipe.ImageGenCalculatorOptions": "image_generation",
}
_OPTIONS_CLASSES = {
    name: message_factory.GetMessageClass(POOL.FindMessageTypeByName(name)) for name in _TASK_OF_OPTIONS
}


@dataclass(frozen=True)
class GraphSettings:
    """What a graph's LLM node sets, as input to ``ovserve.settings.schema.ModelSettings``.

    ``values`` holds only the options the graph writes, keyed by the settings' names (options the
    graph omits take the schema's defaults); ``places`` says where each was written, so a value
    the settings refuse is reported with its file, line and option name.
    """

    graph_path: Path
    values: dict[str, Any] = field(default_factory=dict)
    places: dict[str, str] = field(default_factory=dict)


def _line_of(text: str, needle: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return 0


def _line_after(text: str, anchor: str, needle: str) -> int:
    """The first line holding ``needle`` at or after the first line holding ``anchor`` (an entry's
    option after its name)."""
    start = _line_of(text, anchor)
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= start and needle in line:
            return number
    return start


def parse_graph(graph_path: Path) -> GraphSettings:
    """Parse one ``graph.pbtxt`` and return its LLM node's options (paths resolved)."""
    try:
        text = graph_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GraphError(f"{graph_path}: cannot read the graph: {exc.strerror or exc}") from exc
    graph = GRAPH_CLASS()
    try:
        text_format.Parse(text, graph, allow_unknown_extension=True, descriptor_pool=POOL)
    except text_format.ParseError as exc:
        # ParseError messages carry "line:column : what"; keep them, prefixed by the file.
        raise GraphError(f"{graph_path}:{exc}") from exc

    found: list[tuple[str, Any]] = []
    for node in graph.node:
        for option in node.node_options:
            options_class = _OPTIONS_CLASSES.get(option.TypeName())
            if options_class is not None:
                options = options_class()
                option.Unpack(options)
                found.append((option.TypeName(), options))
    if not found:
        raise GraphError(
            f"{graph_path}: no node has [type.googleapis.com / mediapipe.LLMCalculatorOptions] (or "
            "EmbeddingsCalculatorOVOptions, RerankCalculatorOVOptions, S2tCalculatorOptions, T2sCalculatorOptions, "
            "ImageGenCalculatorOptions) node_options; ovserve serves LLM, embeddings, rerank, speech-to-text, "
            "text-to-speech and image-generation graphs"
        )
    if len(found) > 1:
        raise GraphError(f"{graph_path}: {len(found)} model nodes found; a graph serves exactly one model")
    type_name, options = found[0]
    if type_name != _LLM_OPTIONS_TYPE:
        return _retrieval_settings(graph_path, text, _TASK_OF_OPTIONS[type_name], options)
    return _to_settings(graph_path, text, options)


def _retrieval_settings(graph_path: Path, text: str, task: str, options: Any) -> GraphSettings:
    """An embeddings, rerank, speech or image node: OVMS names the device ``target_device`` (``device``
    in the older SttCalculatorOptions and ImageGenCalculatorOptions); the rest keep their names."""
    if not options.HasField("models_path"):
        raise GraphError(f"{graph_path}: field 'models_path' is required in the {task} node's options")
    settings = GraphSettings(graph_path=graph_path, values={"task": task})
    for descriptor, value in options.ListFields():
        option = descriptor.name
        setting = {"models_path": "path", "target_device": "device"}.get(option, option)
        if option == "models_path":
            value = (graph_path.parent / value).resolve()
        elif option == "pooling":
            value = POOLING_TYPES[value]
        elif option in ("target_device", "device") and not value:
            continue  # "" means the default device
        elif option == "voices":
            value = {voice.name: (graph_path.parent / voice.path).resolve() for voice in value}
        elif option == "lora_adapters":
            _dynamic_adapters_only(graph_path, text, value)
            value = {
                entry.alias: {"path": (graph_path.parent / entry.path).resolve(), "alpha": _alpha(entry)}
                for entry in value
            }
        elif option == "composite_lora_adapters":
            value = {entry.alias: {part.adapter_alias: _alpha(part) for part in entry.components} for entry in value}
        settings.values[setting] = value
        settings.places[setting] = f"{graph_path}:{_line_of(text, option)}: field '{option}'"
    return settings


def _alpha(entry: Any) -> float:
    """A LoRA adapter's or composite component's alpha: OVMS's default 1.0 when the graph omits it."""
    return float(entry.alpha) if entry.HasField("alpha") else 1.0


def _dynamic_adapters_only(graph_path: Path, text: str, entries: Any) -> None:
    """ovserve switches adapters per request (OVMS's DYNAMIC, the default); STATIC (NPU: compiled in
    at a fixed alpha) and FUSE (merged into the base weights) change what the base model is, which
    ovserve does not serve."""
    for entry in entries:
        mode = LORA_LOAD_MODES[entry.mode]
        if mode != "DYNAMIC":
            where = f"{graph_path}:{_line_after(text, entry.alias, 'mode:')}"
            raise GraphError(
                f"{where}: LoRA adapter '{entry.alias}': mode {mode} is not served by ovserve, which applies "
                "adapters per request; use mode: DYNAMIC (or leave mode out)"
            )


# Draft options: the draft model's scheduler overrides, and its device.
_DRAFT_SCHEDULER_OPTIONS = ("draft_max_num_batched_tokens", "draft_cache_size", "draft_max_num_seqs",
                            "draft_dynamic_split_fuse")  # fmt: skip


def _to_settings(graph_path: Path, text: str, options: Any) -> GraphSettings:
    """OVMS's option names are the settings' names; only paths, enums and draft options are translated."""

    def where(name: str) -> str:
        return f"{graph_path}:{_line_of(text, name)}: field '{name}'"

    for name, feature in UNSUPPORTED_OPTIONS.items():
        if options.HasField(name):
            raise GraphError(f"{where(name)}: {feature} is an OVMS option ovserve does not support; remove it")
    for name, note in {**LEGACY_OPTIONS, **IGNORED_OPTIONS}.items():
        if options.HasField(name):
            log.warning("%s: %s", where(name), note)
    if not options.HasField("models_path"):
        raise GraphError(f"{graph_path}: field 'models_path' is required in LLMCalculatorOptions")
    draft_options = [name for name in (*_DRAFT_SCHEDULER_OPTIONS, "draft_device") if options.HasField(name)]
    if draft_options and not options.HasField("draft_models_path"):
        raise GraphError(f"{where(sorted(draft_options)[0])}: draft options need 'draft_models_path' (the draft "
                         "model to use)")  # fmt: skip

    settings = GraphSettings(graph_path=graph_path)

    def put(setting: str, option: str, value: Any) -> None:
        settings.values[setting] = value
        settings.places[setting] = where(option)

    base = graph_path.parent
    models_path = (base / options.models_path).resolve()
    draft_scheduler = {}
    for descriptor, value in options.ListFields():
        option = descriptor.name
        if option in IGNORED_OPTIONS or (option in LEGACY_OPTIONS and option != "response_parser"):
            continue
        if option == "models_path":
            put("path", option, models_path)
        elif option == "draft_models_path":
            put("draft_path", option, (base / value).resolve())
        elif option == "generation_config_path":
            put(option, option, (models_path / value).resolve())
        elif option == "pipeline_type":
            put(option, option, PIPELINE_TYPES[value])
        elif option in _DRAFT_SCHEDULER_OPTIONS:
            draft_scheduler[option.removeprefix("draft_")] = value
            settings.places["draft_scheduler"] = where(option)
        elif option == "response_parser":
            if not options.HasField("tool_parser"):
                put("tool_parser", option, value)
        elif option == "device" and not value:
            continue  # device: "" means the default device
        else:
            put(option, option, value)
    if draft_scheduler:
        settings.values["draft_scheduler"] = draft_scheduler
    return settings


# ovserve's own per-model options in a config.json entry (OVMS has none of them): when the model's
# engine runs (ovserve.models.residency). Values are checked by the settings schema.
RESIDENCY_OPTIONS = ("pinned", "lazy_load", "idle_unload_timeout")
_RESIDENCY_ALIASES = {"idle_unload_timeout_seconds": "idle_unload_timeout"}


@dataclass(frozen=True)
class ServableEntry:
    name: str
    graph_path: Path
    # Other names clients may send for it (glob patterns; ovserve's extension of config.json).
    aliases: tuple[str, ...] = ()
    # The entry's residency options, by setting name, and where each was written (file:line).
    options: dict[str, Any] = field(default_factory=dict)
    places: dict[str, str] = field(default_factory=dict)


def read_config(config_path: Path) -> list[ServableEntry]:
    """The servables of an OVMS ``config.json`` (``model_config_list`` and ``mediapipe_config_list``)."""
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GraphError(f"{config_path}: cannot read the config: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise GraphError(f"{config_path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    if not isinstance(raw, dict):
        raise GraphError(f"{config_path}: the config must be a JSON object")
    unknown = sorted(set(raw) - {"model_config_list", "mediapipe_config_list", "monitoring"})
    if unknown:
        raise GraphError(f"{config_path}: unknown top-level field '{unknown[0]}'")
    text = config_path.read_text(encoding="utf-8")
    base = config_path.parent
    entries: list[ServableEntry] = []
    for list_name in ("model_config_list", "mediapipe_config_list"):
        items = raw.get(list_name) or []
        if not isinstance(items, list):
            raise GraphError(f"{config_path}:{_line_of(text, list_name)}: field '{list_name}' must be a list")
        for position, item in enumerate(items):
            # model_config_list wraps each entry in {"config": {...}}; mediapipe_config_list does not.
            entry = item.get("config", item) if isinstance(item, dict) else None
            label = f"{list_name}[{position}]"
            if not isinstance(entry, dict):
                raise GraphError(f"{config_path}: {label} must be an object")
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise GraphError(f"{config_path}:{_line_of(text, list_name)}: {label} needs a 'name'")
            quoted_name = json.dumps(name)
            where = f"{config_path}:{_line_of(text, quoted_name)}: {label} ('{name}')"
            known = {"name", "base_path", "graph_path", "subconfig", "aliases", *RESIDENCY_OPTIONS, *_RESIDENCY_ALIASES}
            extra = sorted(set(entry) - known)
            if extra:
                raise GraphError(f"{where}: unknown field '{extra[0]}'")
            options, places = {}, {}
            for key in sorted(set(entry) & {*RESIDENCY_OPTIONS, *_RESIDENCY_ALIASES}):
                setting = _RESIDENCY_ALIASES.get(key, key)
                if setting in options:
                    raise GraphError(f"{where}: field '{key}': '{setting}' is given twice")
                options[setting] = entry[key]
                line = _line_after(text, quoted_name, json.dumps(key))
                places[setting] = f"{config_path}:{line}: {label} ('{name}') field '{key}'"
            if "base_path" not in entry and "graph_path" not in entry:
                raise GraphError(f"{where}: field 'base_path' is required")
            base_path = base / str(entry.get("base_path", ""))
            graph_path = base / entry["graph_path"] if "graph_path" in entry else base_path / "graph.pbtxt"
            if not graph_path.is_file():
                raise GraphError(f"{where}: field '{'graph_path' if 'graph_path' in entry else 'base_path'}': "
                                 f"no graph at {graph_path.resolve()}")  # fmt: skip
            if any(existing.name == name for existing in entries):
                raise GraphError(f"{where}: field 'name': '{name}' is declared twice")
            aliases = entry.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(alias, str) and alias for alias in aliases):
                raise GraphError(f"{where}: field 'aliases' must be a list of names or glob patterns")
            entries.append(
                ServableEntry(
                    name=name, graph_path=graph_path.resolve(), aliases=tuple(aliases), options=options, places=places
                )
            )
    if not entries:
        raise GraphError(f"{config_path}: no servables declared (model_config_list and mediapipe_config_list empty)")
    return entries
