"""OVMS image-generation graphs (ImageGenCalculatorOptions) load as image_generation models with
their limits, static shapes and LoRA adapters; a mistake is refused with the file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ovserve.engine.spec import PipelineKind
from ovserve.settings.graph import GraphError
from ovserve.settings.schema import models_from_config

# OVMS's documented graph (docs/image_generation/reference.md), its options left as written there.
IMAGE_GRAPH = """input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {
  name: "ImageGenExecutor"
  calculator: "ImageGenCalculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "IMAGE_GEN_NODE_RESOURCES:pipes"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  node_options: {
      [type.googleapis.com / mediapipe.ImageGenCalculatorOptions]: {
          models_path: "./"
          device: "CPU"
%s
      }
  }
}
"""


def _image_model(root: Path) -> Path:
    """A directory laid out as an exported image model (what the settings check; nothing is loaded)."""
    (root / "tokenizer").mkdir(parents=True, exist_ok=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": "LatentConsistencyModelPipeline"}))
    (root / "tokenizer" / "openvino_tokenizer.xml").write_text("<net/>")
    return root


def _config(tmp_path: Path, options: str = "") -> Path:
    model = _image_model(tmp_path / "painter")
    (model / "graph.pbtxt").write_text(IMAGE_GRAPH % options)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mediapipe_config_list": [{"name": "painter", "base_path": "painter"}]}))
    return path


def test_ovms_image_graph_becomes_an_image_generation_model_with_ovms_defaults(tmp_path: Path) -> None:
    (settings,) = models_from_config(_config(tmp_path))
    assert settings.task == "image_generation"
    assert settings.pipeline_kind is PipelineKind.IMAGE_GENERATION
    assert settings.path == (tmp_path / "painter").resolve()
    images = settings.engine_spec().images
    assert images.max_resolution == (4096, 4096)
    assert (images.max_num_images_per_prompt, images.default_num_inference_steps) == (10, 50)
    assert images.max_num_inference_steps == 100
    assert images.default_resolution is None and images.resolution == ()


def test_graph_limits_static_shapes_and_lora_adapters_are_read(tmp_path: Path) -> None:
    lora = tmp_path / "style.safetensors"
    lora.write_bytes(b"\0")
    options = f"""          max_resolution: "1024x768"
          default_resolution: "512x384"
          max_num_images_per_prompt: 4
          default_num_inference_steps: 4
          max_num_inference_steps: 8
          resolution: "512x384 256x256"
          num_images_per_prompt: 1
          guidance_scale: 1.5
          lora_adapters: {{ alias: "style" path: "{lora}" alpha: 0.7 mode: DYNAMIC }}
          lora_adapters {{ alias: "plain" path: "{lora}" }}
          composite_lora_adapters {{ alias: "mix" components {{ adapter_alias: "style" alpha: 0.5 }}
                                                 components {{ adapter_alias: "plain" }} }}"""
    (settings,) = models_from_config(_config(tmp_path, options))
    images = settings.images
    assert images.max_resolution == (1024, 768) and images.default_resolution == (512, 384)
    assert images.resolution == ((512, 384), (256, 256))
    assert (images.max_num_images_per_prompt, images.default_num_inference_steps, images.max_num_inference_steps) == (
        4,
        4,
        8,
    )
    assert (images.num_images_per_prompt, images.guidance_scale) == (1, 1.5)
    assert {alias: (adapter.path, adapter.alpha) for alias, adapter in images.lora_adapters.items()} == {
        "style": (lora, pytest.approx(0.7)),
        "plain": (lora, 1.0),  # OVMS's default alpha
    }
    assert images.adapter_mix("mix") == {"style": 0.5, "plain": 1.0}
    assert images.aliases == ["style", "plain", "mix"]


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ('          max_resolution: "big"', "max_resolution"),
        ('          max_resolution: "512x512 1024x1024"', "max_resolution"),
        ("          max_num_images_per_prompt: 0", "max_num_images_per_prompt"),
        ("          default_num_inference_steps: 60\n          max_num_inference_steps: 50", "default_num_inference"),
        ('          lora_adapters { alias: "gone" path: "missing.safetensors" }', "does not exist"),
        ('          composite_lora_adapters { alias: "mix" components { adapter_alias: "nope" } }', "unknown"),
        # OVMS's STATIC (NPU) and FUSE modes change the base model; ovserve switches adapters per request.
        ('          lora_adapters { alias: "baked" path: "x.safetensors" mode: FUSE }', "mode FUSE is not served"),
        ('          lora_adapters { alias: "npu" path: "x.safetensors" mode: STATIC }', "mode STATIC is not served"),
        ("          num_inference_steps: 4", "num_inference_steps"),  # not an OVMS option: a typo
    ],
)
def test_a_wrong_image_option_is_refused_naming_the_graph(tmp_path: Path, options: str, complaint: str) -> None:
    with pytest.raises(GraphError, match=complaint) as caught:
        models_from_config(_config(tmp_path, options))
    assert "graph.pbtxt" in str(caught.value)


def test_an_image_graph_on_a_directory_that_is_no_image_model_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "painter" / "model_index.json").unlink()
    with pytest.raises(GraphError, match="no OpenVINO IR"):
        models_from_config(config)
