"""Build a list of demo models into OUT_DIR: reuse the complete ones, build the others atomically.

Contract with a model kind (``DemoModel``, met by the specs of llm.py, vlm.py, retrieval.py, speech.py
and image.py):
``tokenizer`` picks its tokenizer from the build's ``Tokenizers``; ``checkpoint`` saves a seeded
random Hugging Face checkpoint (what a user downloads from the Hub) into ``hf_dir``; ``task`` and
``weight_format`` say how ``common.export`` exports it; ``finalize`` fixes up and checks the export
before it is published. This module owns everything around those steps: a model directory is
complete when its marker ``.ovserve-demo-complete`` holds the kind's ``version``; builds run in a
scratch directory inside OUT_DIR and are renamed into place, so a killed run never leaves a
half-written model that looks complete; concurrent builders (e.g. pytest-xdist workers) on one
OUT_DIR are serialised by a lock file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from scripts.demo_models.common import export, log, quiet_export
from scripts.demo_models.tokenizer import Tokenizers

MARKER_NAME = ".ovserve-demo-complete"
LOCK_NAME = ".ovserve-demo.lock"
SCRATCH_PREFIX = ".build-"
_HAVE_FLOCK = importlib.util.find_spec("fcntl") is not None


class DemoModel(Protocol):
    """One model to build: the spec of a model kind, whose methods are the kind's own steps."""

    @property
    def name(self) -> str: ...  # the model directory's name in OUT_DIR

    @property
    def version(self) -> str: ...  # marker content; bumped when the kind's files change

    @property
    def task(self) -> str: ...  # optimum-intel export task

    @property
    def weight_format(self) -> str: ...  # "fp16", "fp32" or "int8"

    def tokenizer(self, tokenizers: Tokenizers) -> Path: ...

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path: ...

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None: ...


def is_complete(model_dir: Path, version: str) -> bool:
    """True if ``model_dir`` was fully built by a builder of ``version``."""
    marker = model_dir / MARKER_NAME
    try:
        return marker.read_text(encoding="utf-8").strip() == version
    except OSError:
        return False


@contextlib.contextmanager
def build_lock(out_dir: Path) -> Iterator[None]:
    if not _HAVE_FLOCK:  # Windows: no flock; the rename-into-place still keeps models consistent.
        yield
        return
    import fcntl

    with open(out_dir / LOCK_NAME, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _build_one(model: DemoModel, out_dir: Path, scratch: Path, tokenizer_dir: Path) -> Path:
    """Build ``model`` in ``scratch`` and atomically move it to ``out_dir / model.name``."""
    started = time.monotonic()
    hf_dir = scratch / "hf" / model.name
    ov_dir = scratch / "ov" / model.name
    # A kind may mute its own library's noise too (the image model: diffusers' logger and progress bars).
    with quiet_export(scratch), getattr(model, "quiet", contextlib.nullcontext)():
        log(f"{model.name}: creating random checkpoint")
        model.checkpoint(tokenizer_dir, hf_dir)
        log(f"{model.name}: exporting to OpenVINO ({model.weight_format})")
        # A kind may need optimum's --model-kwargs (SpeechT5: its vocoder, saved by checkpoint()) or
        # another library than transformers (the image model: a diffusers pipeline).
        export(
            hf_dir,
            ov_dir,
            model.task,
            model.weight_format,
            getattr(model, "model_kwargs", lambda _: None)(hf_dir),
            getattr(model, "library_name", "transformers"),
        )
    model.finalize(tokenizer_dir, hf_dir, ov_dir)
    (ov_dir / MARKER_NAME).write_text(model.version + "\n", encoding="utf-8")

    target = out_dir / model.name
    if target.exists():
        # Move the stale copy aside first: rename cannot replace a non-empty directory, and the
        # stale copy must not be half-deleted in place.
        os.replace(target, scratch / f"stale-{model.name}")
    os.replace(ov_dir, target)
    shutil.rmtree(hf_dir, ignore_errors=True)
    log(f"{model.name}: done in {time.monotonic() - started:.1f} s -> {target}")
    return target


def build(models: Sequence[DemoModel], out_dir: Path, force: bool = False) -> dict[str, Path]:
    """Build (or with ``force`` rebuild) each of ``models`` that is not complete; returns name -> directory."""
    # Absolute, because optimum-intel takes a relative path that is not "./..." for a Hub model id.
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    todo: list[DemoModel] = []
    for model in models:
        target = out_dir / model.name
        if not force and is_complete(target, model.version):
            log(f"{model.name}: up to date, skipping ({target})")
            result[model.name] = target
        else:
            todo.append(model)
    if not todo:
        return result

    with build_lock(out_dir):
        if _HAVE_FLOCK:
            # Holding the lock, any other scratch dir belongs to a builder that was killed.
            for leftover in out_dir.glob(f"{SCRATCH_PREFIX}*"):
                shutil.rmtree(leftover, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out_dir))
        try:
            # One set per build, so a tokenizer shared by several models is trained once.
            tokenizers = Tokenizers(scratch)
            for model in todo:
                target = out_dir / model.name
                # Another process may have finished it while we waited for the lock.
                if not force and is_complete(target, model.version):
                    log(f"{model.name}: built by another process, skipping")
                    result[model.name] = target
                    continue
                result[model.name] = _build_one(model, out_dir, scratch, model.tokenizer(tokenizers))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return result
