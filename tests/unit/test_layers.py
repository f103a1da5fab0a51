"""The layering contract (pyproject's [tool.importlinter]) holds, and fails on an upward import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _lint_imports(checkout: Path) -> subprocess.CompletedProcess[str]:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_package_keeps_its_layers() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "ovserve", checkout / "ovserve", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    worker = checkout / "ovserve" / "engine" / "worker.py"
    worker.write_text(worker.read_text() + "\nfrom ovserve.api import routes  # noqa: E402,F401\n")
    result = _lint_imports(checkout)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert "ovserve.engine.worker -> ovserve.api.routes" in result.stdout
