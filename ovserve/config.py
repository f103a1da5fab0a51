"""Server settings: one pydantic model per served model, filled from the CLI or from graphs.

A model comes either from ``--model_path``/``--model_name`` (plus scheduler flags) or from an
OVMS ``config.json`` whose entries point at ``graph.pbtxt`` files (see ``ovserve.graph``). Both
end up as the same :class:`ModelSettings`, which decides which pipeline the engine builds.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ovserve.engine.spec import EngineFault, EngineSpec, PipelineKind, SchedulerSettings
from ovserve.graph import GraphError, LLMNodeOptions, parse_graph, read_config
from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS

PipelineType = Literal["AUTO", "LM", "LM_CB", "VLM", "VLM_CB"]


class ModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    path: Path
    source: str = "the command line"  # where the settings came from, for error messages
    device: str = "CPU"
    pipeline_type: PipelineType = "AUTO"
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    plugin_config: dict[str, Any] = Field(default_factory=dict)
    max_tokens_limit: int | None = Field(default=None, ge=1)
    best_of_limit: int = Field(default=20, ge=1)
    draft_path: Path | None = None
    draft_device: str | None = None
    draft_scheduler: dict[str, Any] = Field(default_factory=dict)
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    enable_tool_guided_generation: bool = False
    generation_config_path: Path | None = None

    @model_validator(mode="after")
    def _paths_are_models(self) -> ModelSettings:
        for label, path in (("model", self.path), ("draft model", self.draft_path)):
            if path is None:
                continue
            if not path.is_dir():
                raise ValueError(f"{self.source}: {label} directory {path} does not exist")
            if not any(path.glob("openvino_*model*.xml")):
                raise ValueError(f"{self.source}: {path} holds no OpenVINO IR (openvino_model.xml); export it first")
            if not (path / "openvino_tokenizer.xml").is_file():
                raise ValueError(f"{self.source}: {path} has no openvino_tokenizer.xml; export it with the tokenizer")
        if self.draft_path is not None and self.pipeline_kind is PipelineKind.STATEFUL:
            raise ValueError(
                f"{self.source}: a draft model needs a continuous batching pipeline, not {self.pipeline_type}"
            )
        for option, registry in (("tool_parser", TOOL_PARSERS), ("reasoning_parser", REASONING_PARSERS)):
            chosen = getattr(self, option)
            if chosen is not None and chosen not in registry:
                raise ValueError(f"{self.source}: unknown {option} '{chosen}' (known: {', '.join(sorted(registry))})")
        if self.pipeline_type == "VLM":
            raise ValueError(f"{self.source}: pipeline_type VLM (stateful) is not supported; use VLM_CB or AUTO")
        return self

    @property
    def pipeline_kind(self) -> PipelineKind:
        """OVMS's AUTO: the stateful LLMPipeline on NPU, continuous batching elsewhere."""
        if self.pipeline_type == "LM" or (self.pipeline_type == "AUTO" and self.device.upper().startswith("NPU")):
            return PipelineKind.STATEFUL
        if self.draft_path is not None:
            return PipelineKind.SPECULATIVE
        if self.plugin_config.get("prompt_lookup"):
            return PipelineKind.PROMPT_LOOKUP
        return PipelineKind.CONTINUOUS_BATCHING

    @classmethod
    def from_graph(cls, name: str, options: LLMNodeOptions) -> ModelSettings:
        return cls(
            name=name,
            path=options.models_path,
            source=str(options.graph_path),
            device=options.device,
            pipeline_type=options.pipeline_type,  # type: ignore[arg-type]
            scheduler=SchedulerSettings(
                cache_size=options.cache_size,
                max_num_seqs=options.max_num_seqs,
                max_num_batched_tokens=options.max_num_batched_tokens,
                dynamic_split_fuse=options.dynamic_split_fuse,
                enable_prefix_caching=options.enable_prefix_caching,
            ),
            plugin_config=options.plugin_config,
            max_tokens_limit=options.max_tokens_limit,
            best_of_limit=options.best_of_limit,
            draft_path=options.draft_models_path,
            draft_device=options.draft_device,
            draft_scheduler=options.draft_scheduler,
            tool_parser=options.tool_parser,
            reasoning_parser=options.reasoning_parser,
            enable_tool_guided_generation=options.enable_tool_guided_generation,
            generation_config_path=options.generation_config_path,
        )

    def engine_spec(self) -> EngineSpec:
        # Draft scheduler: OVMS inherits the main model's values unless draft_* overrides them.
        draft_scheduler = None
        if self.draft_path is not None:
            draft_scheduler = self.scheduler.model_copy(update=self.draft_scheduler)
        plugin_config = {key: value for key, value in self.plugin_config.items() if key != "prompt_lookup"}
        return EngineSpec(
            name=self.name,
            model_path=self.path.resolve(),
            device=self.device,
            kind=self.pipeline_kind,
            scheduler=self.scheduler,
            plugin_config=plugin_config,
            draft_models_path=self.draft_path.resolve() if self.draft_path else None,
            draft_device=self.draft_device,
            draft_scheduler=draft_scheduler,
            fault=EngineFault.from_environment(),  # the one place the test hook's variable is read
        )


