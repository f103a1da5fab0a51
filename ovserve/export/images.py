"""``image_generation``: export a diffusers text-to-image pipeline (Stable Diffusion 1.5/2/XL/3, LCM,
FLUX, ...) and its LoRA adapters into an OVMS model repository.

Takes OVMS ``export_model.py``'s argument names for that task (:func:`add_image_arguments`);
:class:`ImageOptions` is what they add to the export's steps and guarantees
(:func:`ovserve.export.driver.export`): cheap checks first (the source is a diffusers pipeline: a
``model_index.json`` naming its components, each tokenizer component with its tokenizer files; the
limits and static shapes as the server will read them; every LoRA adapter found, downloaded from the
Hub if need be), conversion with optimum-intel as OVMS's script runs it (``optimum-cli export
openvino --model SRC --weight-format F [PARAMS]``: task ``text-to-image``, library ``diffusers``, so
the VAE encoder that image-to-image and inpainting need is exported too), an OpenVINO tokenizer in
every ``tokenizer*/`` folder the pipeline reads (converted with openvino_tokenizers where optimum
left none), the adapters copied under ``loras/``, ``graph.pbtxt`` as OVMS's
``image_generation_graph_template`` renders it, and a check that ovserve reads the graph and that
the pipelines it describes generate one tiny image (64x64 or the static size, one step; with every
adapter on too). Raises :class:`~ovserve.export.report.ExportError`.

Differences from OVMS's script, on purpose: an existing ``model_index.json`` in the target is not a
reason to skip the conversion (``--overwrite_models`` replaces the model, as for every task);
``--resolution``, ``--num_images_per_prompt``, ``--guidance_scale``, the limits and the adapters'
alphas are checked before the conversion, with the rules the server applies to the graph; LoRA
sources may be local files or directories (see :mod:`ovserve.export.image_loras`).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from ovserve.engine.spec import EngineSpec, ImageSettings, parse_resolution
from ovserve.errors import first_complaint
from ovserve.export.arguments import add_cache_dir_argument, add_task_parser, check_cache_dir, non_negative_int
from ovserve.export.driver import Checkpoint, Options, Plan
from ovserve.export.image_loras import LoraMix, LoraSource, parse_source_loras, resolve_lora
from ovserve.export.report import ExportError, stage
from ovserve.export.source import TOKENIZER_FILES, Source
from ovserve.export.verification import check_runs
from ovserve.json_types import JsonObject
from ovserve.settings.schema import ModelSettings

OPTIMUM_TASK = "text-to-image"
# The size and steps of the check's image: small and quick on any model (a multiple of 16, which
# FLUX and SD3 need), unless static shapes fix another size.
CHECK_SIZE = 64
CHECK_STEPS = 1
# The graph's options ImageSettings checks as the server will (unset: "" or 0 as OVMS's script, or None).
_GRAPH_LIMITS = ("resolution", "num_images_per_prompt", "guidance_scale", "max_resolution", "default_resolution",
                 "max_num_images_per_prompt", "default_num_inference_steps", "max_num_inference_steps")  # fmt: skip


def add_image_arguments(tasks: Any) -> None:
    """``image_generation`` under the export command's subparsers ``tasks``."""
    parser = add_task_parser(
        tasks,
        "image_generation",
        "a diffusers image model for /v3/images/generations and /v3/images/edits",
        plan_from_args,
        device_help="CPU, GPU or NPU, or one per part: 'CPU GPU NPU' (text encoder, denoiser, VAE)",
    )
    add_cache_dir_argument(parser)
    parser.add_argument("--num_streams", type=non_negative_int, default=0, help="plugin_config NUM_STREAMS (0: unset)")
    parser.add_argument(
        "--resolution",
        default="",
        help="static WxH shapes, space separated (e.g. '512x512 768x768'): the models are reshaped to them "
        "(NPU needs it); requests must ask one",
    )
    parser.add_argument("--guidance_scale", default="", help="static guidance scale (with --resolution)")
    parser.add_argument("--num_images_per_prompt", default="", help="static number of images (with --resolution)")
    parser.add_argument("--max_resolution", default="", help="largest WxH a request may ask (server default 4096x4096)")
    parser.add_argument("--default_resolution", default="", help="WxH when a request asks none (default: the model's)")
    parser.add_argument(
        "--max_num_images_per_prompt", type=non_negative_int, default=0, help="largest n (0: server default 10)"
    )
    parser.add_argument(
        "--default_num_inference_steps", type=non_negative_int, default=0, help="steps when unasked (0: default 50)"
    )
    parser.add_argument(
        "--max_num_inference_steps", type=non_negative_int, default=0, help="most steps a request may ask (0: 100)"
    )
    parser.add_argument(
        "--source_loras",
        help="LoRA adapters: ALIAS=SOURCE[@FILE][:ALPHA],... (SOURCE: Hub id, .safetensors file or directory) "
        "and mixes ALIAS=@A[:ALPHA]+@B[:ALPHA]; copied under loras/, clients pick one by sending its alias as model",
    )


