"""Command line: ``ovserve serve ...`` and ``ovserve export text_generation ...``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from aiohttp import web
from pydantic import ValidationError

from ovserve import export, keys
from ovserve.app import create_app, load_models
from ovserve.config import MediaSettings, ModelSettings, ServerSettings, models_from_config
from ovserve.connection import TimedServer
from ovserve.engine.spec import SchedulerSettings
from ovserve.graph import GraphError
from ovserve.memory import pin_malloc_thresholds

log = logging.getLogger("ovserve")


class UsageError(Exception):
    """A command-line mistake: reported in one line, exit status 2."""


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ovserve", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model over the OpenAI-compatible REST API")
    source = serve.add_argument_group("what to serve (one model from flags, or an OVMS config.json)")
    source.add_argument("--model_path", type=Path, help="directory of an OpenVINO IR model")
    source.add_argument("--model_name", help="the name clients send as 'model'")
    source.add_argument(
        "--config_path",
        type=Path,
        help="OVMS config.json listing graphs (graph.pbtxt) to serve, several models at once",
    )
    serve.add_argument(
        "--pipeline_type", default="AUTO", choices=["AUTO", "LM", "LM_CB", "VLM_CB"],
        help="AUTO: stateful LM on NPU, continuous batching elsewhere",
    )  # fmt: skip
    serve.add_argument("--draft_models_path", type=Path, help="draft model directory: serve with speculative decoding")
    serve.add_argument("--draft_device", help="device of the draft model (default: --device)")
    serve.add_argument(
        "--plugin_config", default="{}", help="JSON object passed to the pipeline, e.g. '{\"prompt_lookup\": true}'"
    )
    serve.add_argument(
        "--port", "--rest_port", dest="port", type=int, default=8000, help="REST port (OVMS: --rest_port)"
    )
    serve.add_argument("--host", default="0.0.0.0", help="address to bind (default: all interfaces)")
    serve.add_argument("--device", default="CPU", help="OpenVINO device: CPU, GPU, NPU, ... (passed through)")
    defaults = SchedulerSettings()
    serve.add_argument("--cache_size", type=int, default=defaults.cache_size, help="KV cache in GB; 0 grows on demand")
    serve.add_argument("--max_num_seqs", type=int, default=defaults.max_num_seqs)
    serve.add_argument("--max_num_batched_tokens", type=int, default=defaults.max_num_batched_tokens)
    serve.add_argument("--dynamic_split_fuse", type=_bool, default=defaults.dynamic_split_fuse)
    serve.add_argument("--enable_prefix_caching", type=_bool, default=defaults.enable_prefix_caching)
    serve.add_argument("--max_tokens_limit", type=int, default=None, help="upper bound (and default) for max_tokens")
    serve.add_argument(
        "--best_of_limit", type=int, default=20, help="largest best_of / n a request may ask (OVMS default 20)"
    )
    serve.add_argument(
        "--max_request_mb", type=float, default=16.0, help="largest accepted request body (MB); 413 beyond"
    )
    server = ServerSettings.model_fields
    serve.add_argument(
        "--header_timeout",
        type=float,
        default=server["header_timeout_s"].default,
        help="longest time from the first byte of a request to the end of its headers (s); then 408 and close",
    )
    serve.add_argument(
        "--body_timeout",
        type=float,
        default=server["body_timeout_s"].default,
        help="longest time to receive a request body once its headers arrived (s); then 408 and close",
    )
    serve.add_argument(
        "--keep_alive_timeout",
        type=float,
        default=server["keep_alive_timeout_s"].default,
        help="close a connection idle this long between requests (s); responses, streamed or not, are not limited",
    )
    media = MediaSettings()
    serve.add_argument(
        "--allowed_media_domains",
        default="",
        help="comma-separated hosts image URLs may be fetched from (exact match; 'all' = any; default: none)",
    )
    serve.add_argument(
        "--allowed_local_media_path",
        type=Path,
        default=None,
        help="directory local image paths and file:// URLs may be read from (default: local files disabled)",
    )
    serve.add_argument("--max_image_mb", type=float, default=media.max_image_mb, help="largest image (MB)")
    serve.add_argument("--max_images_per_request", type=int, default=media.max_images_per_request)
    serve.add_argument(
        "--max_image_pixels_per_request",
        type=int,
        default=media.max_image_pixels_per_request,
        help="decoded pixels all images of one request may have together, checked from their headers",
    )
    serve.add_argument(
        "--media_connect_timeout", type=float, default=media.connect_timeout_s, help="image URL connect timeout (s)"
    )
    serve.add_argument(
        "--media_read_timeout",
        type=float,
        default=media.read_timeout_s,
        help="longest wait for the next bytes of an image download (s)",
    )
    serve.add_argument(
        "--media_timeout",
        type=float,
        default=media.total_timeout_s,
        help="longest time to fetch one image, redirects included (s)",
    )
    serve.add_argument("--log_level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    exporter = commands.add_parser(
        "export",
        help="export a Hugging Face model into an OVMS model repository (as OVMS's export_model.py)",
        description="Export a Hugging Face model into an OVMS model repository that 'ovserve serve --config_path' "
        "serves. Needs the export extras: pip install 'ovserve[export]'.",
    )
    export.add_export_arguments(exporter)
    return parser


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    common = {
        "host": args.host,
        "port": args.port,
        "max_request_mb": args.max_request_mb,
        "header_timeout_s": args.header_timeout,
        "body_timeout_s": args.body_timeout,
        "keep_alive_timeout_s": args.keep_alive_timeout,
        "log_level": args.log_level,
        "media": MediaSettings(
            allowed_media_domains=args.allowed_media_domains,
            allowed_local_media_path=args.allowed_local_media_path,
            max_image_mb=args.max_image_mb,
            max_images_per_request=args.max_images_per_request,
            max_image_pixels_per_request=args.max_image_pixels_per_request,
            connect_timeout_s=args.media_connect_timeout,
            read_timeout_s=args.media_read_timeout,
            total_timeout_s=args.media_timeout,
        ),
    }
    if args.config_path is not None:
        if args.model_path is not None or args.model_name is not None:
            raise UsageError("--config_path and --model_path/--model_name exclude each other")
        return ServerSettings(models=models_from_config(args.config_path), **common)
    if args.model_path is None or args.model_name is None:
        raise UsageError("give --model_path and --model_name, or --config_path")
    try:
        plugin_config = json.loads(args.plugin_config)
    except ValueError as exc:
        raise UsageError(f"--plugin_config is not valid JSON: {exc}") from exc
    if not isinstance(plugin_config, dict):
        raise UsageError("--plugin_config must be a JSON object")
    scheduler = SchedulerSettings(
        cache_size=args.cache_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        dynamic_split_fuse=args.dynamic_split_fuse,
        enable_prefix_caching=args.enable_prefix_caching,
    )
    model = ModelSettings(
        name=args.model_name,
        path=args.model_path,
        device=args.device,
        scheduler=scheduler,
        max_tokens_limit=args.max_tokens_limit,
        pipeline_type=args.pipeline_type,
        draft_path=args.draft_models_path,
        draft_device=args.draft_device,
        plugin_config=plugin_config,
        best_of_limit=args.best_of_limit,
    )
    return ServerSettings(models=[model], **common)


async def serve(settings: ServerSettings) -> int:
    loop = asyncio.get_running_loop()
    models = await loop.run_in_executor(None, load_models, settings)
    app = create_app(settings, models)
    # Two runners: app_runner owns the application's startup and cleanup; runner serves its
    # handler over connections that drop slow clients (ovserve.connection).
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
    log.info("listening on http://%s:%d (POST /v3/chat/completions, GET /v3/models)", settings.host, settings.port)

    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    stopping = asyncio.create_task(stop.wait())
    pending: set[asyncio.Task] = {stopping, *app[keys.ENGINE_LOADS]}
    exit_code = 0
    while stopping in pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        failed = [task for task in done if task is not stopping and task.exception() is not None]
        if failed:
            for task in failed:
                log.critical("%s", task.exception())
            exit_code = 1
            break
    log.info("shutting down")
    stopping.cancel()
    await runner.cleanup()  # stop listening, let running requests finish
    await app_runner.cleanup()  # then stop the engines
    return exit_code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "export":
        return export.run(args)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Before any image is decoded: freed image buffers must go back to the OS (ovserve.memory).
    pin_malloc_thresholds()
    try:
        settings = settings_from_args(args)
    except (UsageError, GraphError) as exc:
        print(f"ovserve: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            location = ".".join(str(part) for part in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            print(f"ovserve: {message}" if not location else f"ovserve: {location}: {message}", file=sys.stderr)
        return 2
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
