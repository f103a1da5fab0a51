"""Server settings: one pydantic model, filled from the command line."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ovserve.engine.spec import EngineSpec, SchedulerSettings


class ModelSettings(BaseModel):
    """One served model (``--model_path``/``--model_name`` today; a graph file later)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    path: Path
    device: str = "CPU"
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    max_tokens_limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _path_is_a_model(self) -> ModelSettings:
        if not self.path.is_dir():
            raise ValueError(f"model directory {self.path} does not exist")
        if not (self.path / "openvino_model.xml").is_file() and not any(self.path.glob("openvino_*model*.xml")):
            raise ValueError(f"{self.path} holds no OpenVINO IR (openvino_model.xml); export the model first")
        if not (self.path / "openvino_tokenizer.xml").is_file():
            raise ValueError(f"{self.path} has no openvino_tokenizer.xml; export it with --convert-tokenizer")
        return self

    def engine_spec(self) -> EngineSpec:
        return EngineSpec(name=self.name, model_path=self.path.resolve(), device=self.device, scheduler=self.scheduler)


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
    # Each decoded image may take ~100 MB on its way to the engine; this bounds one request.
    max_images_per_request: int = Field(default=16, ge=1)
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
    max_request_mb: float = Field(default=64.0, gt=0)
    media: MediaSettings = Field(default_factory=MediaSettings)
    log_level: str = "INFO"
