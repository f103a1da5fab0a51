"""The settings schema: every server and per-model setting, written once.

:class:`ServerSettings` (with ``ovserve.settings.media``'s :class:`MediaSettings`) and :class:`ModelSettings` (with the
engine's :class:`~ovserve.engine.spec.SchedulerSettings`) are the only place a setting's name,
OVMS alias, type, default, bounds and help text are written. Everything else reads them:

* ``ovserve serve``'s flags and their ``OVSERVE_<FLAG>`` environment variables are generated
  from the fields (``ovserve.settings.flags``; see ``ovserve.__main__``),
* a ``graph.pbtxt``'s ``LLMCalculatorOptions`` are read by ``ovserve.settings.graph`` into the same
  :class:`ModelSettings` (:meth:`ModelSettings.from_graph`),
* the engine gets its :class:`~ovserve.engine.spec.EngineSpec` from :meth:`ModelSettings.engine_spec`.

OVMS names its options flat (``--cache_size``, ``--max_image_mb``); the sub-models group them
for the code that uses them, and a flat name given to the parent is moved into its sub-model.
Checks that touch the file system are validators, so they run once, when a model is loaded.
:class:`ModelSettings` is written in ``ovserve.settings.model``, the server's settings here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, field_validator, model_validator

from ovserve.json_types import JsonObject
from ovserve.settings.flags import NOT_A_FLAG, REPEATABLE, SETTINGS_CONFIG, lift_flat, seconds
from ovserve.settings.graph import parse_graph, read_config
from ovserve.settings.media import MediaSettings
from ovserve.settings.model import GRAPH_DEFAULTS, ModelSettings, Task, read_context_length
from ovserve.settings.resources import DEFAULT_CACHE_DIR, parse_memory_size

__all__ = [
    "GRAPH_DEFAULTS",
    "LogLevel",
    "ModelSettings",
    "ServerSettings",
    "Task",
    "models_from_config",
    "read_context_length",
]

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
# --responses_store_max_age: seconds, or a number with a unit (the spelling of Prometheus' retention).
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class ServerSettings(BaseModel):
    """The server: what it serves, where it listens, and its limits."""

    model_config = SETTINGS_CONFIG

    config_path: Path | None = Field(
        default=None, description="OVMS config.json listing graphs (graph.pbtxt) to serve, several models at once"
    )
    models: list[ModelSettings] = Field(min_length=1, json_schema_extra=NOT_A_FLAG)
    port: int = Field(
        default=8000,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("port", "rest_port"),
        description="REST port (OVMS: --rest_port)",
    )
    host: str = Field(default="0.0.0.0", description="address to bind (default: all interfaces)")
    max_request_mb: float = Field(default=16.0, gt=0, description="largest accepted request body (MB); 413 beyond")
    # Audio is refused from its container's declared duration before it is decoded, and decoding
    # stops at this length whatever the header said: it bounds the samples one request holds
    # (16 kHz float32: 3.8 MB a minute) and the engine time it takes.
    max_audio_seconds: float = Field(
        default=600.0, gt=0, description="longest audio a transcription/translation request may carry (s); 400 beyond"
    )
    # Slow-client limits (see ovserve.api.connection). Defaults: nginx's client_header_timeout is
    # 60 s and Node's headersTimeout 60 s, but a request head is a few hundred bytes, so 10 s is
    # generous; the body allows a 16 MB request over a slow (~1 MB/s) link; idle keep-alive as
    # between nginx (75 s) and uvicorn (5 s).
    header_timeout_s: float = seconds(
        10.0,
        "header_timeout",
        "longest time from the first byte of a request to the end of its headers (s); then 408 and close",
    )
    body_timeout_s: float = seconds(
        60.0, "body_timeout", "longest time to receive a request body once its headers arrived (s); then 408 and close"
    )
    keep_alive_timeout_s: float = seconds(
        15.0,
        "keep_alive_timeout",
        "close a connection idle this long between requests (s); responses, streamed or not, are not limited",
    )
    media: MediaSettings = Field(default_factory=MediaSettings)
    log_level: LogLevel = Field(default="INFO", description="log level of the server's messages")
    # -- who may use the server (ovserve.api.auth) ------------------------------------------
    api_key: list[str] = Field(
        default_factory=list,
        json_schema_extra=REPEATABLE,
        description="an API key clients must send (Authorization: Bearer, or Azure's api-key header); "
        "repeat the flag for several; OVSERVE_API_KEY adds one; default: no key (open server)",
    )
    api_key_file: Path | None = Field(
        default=None,
        description="file of API keys, one per line ('#' comments); reread on SIGHUP and when it changes",
    )
    metrics_public: bool = Field(default=False, description="serve /metrics without an API key")
    console: bool = Field(
        default=True,
        description="serve the browser console (docs/console.md) at / to browsers (Accept: text/html) and at "
        "/console/; its data needs the API key; false: / answers Ollama's 'Ollama is running' to everyone and "
        "/console/ is a 404",
    )
    # -- load (ovserve.models.admission) ---------------------------------------------------
    max_queued_requests: int = Field(
        default=64,
        ge=1,
        description="per model: requests admitted but without a first token yet; beyond it a 429 with Retry-After",
    )
    max_prompt_tokens_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="per model: prompt tokens of all admitted, unfinished requests; beyond it a 429 "
        "(default: no limit)",
    )
    request_timeout: float | None = Field(
        default=600.0,
        gt=0,
        description="longest time a generation request may take, from arrival to its last byte (s); then 504 "
        "(unary) or an error event (stream), and its engine work is cancelled",
    )
    # -- the Responses API's conversation store (ovserve.dialects.openai.responses.store) --------------
    responses_store: str = Field(
        default="memory",
        min_length=1,
        description="where /v3/responses keeps stored responses (store: true, previous_response_id): 'memory' "
        "(an in-process SQLite database, lost on restart), a SQLite file path (kept across restarts), a PostgreSQL "
        "URL 'postgresql://user@host:5432/db' (shared by replicas; the password from "
        "--responses_store_password_file, PGPASSWORD or PGPASSFILE rather than the URL; needs ovserve[postgres]), "
        "or 'none' (nothing is stored; previous_response_id is refused)",
    )
    responses_store_max_count: int = Field(
        default=10_000, ge=1, description="most stored responses; the least recently used are evicted beyond it"
    )
    responses_store_max_mb: float = Field(
        default=256.0,
        gt=0,
        description="most MB the stored responses and their conversations may take: for a file store, its disk "
        "footprint (database, WAL and WAL index, within 32 KiB); in memory, their JSON; the least recently used are "
        "evicted beyond it",
    )
    # OpenAI keeps stored responses for 30 days. Seconds, as every duration here, but operators
    # think of this one in days: '30d' and '12h' are taken too.
    responses_store_max_age_s: float | None = Field(
        default=30 * 24 * 3600.0,
        ge=0,
        validation_alias="responses_store_max_age",
        description="how long a stored response is kept after it was written: seconds, or a number with s, m, h or d "
        "('30d', '12h'); an older one is a 404 like an unknown id, and is deleted by the store's next write; 0 or "
        "'none': no age limit (default: 30 days, as OpenAI keeps stored responses)",
    )
    responses_store_password_file: Path | None = Field(
        default=None,
        description="a file holding the password of a PostgreSQL --responses_store (a mounted Kubernetes secret; a "
        "trailing newline is ignored), read again for each new connection, so a rotated secret needs no restart; it "
        "wins over a password in the URL and over PGPASSWORD/PGPASSFILE",
    )
    replica_name: str | None = Field(
        default=None,
        min_length=1,
        description="this replica's name behind a router; with a store of its own (memory or a file), the ids of "
        "the responses it stores carry a hash of it, so another replica answers their GET or previous_response_id "
        "with a 404 that names where they are; it also holds the leases of the batches it runs (replicas sharing "
        "batches need distinct names); default: the host name and the port",
    )
    # -- the Files and Batch APIs (ovserve.dialects.openai.files, ovserve.dialects.openai.batches) ----
    files_dir: Path | None = Field(
        default=None,
        description="where /v1/files keeps uploads and batch results, with their metadata and the batches "
        "(SQLite; with a PostgreSQL --responses_store, the metadata and batches go to that database, shared by "
        "the replicas that share this directory); default: 'ovserve-files' next to a --responses_store file, else "
        "a temporary directory removed at exit (files and batches are then lost on restart)",
    )
    max_file_mb: float = Field(default=200.0, gt=0, description="largest file /v1/files accepts (MB); 413 beyond")
    max_file_lines: int = Field(
        default=50_000, ge=1, description="most lines (a batch's requests) a file /v1/files accepts; 400 beyond"
    )
    batch_concurrency: int = Field(
        default=8,
        ge=1,
        description="per model: batch requests in the engine at once while no interactive request waits or runs",
    )
    batch_concurrency_shared: int = Field(
        default=1,
        ge=0,
        description="per model: batch requests in the engine at once while an interactive request waits or runs "
        "(0: batches pause); batch requests never count against --max_queued_requests",
    )
    batch_share_hold: float = Field(
        default=5.0,
        ge=0,
        description="per model: how long after the last interactive request ended the batches keep to "
        "--batch_concurrency_shared, so sparse interactive traffic (a request every few seconds) does not "
        "meet a full batch share at every arrival (s)",
    )
    # -- engine health and shutdown ---------------------------------------------------------
    engine_stall_timeout: float = Field(
        default=60.0,
        ge=2,  # an engine reports every second: less would take a healthy one for stalled
        description="an engine that neither reports (it does every second between steps) nor uses CPU for this "
        "long is declared stalled (a hung step, a stopped process): its model turns not-ready, its requests get a "
        "503, and the engine process is killed and restarted (s)",
    )
    engine_step_timeout: float = Field(
        default=600.0,
        ge=0,
        description="an engine silent this long is declared stalled even though it uses CPU (a step that spins "
        "forever); a healthy step may take minutes (a long prompt's prefill on a busy CPU). 0: no bound; never "
        "shorter than --engine_stall_timeout (s)",
    )
    drain_timeout: float = Field(
        default=30.0,
        ge=0,
        description="on SIGTERM/SIGINT: readiness 503 and new requests 503 at once; requests in flight may finish "
        "for this long, then streams get an error event; then the server exits 0 (s)",
    )
    # -- models on demand (ovserve.models.residency) ----------------------------------------
    lazy_load: bool = Field(
        default=False,
        description="load each model on its first request instead of at start (requests wait for the load); "
        "a model's 'lazy_load' in config.json overrides it",
    )
    idle_unload_timeout: float | None = Field(
        default=None,
        ge=0,
        validation_alias=AliasChoices("idle_unload_timeout", "idle_unload_timeout_seconds"),
        description="unload a model (its engine process exits) after this many seconds without a request; the "
        "next request loads it again; 0 or absent: never; a model's 'idle_unload_timeout' in config.json "
        "overrides it (s)",
    )
    models_memory_budget: int | None = Field(
        default=None,
        ge=1,
        description="memory the loaded models may take together: bytes (suffixes K, M, G, T: powers of 1024) or a "
        "percentage of the machine's memory ('60%'); before a load that would not fit, idle unpinned models are "
        "unloaded, least recently used first (default: no budget)",
    )
    file_system_poll_wait_seconds: float = Field(
        default=1.0,
        ge=0,
        description="with --config_path: how often config.json and its graphs are checked for changes, which are "
        "applied without a restart (s); 0: never (POST /v1/config/reload still applies them)",
    )
    cache_dir: Path | None = Field(
        default=DEFAULT_CACHE_DIR,
        description="OpenVINO model cache: compiled models are kept here so that a reload skips compiling; 'none' "
        "turns it off; a CACHE_DIR in plugin_config wins ($XDG_CACHE_HOME is ~/.cache unless the environment sets it)",
    )
    # --plugin_config with --config_path: the machine's properties under every graph's own (a
    # config reload applies them again).
    host_plugin_config: JsonObject = Field(default_factory=dict, json_schema_extra=NOT_A_FLAG)

    @model_validator(mode="before")
    @classmethod
    def _media_options_are_flat(cls, data: Any) -> Any:
        return lift_flat(data, "media", MediaSettings)

    @field_validator("models_memory_budget", mode="before")
    @classmethod
    def _memory_size(cls, value: Any) -> Any:
        return parse_memory_size(value) if isinstance(value, str) else value

    @field_validator("responses_store_max_age_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip().lower()
            if text in {"", "none", "off"}:
                return None
            match = _DURATION.fullmatch(text)
            if match is None:
                raise ValueError(f"{value!r} is not a duration: seconds, or a number with s, m, h or d ('30d')")
            value = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        return None if value == 0 else value

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _cache_off(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip().lower() in {"", "none", "off"} else value


def models_from_config(config_path: Path, host_plugin_config: Mapping[str, Any] | None = None) -> list[ModelSettings]:
    """Every servable of an OVMS ``config.json``; raises GraphError naming file, line and field.
    ``host_plugin_config`` (--plugin_config) goes under each graph's own plugin_config, whose keys win."""
    models = [
        ModelSettings.from_graph(entry.name, parse_graph(entry.graph_path), entry) for entry in read_config(config_path)
    ]
    if host_plugin_config:
        models = [
            model.model_copy(update={"plugin_config": {**host_plugin_config, **model.plugin_config}})
            for model in models
        ]
    return models
