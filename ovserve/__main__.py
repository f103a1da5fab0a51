"""Command line: ``ovserve serve ...``, ``ovserve export text_generation ...``, ``ovserve parse ...`` and
``ovserve batch ...``."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ovserve import batch_cli, export, parse_cli
from ovserve.engine.memory import pin_malloc_thresholds
from ovserve.errors import ServiceUnavailableError, complaints
from ovserve.settings.flags import ENV_PREFIX, flags
from ovserve.settings.graph import GraphError
from ovserve.settings.schema import ModelSettings, ServerSettings, models_from_config

# The server itself (the app, its routes and dialects, aiohttp) is imported where it is served:
# `ovserve parse`, `ovserve export` and a settings mistake start without it (~1 s of CPU less).
if TYPE_CHECKING:
    from aiohttp import web

    from ovserve.api.auth import ApiKeys

log = logging.getLogger("ovserve")


class UsageError(Exception):
    """A command-line mistake: reported in one line, exit status 2."""


# The serve flags, generated from the settings schema (ovserve.settings.schema). argparse, not
# pydantic-settings' CLI: that names a sub-model's settings "--scheduler.cache_size" where OVMS
# (and so ovserve) says "--cache_size", cannot build the list of served models from one set of
# flags, and prints its own help format (types as metavars, defaults appended).
MODEL_FLAGS = flags(ModelSettings)
SERVER_FLAGS = flags(ServerSettings)
SOURCE_FLAGS = ("model_path", "model_name", "config_path")


def _add_flags(serve: argparse.ArgumentParser) -> None:
    """One option per schema flag; values stay text for the schema to validate and convert."""
    source = serve.add_argument_group("what to serve (one model from flags, or an OVMS config.json)")
    # The source flags first, as their group is listed first in the usage line.
    first = {name: position for position, name in enumerate(SOURCE_FLAGS)}
    for flag in sorted([*MODEL_FLAGS, *SERVER_FLAGS], key=lambda flag: first.get(flag.name, len(first))):
        group = source if flag.name in SOURCE_FLAGS else serve
        options = [f"--{name}" for name in flag.names]
        help_text = (flag.field.description or "").replace("%", "%%")  # argparse formats help with %
        # SUPPRESS: a flag not given is absent, so the schema's default (or the environment) applies.
        extra: dict[str, Any] = {}
        if flag.repeatable:
            extra["action"] = "append"
        elif flag.switch:
            extra.update(nargs="?", const="true", metavar="{true,false}")
        group.add_argument(
            *options, dest=flag.name, choices=flag.choices, help=help_text, default=argparse.SUPPRESS, **extra
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ovserve", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve a model over the OpenAI-compatible REST API",
        epilog=f"Each flag can also be set by the environment variable {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PORT); "
        "the command line wins.",
    )
    _add_flags(serve)
    exporter = commands.add_parser(
        "export",
        help="export a Hugging Face model into an OVMS model repository (as OVMS's export_model.py)",
        description="Export a Hugging Face model into an OVMS model repository that 'ovserve serve --config_path' "
        "serves. Needs the export extras: pip install 'ovserve[export]'.",
    )
    export.add_export_arguments(exporter)
    parse = commands.add_parser(
        "parse",
        help="parse a model's raw output (stdin) into content, reasoning and tool calls, as the server does",
        description="Parse a model's raw output text, read from stdin, as the server would: prints the assistant "
        'message as JSON ({"content", "reasoning_content", "tool_calls"}). For a tool call that came back as '
        "content: see what each parser makes of the text.",
    )
    parse_cli.add_parse_arguments(parse)
    batch = commands.add_parser(
        "batch",
        help="run a JSONL file of requests as a batch on a running server, with a progress bar",
        description="Upload a JSONL file of requests (OpenAI's batch input format) to a running ovserve, run it "
        "as a batch, show its progress, and download its output and error files.",
    )
    batch_cli.add_batch_arguments(batch)
    return parser


def flag_values(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    """The flags given, by flag name: the command line over ``OVSERVE_<FLAG>`` variables."""
    values: dict[str, Any] = {}
    for flag in [*MODEL_FLAGS, *SERVER_FLAGS]:
        if flag.env in environ:
            values[flag.name] = [environ[flag.env]] if flag.repeatable else environ[flag.env]
    for name, value in vars(args).items():
        if name == "command":
            continue
        repeatable = next(flag.repeatable for flag in SERVER_FLAGS + MODEL_FLAGS if flag.name == name)
        # A repeatable flag adds to its environment variable's value; any other flag replaces it.
        values[name] = [*values.get(name, []), *value] if repeatable else value
    return values


def settings_from_flags(values: Mapping[str, Any]) -> ServerSettings:
    """The server's settings from flag values: one model from the model flags, or --config_path's graphs."""
    model_names = {flag.name for flag in MODEL_FLAGS}
    model = {name: value for name, value in values.items() if name in model_names}
    server = {name: value for name, value in values.items() if name not in model_names}
    if server.get("config_path") is not None:
        if "model_path" in model or "model_name" in model:
            raise UsageError("--config_path and --model_path/--model_name exclude each other")
        host_properties = model.pop("plugin_config", None)
        for name in model:
            log.warning("--%s is ignored with --config_path: each graph sets its model's options", name)
        host = _host_properties(host_properties) if host_properties is not None else {}
        models = models_from_config(Path(server["config_path"]), host)
        return ServerSettings.model_validate({**server, "models": models, "host_plugin_config": host})
    if "model_path" not in model or "model_name" not in model:
        raise UsageError("give --model_path and --model_name, or --config_path")
    return ServerSettings.model_validate({**server, "models": [model]})


def _host_properties(text: str) -> dict[str, Any]:
    """--plugin_config with --config_path: the machine's OpenVINO properties (threads from a CPU
    limit, a cache directory), put under every graph's own plugin_config (whose keys win), at start
    and at every config reload."""
    try:
        defaults: dict[str, Any] = ModelSettings._json_object(text)
    except ValueError as exc:
        raise UsageError(f"--plugin_config: {exc}") from None
    choosing_pipeline = sorted({"prompt_lookup", "draft_model"} & defaults.keys())
    if choosing_pipeline:
        raise UsageError(
            f"--plugin_config with --config_path sets machine properties; {choosing_pipeline} belong in a graph"
        )
    return defaults


def _flag_of(location: tuple[int | str, ...]) -> str:
    """``--cache_size`` for ('models', 0, 'scheduler', 'cache_size'); the path when it is no flag."""
    names = {name for flag in [*MODEL_FLAGS, *SERVER_FLAGS] for name in flag.names}
    named = [str(part) for part in location if isinstance(part, str) and part != "models"]
    return f"--{named[-1]}" if named and named[-1] in names else ".".join(named)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def serve(settings: ServerSettings, api_keys: ApiKeys) -> int:
    from aiohttp import web

    from ovserve.api.connection import TimedServer
    from ovserve.app import create_app, load_models

    loop = asyncio.get_running_loop()
    if api_keys.enabled:
        source = f" (and {settings.api_key_file})" if settings.api_key_file else ""
        log.info("API keys required: %d configured%s", len(api_keys), source)
    elif not _is_loopback(settings.host):
        log.warning(
            "no API key is configured and the server listens on %s: anyone who can reach the port can use it "
            "(--api_key, --api_key_file or OVSERVE_API_KEY)",
            settings.host,
        )
    # Signals are ours from the start: a SIGTERM while the models load is a clean stop, not a kill.
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, api_keys.reload)
    log.info("loading %d model(s)", len(settings.models))
    models = await loop.run_in_executor(None, load_models, settings)
    if stop.is_set():
        log.info("stopped while loading")
        return 0
    app = create_app(settings, models, api_keys)
    # Two runners: app_runner owns the application's startup and cleanup; runner serves its
    # handler over connections that drop slow clients (ovserve.api.connection).
    # handler_cancellation: a client that disconnects cancels its handler, which cancels
    # the engine request (OVMS stops the generation handle the same way).
    app_runner = web.AppRunner(app, handler_cancellation=True)
    await app_runner.setup()
    assert app_runner.server is not None  # set by setup()
    timed_server = TimedServer(
        app_runner.server,
        header_timeout=settings.header_timeout_s,
        keepalive_timeout=settings.keep_alive_timeout_s,
        access_log=None,
    )
    runner = web.ServerRunner(timed_server)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    for model in models:
        log.info(
            "serving %r from %s on %s (%s pipeline, from %s)",
            model.name, model.spec.model_path, model.spec.device, model.kind.value, model.settings.source,
        )  # fmt: skip
    endpoints = "POST /v3/chat/completions, POST /v3/responses, POST /v1/messages, GET /v3/models, Ollama's /api/chat"
    log.info("listening on http://%s:%d (%s)", settings.host, settings.port, endpoints)

    # A model that cannot load does not stop the server: its engine client retries it (503 meanwhile).
    await stop.wait()
    await _drain(app, settings.drain_timeout)
    log.info("shutting down")
    await runner.cleanup()  # stop listening, close idle connections
    await app_runner.cleanup()  # then stop the engines
    return 0


async def _drain(app: web.Application, timeout: float) -> None:
    """Readiness and new requests 503 at once; requests in flight get ``timeout`` seconds, then
    what is left is ended (streams: an error event and [DONE]). A second signal ends the wait."""
    from ovserve.api import keys

    drain = app[keys.DRAIN]
    drain.begin()
    log.info("draining: %d request(s) in flight, up to %g s (--drain_timeout)", drain.inflight, timeout)
    loop = asyncio.get_running_loop()
    again = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, again.set)
    idle = asyncio.create_task(drain.wait_idle(timeout))
    hurry = asyncio.create_task(again.wait())
    await asyncio.wait({idle, hurry}, return_when=asyncio.FIRST_COMPLETED)
    idle.cancel()
    hurry.cancel()
    if drain.inflight:
        log.warning("drain: ending %d request(s) still in flight", drain.inflight)
        for model in app[keys.MODELS]:
            model.engine.abort_all(
                ServiceUnavailableError("the server is shutting down; retry the request", code="shutting_down")
            )
        # Their handlers now write the error event and finish; give them a moment to.
        await drain.wait_idle(5.0)
    else:
        log.info("drain: every request finished")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "export":
        return export.run(args)
    if args.command == "parse":
        return parse_cli.run(args)
    if args.command == "batch":
        return batch_cli.run(args)
    values = flag_values(args, os.environ)
    log_level = values.get("log_level", ServerSettings.model_fields["log_level"].default)
    try:
        logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    except ValueError:
        print(f"ovserve: --log_level: unknown level {log_level!r}", file=sys.stderr)
        return 2
    # Before any image is decoded: freed image buffers must go back to the OS (ovserve.engine.memory).
    pin_malloc_thresholds()
    try:
        settings = settings_from_flags(values)
    except (UsageError, GraphError) as exc:
        print(f"ovserve: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        for complaint in complaints(exc):
            where, message = _flag_of(complaint.path), complaint.message
            print(f"ovserve: {where}: {message}" if where else f"ovserve: {message}", file=sys.stderr)
        return 2
    if vars(args).get("api_key"):
        log.warning(
            "--api_key on the command line is readable by every local user (ps, /proc/<pid>/cmdline); "
            "prefer --api_key_file or the OVSERVE_API_KEY environment variable"
        )
    from ovserve.api.auth import ApiKeys
    from ovserve.dialects.openai.responses.backends import StoreSettingError, check_store

    try:  # before any model loads: a store that cannot work stops the server now, and says why
        check_store(settings.responses_store, settings.responses_store_password_file)
    except StoreSettingError as exc:
        print(f"ovserve: {exc}", file=sys.stderr)
        return 2
    try:
        api_keys = ApiKeys(settings.api_key, settings.api_key_file)
    except (OSError, UnicodeError) as exc:
        print(f"ovserve: --api_key_file: cannot read {settings.api_key_file}: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(settings, api_keys))


if __name__ == "__main__":
    sys.exit(main())
