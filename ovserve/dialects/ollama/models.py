"""The served models as Ollama lists and describes them: ``/api/tags``, ``/api/ps``, ``/api/show``.

An OpenVINO model directory is not an Ollama blob: ``digest`` is a stable hash of where the model
is and when its IR was written, ``size`` the bytes of its directory, ``format`` ``"openvino"``,
``family`` the HF ``model_type`` of its config.json. ``capabilities`` say what the model's files
support here: ``completion`` (it generates text), ``tools`` (a tool-call format was chosen),
``thinking`` (a reasoning format was chosen), ``vision`` (a VLM), ``embedding``.
``/api/ps`` lists the models whose engine is loaded: ``size`` its engine process's resident memory,
``size_vram`` its files' bytes on a GPU or NPU (0 on the CPU), ``expires_at`` when it unloads if no
request comes (``Residency.expires_at``: its idle timeout or a client's ``keep_alive``; far in the
future when it never does, as Ollama shows ``keep_alive: -1``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from ovserve.dialects.ollama.response import (
    ListedModel,
    ModelDetails,
    RunningModel,
    ShowResponse,
    timestamp,
)
from ovserve.models.served import ModelRegistry, ServedModel

# A model that never unloads: as far ahead as Ollama's own "keep_alive: -1" shows.
NEVER = "2318-01-01T00:00:00Z"
# generation_config.json keys, by the name Ollama's parameters use.
_PARAMETER_NAMES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "max_new_tokens": "num_predict",
}


# Ollama names a model "name:tag" and reads "name" as "name:latest"; clients send either.
LATEST = ":latest"


def served_name(models: ModelRegistry, name: str) -> str:
    """``name`` as served here: ``x:latest`` is ``x`` when only ``x`` is served (unknown names stay
    as sent, for the registry's 404)."""
    names = {model.name for model in models}
    if name not in names and name.endswith(LATEST) and name.removesuffix(LATEST) in names:
        return name.removesuffix(LATEST)
    return name


def _files(model: ServedModel) -> list[Path]:
    path = model.spec.model_path
    return [entry for entry in path.iterdir() if entry.is_file()] if path.is_dir() else []


def _size(model: ServedModel) -> int:
    return sum(entry.stat().st_size for entry in _files(model))


def _modified(model: ServedModel) -> str:
    stamps = [entry.stat().st_mtime for entry in _files(model)]
    return timestamp(datetime.fromtimestamp(max(stamps) if stamps else model.created, UTC))


def _digest(model: ServedModel) -> str:
    return hashlib.sha256(f"{model.name}\0{model.spec.model_path}\0{_modified(model)}".encode()).hexdigest()


def family(model: ServedModel) -> str:
    try:
        config = json.loads((model.spec.model_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    kind = config.get("model_type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else ""


def capabilities(model: ServedModel) -> list[str]:
    found = []
    if model.task == "text_generation":
        found.append("completion")
        if model.tool_format is not None:
            found.append("tools")
        if model.reasoning_format is not None:
            found.append("thinking")
        if model.vision is not None:
            found.append("vision")
    elif model.task == "embeddings":
        found.append("embedding")
    return found


def details(model: ServedModel) -> ModelDetails:
    kind = family(model)
    return ModelDetails(
        parent_model="",
        format="openvino",
        family=kind,
        families=[kind] if kind else None,
        parameter_size="",
        quantization_level="",
    )


def listed(model: ServedModel) -> ListedModel:
    return ListedModel(
        name=model.name,
        model=model.name,
        modified_at=_modified(model),
        size=_size(model),
        digest=_digest(model),
        details=details(model),
    )


def running(model: ServedModel, expires_at: float | None, memory: int | None) -> RunningModel:
    """A loaded model: ``expires_at`` the Unix time it unloads if idle (None: never), ``memory``
    its engine's resident bytes (None: unknown, the directory's bytes stand in)."""
    files = _size(model)
    on_gpu = any(device in model.spec.device for device in ("GPU", "NPU"))
    return RunningModel(
        name=model.name,
        model=model.name,
        size=memory if memory is not None else files,
        digest=_digest(model),
        details=details(model),
        expires_at=NEVER if expires_at is None else timestamp(datetime.fromtimestamp(expires_at, UTC)),
        size_vram=files if on_gpu else 0,
        context_length=model.context_length,
    )


def parameters(model: ServedModel) -> str:
    """The model's sampling defaults as Ollama's Modelfile parameter lines."""
    lines = []
    for key, value in model.defaults.values.items():
        name = _PARAMETER_NAMES.get(key)
        if name is not None:
            lines.append(f"{name:<30} {json.dumps(value)}")
    return "\n".join(lines)


def show(model: ServedModel) -> ShowResponse:
    template = model.template.source if model.template is not None else ""
    kind = family(model) or "unknown"
    info: dict[str, object] = {"general.architecture": kind, f"{kind}.context_length": model.context_length}
    modelfile = f"# Served by ovserve from an OpenVINO model directory; there is no Modelfile.\nFROM {model.name}\n"
    return ShowResponse(
        modelfile=modelfile,
        parameters=parameters(model),
        template=template,
        details=details(model),
        model_info=info,  # type: ignore[arg-type]
        capabilities=capabilities(model),
        modified_at=_modified(model),
    )
