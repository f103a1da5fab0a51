"""What every model kind shares below the build loop: the seed, progress lines, JSON files and the export.

Contract: nothing here knows a model kind. ``export`` runs optimum-intel in-process as
``optimum-cli export openvino --task TASK --weight-format {fp16,fp32,int8}`` would; the caller wraps the
checkpoint creation and the export in ``quiet_export``, which restores every setting it changes
(tests build models in-process).
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# Seeds torch's global RNG before a model is constructed and the generators that re-initialise weights.
SEED = 1234


def log(message: str) -> None:
    print(f"[make_demo_models] {message}", flush=True)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def require_files(directory: Path, names: Iterable[str]) -> None:
    """Raise unless every file in ``names`` exists in ``directory`` (an export that silently dropped one)."""
    missing = [name for name in names if not (directory / name).is_file()]
    if missing:
        raise RuntimeError(f"export into {directory} is missing {missing}")


@contextlib.contextmanager
def quiet_export(scratch: Path) -> Iterator[None]:
    """Mute the exporter's expected noise and keep its temp files next to the output.

    Tracing a random checkpoint prints a dozen TracerWarnings and transformers progress bars that
    drown the progress lines. optimum-intel's int8 step writes through ``tempfile.mkdtemp()`` and
    then renames into the output, which fails across filesystems (e.g. a tmpfs /tmp), so temp
    files go to the scratch directory on the output's filesystem. All settings are restored, since
    tests call this in-process.
    """
    import torch
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    progress_bars = hf_logging.is_progress_bar_enabled()
    saved_tempdir = tempfile.tempdir
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tempfile.tempdir = str(scratch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            yield
    finally:
        tempfile.tempdir = saved_tempdir
        hf_logging.set_verbosity(verbosity)
        if progress_bars:
            hf_logging.enable_progress_bar()


def export(
    hf_dir: Path,
    ov_dir: Path,
    task: str,
    weight_format: str,
    model_kwargs: dict[str, Any] | None = None,
    library_name: str = "transformers",
) -> None:
    """Export the checkpoint ``hf_dir`` to OpenVINO IR plus tokenizer IRs in ``ov_dir`` (``model_kwargs``:
    optimum's ``--model-kwargs``, e.g. SpeechT5's vocoder; ``library_name``: "diffusers" for a diffusers
    pipeline saved with ``save_pretrained``)."""
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    common: dict[str, Any] = {
        "model_name_or_path": str(hf_dir),
        "output": ov_dir,
        "task": task,
        "convert_tokenizer": True,
        "library_name": library_name,
        "local_files_only": True,
    }
    if model_kwargs:
        common["model_kwargs"] = model_kwargs
    if weight_format in ("fp16", "fp32"):
        # fp32: the checkpoint's weights unchanged (no fp16 compression, and no int8, which optimum
        # applies by default only to models of a billion parameters or more).
        main_export(ov_config=OVConfig(dtype=weight_format), **common)
    elif weight_format == "int8":
        # Same two steps as the CLI's --weight-format int8 (optimum/commands/export/openvino.py):
        # export with the quantization config (which also keeps the KV-cache precision hint
        # off, as for any int8 CLI export) then compress the weights with nncf.
        from optimum.exporters.openvino.__main__ import _main_quantize

        quantization_config: dict[str, Any] = {
            "bits": 8,
            "sym": False,
            "group_size": -1,
            "ratio": 1.0,
            "dtype": "int8",
            "quant_method": "default",
        }
        main_export(ov_config=OVConfig(quantization_config=quantization_config), **common)
        # In offline mode OVModel.from_pretrained looks a local directory up as a Hub cache
        # entry, fails, and logs "Could not infer whether the model was already converted";
        # harmless (it keeps export=False, which is right), so keep it out of the progress output.
        reload_logger = logging.getLogger("optimum.intel.openvino.modeling_base")
        saved_level = reload_logger.level
        reload_logger.setLevel(logging.ERROR)
        try:
            _main_quantize(
                model_name_or_path=str(hf_dir),
                task=task,
                library_name="transformers",
                quantization_config=quantization_config,
                output=ov_dir,
                cache_dir=str(hf_dir.parent / "hf-cache"),
            )
        finally:
            reload_logger.setLevel(saved_level)
    else:
        raise ValueError(f"unsupported weight format {weight_format!r}")
