"""Server settings: one pydantic model, filled from the command line."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ovserve.engine.spec import EngineSpec, SchedulerSettings


class ModelSettings(BaseModel):
    """One served model (``--model_path``/``--model_name`` today; a graph file later)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    path: Path
    device: str = "CPU"
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    max_tokens_limit: int | None = Field(default=None, ge=1)
    # OVMS's graph option: the largest best_of (beam width, or n sampled sequences) a request may ask.
    best_of_limit: int = Field(default=20, ge=1)

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


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "0.0.0.0"
    port: int = Field(default=8000, ge=0, le=65535)
    models: list[ModelSettings] = Field(min_length=1)
    max_request_mb: float = Field(default=64.0, gt=0)
    log_level: str = "INFO"
