"""What the deployment files tell the container to run is what `ovserve` accepts.

The chart passes the operations flags (--api_key_file, --drain_timeout, --max_queued_requests,
--request_timeout, --metrics_public); until the server has them these tests fail, naming them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

import ovserve.__main__ as cli
from ovserve.__main__ import build_parser
from scripts.render_manifests import ROOT
from tests.deploy.chart import arg_value, only, read_yaml, render_objects, server_container
from tests.deploy.test_chart import VARIANTS


def parse(command: str, args: list[str]) -> argparse.Namespace:
    """argparse's verdict on `ovserve <command> <args>`, its error message kept for the assertion."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            return build_parser().parse_args([command, *args])
        except SystemExit:
            pass
    pytest.fail(f"`ovserve {command}` refuses the rendered args {args}:\n{stderr.getvalue()}")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_rendered_server_args_parse_as_ovserve_serve(variant: str) -> None:
    container = server_container(render_objects(VARIANTS[variant]))
    assert "command" not in container  # the image's ENTRYPOINT is `ovserve serve`
    parsed = parse("serve", container["args"])
    assert str(parsed.port) == "8000" and parsed.host == "0.0.0.0"


def test_rendered_drain_timeout_is_what_the_grace_period_was_sized_for() -> None:
    objects = render_objects()
    parsed = parse("serve", server_container(objects)["args"])
    grace = only(objects, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(parsed.drain_timeout) < grace


def test_export_init_container_args_parse_as_ovserve_export() -> None:
    pod = only(render_objects(VARIANTS["model-exported-by-init-container"]), "Deployment")["spec"]["template"]["spec"]
    init = only([{"kind": container["name"], **container} for container in pod["initContainers"]], "export")
    assert init["command"] == ["ovserve"]
    parsed = parse(init["args"][0], init["args"][1:])
    assert str(parsed.model_repository_path) == "/models"


def test_kserve_runtime_args_parse_as_ovserve_serve() -> None:
    runtime = only(read_yaml(ROOT / "deploy" / "kserve" / "servingruntime.yaml"), "ServingRuntime")
    container = runtime["spec"]["containers"][0]
    # KServe substitutes {{.Name}} with the InferenceService's name.
    args = [arg.replace("{{.Name}}", "qwen") for arg in container["args"]]
    parsed = parse("serve", args)
    assert parsed.model_name == "qwen" and str(parsed.model_path) == "/mnt/models"
    assert str(parsed.port) == str(container["ports"][0]["containerPort"])
    threads = json.loads(arg_value(args, "--plugin_config"))["INFERENCE_NUM_THREADS"]
    assert threads == int(container["resources"]["limits"]["cpu"])


def test_dockerfile_default_command_parses() -> None:
    text = (ROOT / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    assert entrypoint == ["ovserve", "serve"]
    assert str(parse("serve", cmd).config_path) == "/models/config.json"


def test_chart_thread_count_reaches_models_served_from_config_json(tiny_llm: Path, tmp_path: Path) -> None:
    graph = (ROOT / "graphs" / "tiny-llm" / "graph.pbtxt").read_text()
    (tmp_path / "tiny-llm").mkdir()
    graph = re.sub(r'models_path: "[^"]*"', f'models_path: "{tiny_llm}"', graph)
    (tmp_path / "tiny-llm" / "graph.pbtxt").write_text(graph)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_config_list": [{"config": {"name": "tiny-llm", "base_path": "tiny-llm"}}]})
    )
    args = server_container(render_objects())["args"]
    args[args.index("--config_path") + 1] = str(tmp_path / "config.json")
    known = build_parser().parse_known_args(["serve", *args])[0]  # only what the server has today
    if hasattr(cli, "settings_from_args"):
        settings = cli.settings_from_args(known)
    else:  # the settings-schema CLI: flags stay text until the schema converts them
        settings = cli.settings_from_flags(cli.flag_values(known, {}))
    assert settings.models[0].plugin_config.get("INFERENCE_NUM_THREADS") == 2
