"""Export, then serve, for image generation: the tiny diffusers pipeline of the demo builder (a random
Stable-Diffusion-1.5-shaped model with a CLIP tokenizer trained offline) and its LoRA adapter through
``scripts/export_model.py image_generation`` (int8, OVMS's default, with limits, an adapter and a
composite), into a repository that ``ovserve serve --config_path`` then serves (real optimum-intel,
nncf and openvino_genai in subprocesses, offline). One export for the module: it is the slow part."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from ovserve.export import build_parser
from ovserve.export.images import plan_from_args
from ovserve.export.source import resolve_source
from ovserve.settings.graph import parse_graph
from tests.conftest import ROOT, Server, start_config_server


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny diffusers pipeline, as saved by diffusers' save_pretrained (what a user downloads)."""
    from scripts.demo_models.image import TINY_IMAGE_SPEC
    from scripts.demo_models.tokenizer import build_clip_tokenizer

    root = tmp_path_factory.mktemp("image-checkpoint")
    return TINY_IMAGE_SPEC.checkpoint(build_clip_tokenizer(root / "clip"), root / "hf-sd")


@pytest.fixture(scope="module")
def export_run(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The repository and the export's output."""
    from scripts.demo_models.image import LORA_PATH

    lora = checkpoint / Path(LORA_PATH).name  # the builder saves its adapter beside the pipeline
    repo = tmp_path_factory.mktemp("image-export") / "repo"
    command = [
        sys.executable, "scripts/export_model.py", "image_generation", "--source_model", str(checkpoint),
        "--model_name", "painter", "--model_repository_path", str(repo), "--max_resolution", "256x256",
        "--default_num_inference_steps", "2", "--max_num_inference_steps", "8", "--max_num_images_per_prompt", "2",
        "--source_loras", f"style={lora}:0.7,mix=@style:0.5",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return repo, result.stdout


@pytest.fixture(scope="module")
def repository(export_run: tuple[Path, str]) -> Path:
    return export_run[0]


@pytest.fixture(scope="module")
def exported_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_config_server(tmp_path_factory.mktemp("served"), repository / "config.json", model_name="painter")
    yield server
    server.stop()


def test_export_checks_the_pipeline_with_its_adapter_before_writing(export_run: tuple[Path, str]) -> None:
    _, output = export_run
    assert "[export] model: compressing weights to int8 (nncf)" in output, output
    assert "[export] check: generated a 64x64 image in 1 step" in output and "with adapters style on too" in output


def test_export_writes_the_diffusers_layout_the_adapter_and_ovms_graph(repository: Path) -> None:
    model = repository / "painter"
    assert json.loads((repository / "config.json").read_text())["mediapipe_config_list"] == [
        {"name": "painter", "base_path": "painter"}
    ]
    for part in ("model_index.json", "scheduler/scheduler_config.json", "text_encoder/openvino_model.xml",
                 "tokenizer/openvino_tokenizer.xml", "unet/openvino_model.xml", "vae_decoder/openvino_model.xml",
                 "vae_encoder/openvino_model.xml", "loras/style/tiny-style.safetensors"):  # fmt: skip
        assert (model / part).is_file(), part
    graph = (model / "graph.pbtxt").read_text()
    assert (
        'lora_adapters { alias: "style" path: "loras/style/tiny-style.safetensors" alpha: 0.7 mode: DYNAMIC }' in graph
    )
    values = parse_graph(model / "graph.pbtxt").values
    assert values["task"] == "image_generation" and values["path"] == model.resolve()
    assert (values["max_resolution"], values["default_num_inference_steps"]) == ("256x256", 2)
    assert (values["max_num_inference_steps"], values["max_num_images_per_prompt"]) == (8, 2)
    assert values["lora_adapters"]["style"]["path"] == (model / "loras/style/tiny-style.safetensors").resolve()
    assert values["composite_lora_adapters"] == {"mix": {"style": 0.5}}


def test_the_exported_repository_serves_images_with_its_limits_and_adapters(exported_server: Server) -> None:
    for model in ("painter", "mix"):  # the base model, then the composite adapter by its alias
        answer = httpx.post(
            f"{exported_server.url}/v3/images/generations",
            json={"model": model, "prompt": "a red lighthouse", "size": "64x64", "rng_seed": 3},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        (image,) = answer.json()["data"]
        assert Image.open(io.BytesIO(base64.b64decode(image["b64_json"]))).size == (64, 64)
    too_big = httpx.post(
        f"{exported_server.url}/v3/images/generations",
        json={"model": "painter", "prompt": "a red lighthouse", "size": "512x512"},
        timeout=60,
    )
    assert too_big.status_code == 400, too_big.text  # over the exported --max_resolution


def test_a_tokenizer_optimum_left_unconverted_is_converted_with_openvino_tokenizers(
    checkpoint: Path, tmp_path: Path
) -> None:
    import openvino_genai
    from transformers import CLIPTokenizer

    staged = tmp_path / "staged"
    (staged / "tokenizer").mkdir(parents=True)
    shutil.copyfile(checkpoint / "model_index.json", staged / "model_index.json")
    options = plan_from_args(build_parser().parse_args(["image_generation", "--source_model", str(checkpoint)])).options
    options.finalize(resolve_source(str(checkpoint)), staged, "text-to-image")
    converted = openvino_genai.Tokenizer(str(staged / "tokenizer")).encode("a red lighthouse").input_ids.data
    expected = CLIPTokenizer.from_pretrained(str(checkpoint / "tokenizer"))("a red lighthouse").input_ids
    assert converted[0].tolist()[: len(expected)] == expected
