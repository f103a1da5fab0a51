"""`ovserve export image_generation` arguments -> graph.pbtxt as OVMS's export_model.py writes it (its
image_generation_graph_template, rendered), read back as ovserve serves it; and the mistakes refused
before anything is converted or written: argument values, LoRA sources, checkpoints that are no
diffusers pipeline (no model needed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ovserve.export import build_parser, main
from ovserve.export.driver import Plan
from ovserve.export.images import ImageOptions, plan_from_args
from ovserve.export.source import _weights_bytes
from ovserve.settings.graph import parse_graph
from ovserve.settings.schema import ModelSettings

_HEAD = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {
  name: "ImageGenExecutor"
  calculator: "ImageGenCalculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "IMAGE_GEN_NODE_RESOURCES:pipes"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  node_options: {
    [type.googleapis.com / mediapipe.ImageGenCalculatorOptions]: {
"""
# OVMS's template rendered (jinja2) with the script's defaults.
OVMS_DEFAULT_GRAPH = (
    _HEAD
    + """      models_path: "./",
      device: "CPU",
    }
  }
}"""
)
# ... and with every option: NPU, streams, cache, static shapes, limits, two Hub adapters and a mix.
OVMS_FULL_GRAPH = (
    _HEAD
    + """      models_path: "./",
      plugin_config: '{"NUM_STREAMS": 2, "CACHE_DIR": "/c"}',
      device: "NPU",
      resolution: "512x512 768x768",
      num_images_per_prompt: 2,
      guidance_scale: 7.5,
      max_resolution: '1024x1024',
      default_resolution: '512x512',
      max_num_images_per_prompt: 4,
      default_num_inference_steps: 20,
      max_num_inference_steps: 40,
      lora_adapters { alias: "a" path: "loras/org/repo/w.safetensors" mode: DYNAMIC }
      lora_adapters { alias: "b" path: "loras/org/other/x.safetensors" alpha: 0.3 mode: DYNAMIC }
      composite_lora_adapters {
            alias: "m"
            components { adapter_alias: "a" }
            components { adapter_alias: "b" alpha: 0.7 }
          }
    }
  }
}"""
)
FULL_ARGS = [
    "--target_device", "NPU", "--num_streams", "2", "--ov_cache_dir", "/c", "--resolution", "512x512 768x768",
    "--num_images_per_prompt", "2", "--guidance_scale", "7.5", "--max_resolution", "1024x1024",
    "--default_resolution", "512x512", "--max_num_images_per_prompt", "4", "--default_num_inference_steps", "20",
    "--max_num_inference_steps", "40",
    "--source_loras", "a=org/repo@w.safetensors,b=org/other@x.safetensors:0.3,m=@a+@b:0.7",
]  # fmt: skip


def _plan(*args: str) -> Plan[ImageOptions]:
    return plan_from_args(build_parser().parse_args(["image_generation", "--source_model", "org/sd", *args]))


def _image_model(root: Path) -> Path:
    """A directory laid out as an exported image model (what the settings check; nothing is loaded)."""
    (root / "tokenizer").mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    (root / "tokenizer" / "openvino_tokenizer.xml").write_text("<net/>")
    return root


def test_graph_is_ovms_template_byte_for_byte() -> None:
    plan = _plan()
    assert plan.options.render_graph() == OVMS_DEFAULT_GRAPH
    assert plan.weight_format == "int8" and plan.model_name == "org/sd"  # OVMS's defaults
    assert _plan(*FULL_ARGS).options.render_graph() == OVMS_FULL_GRAPH


def test_resolutions_are_written_as_ovms_normalizes_them() -> None:
    options = _plan("--max_resolution", "0512X0768", "--resolution", "256x256,512x512").options
    assert (options.max_resolution, options.resolution) == ("512x768", "256x256 512x512")