def _resolution(option: str, text: str, *, several: bool = False) -> str:
    """``text`` as WxH (several, space separated, when allowed), written as OVMS's script normalizes it."""
    if not text:
        return ""
    try:
        sizes = parse_resolution(text)
    except ValueError as exc:
        raise ExportError(f"{option} {text!r}: {exc}") from None
    if not sizes or (len(sizes) > 1 and not several):
        raise ExportError(f"{option} {text!r}: expected {'WxH sizes' if several else 'one WxH'}, e.g. 1024x768")
    return " ".join(f"{width}x{height}" for width, height in sizes)


def _positive_int(option: str, text: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ExportError(f"{option} {text!r}: expected a positive integer")
    return value


def _guidance(text: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ExportError(f"--guidance_scale {text!r}: expected a number of at least 0")
    return value


@dataclass(frozen=True)
class ImageOptions(Options):
    """An image model's part of the plan: its graph's options and its LoRA adapters."""

    library_name: ClassVar[str] = "diffusers"

    target_device: str
    plugin_config: JsonObject
    resolution: str = ""
    num_images_per_prompt: int | None = None
    guidance_scale: float | None = None
    max_resolution: str = ""
    default_resolution: str = ""
    max_num_images_per_prompt: int = 0
    default_num_inference_steps: int = 0
    max_num_inference_steps: int = 0
    loras: tuple[LoraSource, ...] = ()
    mixes: tuple[LoraMix, ...] = ()
    # Each adapter's file on this machine, by alias: found by check_checkpoint (before the conversion).
    lora_files: dict[str, Path] = field(default_factory=dict, compare=False, repr=False)

    def settings(self) -> ImageSettings:
        """The limits and static shapes as the server reads them from the graph (adapters aside)."""
        # Unset is "", 0 or None; a guidance scale of 0 is valid and needs no check.
        values = {name: value for name in _GRAPH_LIMITS if (value := getattr(self, name))}
        return ImageSettings.model_validate(values)

    def read_config(self, source: Source) -> JsonObject:
        """The pipeline's ``model_index.json``: its class and components."""
        path = source.fetch("model_index.json")
        if path is None:
            what = "a transformers model" if "config.json" in source.files else "not a diffusers pipeline"
            raise ExportError(
                f"{source.describe()} has no model_index.json: it is {what}; image_generation exports diffusers "
                "pipelines (e.g. stable-diffusion-v1-5/stable-diffusion-v1-5, SimianLuo/LCM_Dreamshaper_v7)"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ExportError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("_class_name"), str):
            raise ExportError(f"{path}: expected a diffusers model index with its pipeline's _class_name")
        return data

    def check_checkpoint(self, source: Source, config: JsonObject) -> None:
        """The pipeline's components are there; every LoRA adapter's file found (downloaded from the Hub if need be)."""
        missing = [
            name for name in _components(config) if not any(file.startswith(f"{name}/") for file in source.files)
        ]
        if missing:
            raise ExportError(
                f"{source.describe()}: model_index.json names {', '.join(missing)}, which it does not hold"
            )
        for adapter in self.loras:
            path = resolve_lora(adapter)
            self.lora_files[adapter.alias] = path
            stage(f"LoRA adapter '{adapter.alias}': {path}")

    def check_tokenizer(self, source: Source) -> None:
        """Every tokenizer the pipeline names has files openvino_tokenizers can convert (in its own folder)."""
        names = _tokenizer_components(_index(source))
        if not names:
            raise ExportError(f"{source.describe()}: model_index.json names no tokenizer; the text encoder needs one")
        for name in names:
            if not any(f"{name}/{file}" in source.files for file in TOKENIZER_FILES):
                raise ExportError(
                    f"{source.describe()} has no tokenizer in {name}/ (none of {', '.join(TOKENIZER_FILES)}); "
                    "copy the tokenizer files of the model it was trained from there"
                )

    def optimum_task(self, source: Source, config: JsonObject, others: list[Checkpoint]) -> str:
        return OPTIMUM_TASK

    def finalize(self, source: Source, staged: Path, task: str) -> None:
        """An OpenVINO tokenizer in every tokenizer folder the pipeline reads (optimum converts them;
        one it could not is converted here, or the export stops)."""
        if not (staged / "model_index.json").is_file():
            raise ExportError(f"optimum-intel wrote no model_index.json for {source.describe()}")
        for name in _tokenizer_components(_index(source)):
            if not (staged / name / "openvino_tokenizer.xml").is_file():
                stage(f"{name}: converting the tokenizer with openvino_tokenizers")
                _convert_tokenizer(source, name, staged / name)

    def add_files(self, staged: Path) -> None:
        for adapter in self.loras:
            path = self.lora_files[adapter.alias]
            target = staged / adapter.destination(path.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)

    def render_graph(self) -> str:
        """graph.pbtxt byte for byte as OVMS's image_generation_graph_template renders it (no final
        newline, as jinja's default; floats as Python prints them)."""
        lines = ['models_path: "./",']
        if self.plugin_config:
            lines.append(f"plugin_config: '{json.dumps(self.plugin_config)}',")
        lines.append(f'device: "{self.target_device or "CPU"}",')
        if self.resolution:
            lines.append(f'resolution: "{self.resolution}",')
        if self.num_images_per_prompt:
            lines.append(f"num_images_per_prompt: {self.num_images_per_prompt},")
        if self.guidance_scale is not None:
            lines.append(f"guidance_scale: {_number(self.guidance_scale)},")
        for name in ("max_resolution", "default_resolution"):
            if value := getattr(self, name):
                lines.append(f"{name}: '{value}',")
        for name in ("max_num_images_per_prompt", "default_num_inference_steps", "max_num_inference_steps"):
            if value := getattr(self, name):
                lines.append(f"{name}: {value},")
        for adapter in self.loras:
            strength = "" if adapter.alpha is None else f" alpha: {adapter.alpha}"
            entry = f'alias: "{adapter.alias}" path: "{self._lora_path(adapter)}"{strength} mode: DYNAMIC'
            lines.append(f"lora_adapters {{ {entry} }}")
        for mix in self.mixes:
            lines += ["composite_lora_adapters {", f'      alias: "{mix.alias}"']
            for alias, alpha in mix.components:
                strength = "" if alpha == 1.0 else f" alpha: {alpha}"  # OVMS leaves out the default
                lines.append(f'      components {{ adapter_alias: "{alias}"{strength} }}')
            lines.append("    }")
        body = "\n".join(" " * 6 + line for line in lines)
        return _GRAPH_HEAD + body + "\n    }\n  }\n}"

    def _lora_path(self, adapter: LoraSource) -> str:
        found = self.lora_files.get(adapter.alias)
        name = found.name if found is not None else adapter.known_file_name()
        if name is None:
            raise ExportError(f"LoRA adapter '{adapter.alias}': its file is not known before it is looked up")
        return adapter.destination(name)

    def check(self, settings: ModelSettings, task: str, source: Source) -> None:
        """Generate one tiny image with the pipelines the server builds (and one with every adapter on)."""
        check_runs(settings, "image generation", self._run)

    def _run(self, spec: EngineSpec) -> str:
        from ovserve.engine.images import ImageGenerator
        from ovserve.engine.messages import ImageParams, ImageRequest

        images = spec.images
        width, height = images.resolution[0] if images.resolution else (CHECK_SIZE, CHECK_SIZE)
        generator = ImageGenerator(spec)
        params = ImageParams(
            prompt="a photo of a cat", width=width, height=height, n=images.num_images_per_prompt or 1,
            steps=CHECK_STEPS, guidance_scale=images.guidance_scale, rng_seed=1,
        )  # fmt: skip
        runs = [params]
        if images.lora_adapters:
            adapters = tuple((alias, adapter.alpha) for alias, adapter in images.lora_adapters.items())
            runs.append(replace(params, adapters=adapters))
        for run in runs:
            files, _ = generator.generate(ImageRequest(request_id=0, params=run), lambda *_: False)
            if len(files) != run.n:
                raise ExportError(f"the pipeline generated {len(files)} images, not {run.n}")
        kinds = "inpainting, image to image and text to image" if generator.inpaints else "text to image"
        with_adapters = f"; with adapters {', '.join(images.lora_adapters)} on too" if images.lora_adapters else ""
        return f"generated a {width}x{height} image in {CHECK_STEPS} step ({kinds}){with_adapters}"


_GRAPH_HEAD = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
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


def _number(value: float) -> str:
    # OVMS writes the flag's text; a whole number as an integer, anything else as Python prints it.
    return str(int(value)) if value.is_integer() else str(value)


def _index(source: Source) -> JsonObject:
    path = source.fetch("model_index.json")
    data = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
    return data if isinstance(data, dict) else {}


def _components(config: JsonObject) -> list[str]:
    """The components model_index.json names with a library and class (null ones are absent)."""
    return [
        name
        for name, value in config.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and all(value)
    ]


def _tokenizer_components(config: JsonObject) -> list[str]:
    return [name for name in _components(config) if name.startswith("tokenizer")]


def _convert_tokenizer(source: Source, name: str, output: Path) -> None:
    """openvino_tokenizers' conversion of the checkpoint's ``name/`` tokenizer into ``output`` (its IR only:
    a text encoder reads no detokenizer)."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source.model_name_or_path, subfolder=name, local_files_only=source.local_dir is not None
        )
        converted = convert_tokenizer(tokenizer, with_detokenizer=False)
    except (OSError, ValueError, RuntimeError, TypeError) as exc:
        raise ExportError(
            f"openvino_tokenizers cannot convert the tokenizer in {name}/ of {source.describe()}: {exc}"
        ) from exc
    output.mkdir(parents=True, exist_ok=True)
    ov.save_model(converted, str(output / "openvino_tokenizer.xml"))
    tokenizer.save_pretrained(str(output))


def plan_from_args(args: argparse.Namespace) -> Plan[ImageOptions]:
    """Defaults resolved, impossible combinations refused; nothing is read but local LoRA paths, nothing written."""
    check_cache_dir(args.ov_cache_dir)
    plugin_config: JsonObject = {}
    # As OVMS's script: NUM_STREAMS only when asked, as a number.
    if args.num_streams:
        plugin_config["NUM_STREAMS"] = args.num_streams
    if args.ov_cache_dir:
        plugin_config["CACHE_DIR"] = args.ov_cache_dir
    loras, mixes = parse_source_loras(args.source_loras)
    options = ImageOptions(
        target_device=args.target_device,
        plugin_config=plugin_config,
        resolution=_resolution("--resolution", args.resolution, several=True),
        num_images_per_prompt=_positive_int("--num_images_per_prompt", args.num_images_per_prompt),
        guidance_scale=_guidance(args.guidance_scale),
        max_resolution=_resolution("--max_resolution", args.max_resolution),
        default_resolution=_resolution("--default_resolution", args.default_resolution),
        max_num_images_per_prompt=args.max_num_images_per_prompt,
        default_num_inference_steps=args.default_num_inference_steps,
        max_num_inference_steps=args.max_num_inference_steps,
        loras=loras,
        mixes=mixes,
    )
    try:
        options.settings()
    except ValidationError as exc:
        complaint = first_complaint(exc)
        raise ExportError(
            f"--{complaint.param}: {complaint.message}" if complaint.param else complaint.message
        ) from None
    plan = Plan.from_args(args, options)
    clash = [alias for alias in (*(a.alias for a in loras), *(m.alias for m in mixes)) if alias == plan.model_name]
    if clash:
        raise ExportError(f"--source_loras: alias '{clash[0]}' is the model's name; clients tell them apart by name")
    return plan