ALL_MEDIA_DOMAINS = "all"
_HOSTNAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")


class MediaSettings(BaseModel):
    """Where images in ``image_url`` parts may come from (deny by default, like OVMS)."""

    model_config = ConfigDict(extra="forbid")

    # Exact host names or IP literals (ports are not part of the match); ["all"] allows any host.
    allowed_media_domains: list[str] = Field(default_factory=list)
    # Local files are read only from inside this directory (after resolving '..' and symlinks).
    allowed_local_media_path: Path | None = None
    max_image_mb: float = Field(default=20.0, gt=0)
    max_images_per_request: int = Field(default=16, ge=1)
    # Pixels of all of a request's images together, from their headers, before any is decoded.
    # Memory is bounded separately (one full-size decode at a time, shrunk at once); this bounds
    # the decode work one request may ask for: a 34 MP PNG takes ~0.4 s of a core to decompress,
    # so 256 MP is a few seconds per request on an edge machine (7 images at the per-image cap,
    # 30 at 8 MP, 123 at 1080p).
    max_image_pixels_per_request: int = Field(default=256_000_000, ge=1)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=10.0, gt=0)
    total_timeout_s: float = Field(default=30.0, gt=0)

    @field_validator("allowed_media_domains", mode="before")
    @classmethod
    def _split_domains(cls, value: object) -> object:
        if isinstance(value, str):  # the CLI's comma-separated form
            return [item for item in (part.strip() for part in value.split(",")) if item]
        return value

    @field_validator("allowed_media_domains")
    @classmethod
    def _valid_domains(cls, value: list[str]) -> list[str]:
        domains = []
        for entry in value:
            host = entry.strip().lower()
            if host == ALL_MEDIA_DOMAINS:
                return [ALL_MEDIA_DOMAINS]
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
            try:
                ipaddress.ip_address(host)
            except ValueError:
                # Host names only: a scheme, port, path or wildcard here would never match.
                if not _HOSTNAME.fullmatch(host):
                    raise ValueError(f"{entry!r} is not a host name or IP address") from None
            domains.append(host)
        return domains

    @field_validator("allowed_local_media_path")
    @classmethod
    def _existing_directory(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"{value} is not a directory")
        return value

    @property
    def max_image_bytes(self) -> int:
        return int(self.max_image_mb * 1024 * 1024)


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "0.0.0.0"
    port: int = Field(default=8000, ge=0, le=65535)
    models: list[ModelSettings] = Field(min_length=1)
    max_request_mb: float = Field(default=16.0, gt=0)
    media: MediaSettings = Field(default_factory=MediaSettings)
    log_level: str = "INFO"
    # Slow-client limits (see ovserve.connection). Defaults: nginx's client_header_timeout is
    # 60 s and Node's headersTimeout 60 s, but a request head is a few hundred bytes, so 10 s is
    # generous; the body allows a 16 MB request over a slow (~1 MB/s) link; idle keep-alive as
    # between nginx (75 s) and uvicorn (5 s).
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=60.0, gt=0)
    keep_alive_timeout_s: float = Field(default=15.0, gt=0)


def models_from_config(config_path: Path) -> list[ModelSettings]:
    """Every servable of an OVMS ``config.json``; raises GraphError/ValueError naming file and field."""
    models = []
    for entry in read_config(config_path):
        options = parse_graph(entry.graph_path)
        try:
            models.append(ModelSettings.from_graph(entry.name, options))
        except ValidationError as exc:
            # Name the graph even for checks that live in the settings models.
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in error["loc"]) or "options"
            message = error["msg"].removeprefix("Value error, ").removeprefix(f"{entry.graph_path}: ")
            raise GraphError(f"{entry.graph_path}: field '{field}': {message}") from None
    return models