def test_written_graph_reads_back_as_the_image_model_the_server_serves(tmp_path: Path) -> None:
    lora = tmp_path / "sources" / "style.safetensors"
    lora.parent.mkdir()
    lora.write_bytes(b"\0")
    plan = _plan(*FULL_ARGS[:-2], "--source_loras", f"style={lora}:0.5,mix=@style:0.25")
    model = _image_model(tmp_path / "painter")
    # The export copies the adapter where the graph says (check_checkpoint finds it first).
    plan.options.lora_files["style"] = lora
    plan.options.add_files(model)
    (model / "graph.pbtxt").write_text(plan.options.render_graph())
    images = ModelSettings.from_graph("painter", parse_graph(model / "graph.pbtxt")).images
    assert images.resolution == ((512, 512), (768, 768)) and images.max_resolution == (1024, 1024)
    assert (images.num_images_per_prompt, images.guidance_scale) == (2, 7.5)
    assert (images.default_num_inference_steps, images.max_num_inference_steps) == (20, 40)
    assert images.lora_adapters["style"].path == (model / "loras" / "style" / "style.safetensors").resolve()
    assert images.lora_adapters["style"].alpha == 0.5
    assert images.adapter_mix("mix") == {"style": 0.25}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max_resolution", "big"], "--max_resolution 'big': expected WIDTHxHEIGHT"),
        (["--max_resolution", "512x512 1024x1024"], "expected one WxH"),
        (["--default_resolution", "0x512"], "--default_resolution '0x512'"),
        (["--resolution", "512"], "--resolution '512'"),
        (["--resolution", "512x512x2"], "--resolution"),
        (["--num_images_per_prompt", "0"], "--num_images_per_prompt '0': expected a positive integer"),
        (["--num_images_per_prompt", "two"], "--num_images_per_prompt 'two'"),
        (["--guidance_scale", "-1"], "--guidance_scale '-1': expected a number of at least 0"),
        (["--guidance_scale", "nan"], "--guidance_scale 'nan'"),
        (["--default_num_inference_steps", "60", "--max_num_inference_steps", "50"], "over max_num_inference_steps"),
        (["--default_num_inference_steps", "150"], "over max_num_inference_steps"),  # the server's default 100
        (["--source_loras", "a=/no/such.safetensors"], "no such file or directory"),
        (["--source_loras", "a=missing.safetensors"], "no such file or directory"),
        (["--source_loras", "a=org/r,mix=@a+@nope"], "composite 'mix' names nope, which is not an adapter alias"),
        (["--source_loras", "a=org/r,a=org/s"], "alias a given more than once"),
        (["--source_loras", "bad alias=org/r"], "alias 'bad alias' must be letters"),
        (["--source_loras", "a=org/r:11"], "alpha"),
        (["--source_loras", "a=org/r:inf"], "alpha 'inf' is not a finite number"),
        (["--source_loras", "a=org/r@weights.bin"], "@weights.bin must name a .safetensors file"),
        (["--source_loras", "mix=@"], "a composite lists adapters"),
        (["--model_name", "painter", "--source_loras", "painter=org/r"], "alias 'painter' is the model's name"),
        (["--weight-format", "fp16", "--extra_quantization_params", "--sym --ratio 1.0"], "int8 and int4 weights"),
        (["--ov_cache_dir", "/it's"], "single quote"),
    ],
)
def test_argument_mistakes_are_one_line_errors_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    repository = tmp_path / "models"
    argv = ["image_generation", "--source_model", "org/sd", "--model_repository_path", str(repository), *args]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ovserve export: ") and message in lines[0], lines
    assert not repository.exists()


def test_a_negative_limit_is_an_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["image_generation", "--source_model", "m", "--max_num_inference_steps", "-1"])
    assert "expected a non-negative integer, got -1" in capsys.readouterr().err


def _diffusers(root: Path, *, tokenizer: bool = True, unet: bool = True) -> Path:
    """A diffusers pipeline's layout (index, configs, empty weights): what the cheap checks read."""
    index = {"_class_name": "StableDiffusionPipeline", "feature_extractor": [None, None],
             "scheduler": ["diffusers", "EulerDiscreteScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
             "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"]}  # fmt: skip
    root.mkdir()
    (root / "model_index.json").write_text(json.dumps(index))
    parts = {"scheduler": "scheduler_config.json", "text_encoder": "model.safetensors",
             "tokenizer": "tokenizer_config.json", "unet": "diffusion_pytorch_model.safetensors"}  # fmt: skip
    for part, name in parts.items():
        if part != "unet" or unet:
            (root / part).mkdir()
            (root / part / name).write_bytes(b"{}")
    if tokenizer:
        (root / "tokenizer" / "vocab.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda root: (root.mkdir(), (root / "config.json").write_text("{}")), [],
         "has no model_index.json: it is a transformers model"),
        (lambda root: _diffusers(root, unet=False), [], "model_index.json names unet, which it does not hold"),
        (lambda root: _diffusers(root, tokenizer=False), [], "has no tokenizer in tokenizer/"),
        (_diffusers, ["--source_loras", "style=LORAS"], "holds several .safetensors files (a.safetensors, b."),
        (_diffusers, ["--source_loras", "style=LORAS@c.safetensors"], "no such file"),
        (_diffusers, ["--source_loras", "style=not-cached/lora"], "not in the Hugging Face cache"),
    ],
)  # fmt: skip
def test_a_source_that_cannot_be_exported_is_refused_before_converting(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[Path], object],
    extra: list[str],
    message: str,
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    loras = tmp_path / "loras"
    loras.mkdir()
    for name in ("a.safetensors", "b.safetensors"):
        (loras / name).write_bytes(b"\0")
    make(tmp_path / "source")
    repository = tmp_path / "models"
    argv = ["image_generation", "--source_model", str(tmp_path / "source"), "--model_repository_path",
            str(repository), *(arg.replace("LORAS", str(loras)) for arg in extra)]  # fmt: skip
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert message in error, error
    assert not repository.exists()


def test_a_diffusers_pipeline_weighs_its_components_not_its_variants_or_root_files() -> None:
    files = {
        "model_index.json": 1,
        "v1-5-pruned.safetensors": 4000,  # a single-file checkpoint beside the pipeline: optimum never reads it
        "unet/diffusion_pytorch_model.safetensors": 100,
        "unet/diffusion_pytorch_model.fp16.safetensors": 50,  # a variant, loaded only when asked
        "unet/diffusion_pytorch_model.bin": 100,  # the pickle beside safetensors: never both
        "text_encoder/model-00001-of-00002.safetensors": 10,
        "text_encoder/model-00002-of-00002.safetensors": 10,
        "vae/diffusion_pytorch_model.bin": 20,  # pickles only: those
    }
    assert _weights_bytes(files) == 100 + 20 + 20
    assert _weights_bytes({"config.json": 1, "model.safetensors": 7, "draft/model.safetensors": 5}) == 7
