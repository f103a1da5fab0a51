"""The one export driver: the steps every export runs, and the options a kind of model adds to them.

A :class:`Plan` is what the command line decided (source, name, repository, weight format,
compression options) plus the :class:`Options` of one kind of model: text generation
(``ovserve.export.text``), embeddings and rerank (``ovserve.export.retrieval``), speech
(``ovserve.export.speech``), image generation (``ovserve.export.images``). :func:`export` runs the
steps, reported as stages (:func:`export_stages`: ``[export] [i/N] ...``, ``ovserve.export.progress``)
and each detail printed as it comes:

1. the model directory is free (or ``--overwrite_models``) and ``config.json`` usable;
2. the source resolved, not overlapping the target; its config (``Options.read_config``: a
   diffusers pipeline's ``model_index.json``), ``Options.check_checkpoint`` (its kind), its tokenizer
   (``Options.check_tokenizer``); ``Options.other_checkpoints`` (a draft, a vocoder); the disk can
   hold the result;
3. ``Options.optimum_task``; the compression config; conversion with optimum-intel
   (``Options.library_name``) into a staging directory next to the target (``Options.model_kwargs``,
   then ``Options.finalize``: the files the server needs besides the IR, then
   ``Options.convert_more``: a draft);
4. ``Options.add_files`` (a voice), ``graph.pbtxt`` (``Options.render_graph``), read back as
   ``ovserve serve --config_path`` reads it, and ``Options.check``: the pipeline it describes built
   on CPU and run once;
5. the staging directory swapped into place, then the ``config.json`` entry added or updated.

A failure at any step leaves the repository as it was. Raises
:class:`~ovserve.export.report.ExportError` for what the user can fix.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from ovserve.export.arguments import check_model_name, check_source, compression_params, default_name
from ovserve.export.conversion import (
    compress_ir,
    compresses,
    convert_ir,
    export_environment,
    finalize_export,
    quantization_config,
)
from ovserve.export.progress import Progress
from ovserve.export.report import stage
from ovserve.export.repository import (
    add_servable,
    check_not_overlapping,
    check_target_free,
    staging_directory,
    swap_into_place,
)
from ovserve.export.source import Source, check_disk, check_tokenizer, resolve_source
from ovserve.export.verification import ovserve_settings
from ovserve.json_types import JsonObject
from ovserve.settings.schema import ModelSettings

# A checkpoint the export reads, with its config.json.
Checkpoint = tuple[Source, JsonObject]


class Options:
    """What one kind of model adds to the export's steps; each hook's default is a transformers model's."""

    # optimum-intel's library for the checkpoint ("diffusers" for an image pipeline).
    library_name: ClassVar[str] = "transformers"

    def read_config(self, source: Source) -> JsonObject:
        """The checkpoint's configuration (a transformers model's config.json)."""
        return source.config()

    def check_tokenizer(self, source: Source) -> None:
        """Refuse a checkpoint without the tokenizer the server needs (one at its root)."""
        check_tokenizer(source)

    def finalize(self, source: Source, staged: Path, task: str) -> None:
        """Complete the converted model with what the server needs besides the IR (the checkpoint's
        own tokenizer and generation files) and check it is there."""
        finalize_export(source, staged, task)

    def check_checkpoint(self, source: Source, config: JsonObject) -> None:
        """Refuse a checkpoint this kind of model cannot be exported from (before its tokenizer is checked)."""

    def other_checkpoints(self, target: Path) -> list[Checkpoint]:
        """The other checkpoints the export reads (a draft, a vocoder), resolved and checked."""
        return []

    def optimum_task(self, source: Source, config: JsonObject, others: list[Checkpoint]) -> str:
        """optimum-intel's export task for the checkpoint (the others checked for it: a draft must be a text model)."""
        raise NotImplementedError

    def model_kwargs(self, others: list[Checkpoint]) -> dict[str, Any] | None:
        """optimum-intel's ``model_kwargs`` for the conversion (SpeechT5's vocoder)."""
        return None

    def more_stage(self) -> str | None:
        """The name of the stage :meth:`convert_more` is (``[export] [5/7] draft model``), if it converts anything."""
        return None

    def convert_more(self, staged: Path, weight_format: str, others: list[Checkpoint]) -> None:
        """Convert what else goes into the model directory (a draft model), in the export environment."""

    def add_files(self, staged: Path) -> None:
        """Copy the files the graph names into the model directory (voices)."""

    def render_graph(self) -> str:
        """The model's ``graph.pbtxt``."""
        raise NotImplementedError

    def check(self, settings: ModelSettings, task: str, source: Source) -> None:
        """Build the pipeline the server builds from ``settings`` and run it once (ExportError if it fails)."""
        raise NotImplementedError


OptionsT = TypeVar("OptionsT", bound=Options)


@dataclass(frozen=True)
class Plan(Generic[OptionsT]):
    """Everything decided from the arguments before any heavy work starts."""

    source: str
    model_name: str
    repository: Path
    config_path: Path
    weight_format: str
    quantization_params: list[str]
    overwrite: bool
    options: OptionsT

    @property
    def model_dir(self) -> Path:
        return self.repository / self.model_name

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, options: OptionsT, *, weight_format: str | None = None, extra: str | None = None
    ) -> Plan[OptionsT]:
        """The shared options (:func:`~ovserve.export.arguments.add_plan_arguments`) resolved and
        checked; ``weight_format`` and ``extra`` replace the arguments' (NPU's rule)."""
        check_source("--source_model", args.source_model)
        repository = args.model_repository_path.expanduser().resolve()
        weight_format = weight_format or args.weight_format
        return cls(
            source=args.source_model,
            model_name=check_model_name(args.model_name or default_name(args.source_model)),
            repository=repository,
            config_path=(args.config_file_path or repository / "config.json").expanduser().resolve(),
            weight_format=weight_format,
            quantization_params=compression_params(weight_format, extra or args.extra_quantization_params),
            overwrite=args.overwrite_models,
            options=options,
        )


# The stages every export reports (``ovserve.export.progress``), in the order :func:`export` runs them.
READING = "reading the source"
CONVERTING = "converting to OpenVINO IR"
TOKENIZER = "tokenizer"
VERIFYING = "verification"
WRITING = "writing the repository"


def compressing(weight_format: str) -> str:
    return f"compressing weights to {weight_format}"


def export_stages(plan: Plan[Any]) -> list[str]:
    """The stages of ``plan``'s export, in order: compression only for int8/int4 weights, and the
    stage its options add (a draft model), if any."""
    more = plan.options.more_stage()
    return [
        READING,
        CONVERTING,
        *([compressing(plan.weight_format)] if compresses(plan.weight_format) else []),
        TOKENIZER,
        *([more] if more else []),
        VERIFYING,
        WRITING,
    ]


def export(plan: Plan[OptionsT]) -> None:
    """The steps in order (see the module doc), each stage reported as it starts and ends. Raises
    ExportError; the repository is unchanged unless every step before the config.json update succeeded."""
    started = time.monotonic()
    options, target = plan.options, plan.model_dir
    check_target_free(target, plan.overwrite, plan.config_path)  # an unusable config.json stops us before the export

    with Progress(export_stages(plan)) as progress:
        progress.begin(READING)
        source = resolve_source(plan.source)
        stage(f"source: {source.describe()}")
        check_not_overlapping(source.local_dir, target)
        config = options.read_config(source)
        options.check_checkpoint(source, config)
        options.check_tokenizer(source)
        others = options.other_checkpoints(target)
        check_disk(target, plan.weight_format, [(source, config), *others])

        # A Hub download (inside main_export) draws huggingface_hub's bars; nncf draws its own.
        progress.begin(CONVERTING, own_bars=source.local_dir is None)
        stage("loading optimum-intel")
        task = options.optimum_task(source, config, others)
        compression = quantization_config(plan.weight_format, plan.quantization_params, source.id)
        with staging_directory(target) as staging:
            staged = staging / "model"
            with export_environment(staging):
                model_kwargs = options.model_kwargs(others)
                conversion = (source, staged, task, plan.weight_format, compression, "model", model_kwargs)
                convert_ir(*conversion, options.library_name)
                if compresses(plan.weight_format):
                    progress.begin(compressing(plan.weight_format), own_bars=True)
                    compress_ir(*conversion, options.library_name)
                progress.begin(TOKENIZER)
                options.finalize(source, staged, task)
                if more := options.more_stage():
                    progress.begin(more, own_bars=True)
                options.convert_more(staged, plan.weight_format, others)
            progress.begin(VERIFYING)
            options.add_files(staged)
            # The graph goes into the staging directory first: the check builds what the server will
            # build from it, and the repository sees neither unless both are good.
            graph_path = staged / "graph.pbtxt"
            graph_path.write_text(options.render_graph(), encoding="utf-8")
            options.check(ovserve_settings(graph_path, plan.model_name), task, source)
            progress.begin(WRITING)
            swap_into_place(staged, target, staging / "replaced")
        stage(f"wrote {target} and its graph.pbtxt")

        updated = add_servable(plan.config_path, plan.model_name, os.path.relpath(target, plan.config_path.parent))
        stage(f"{'updated' if updated else 'added'} '{plan.model_name}' in {plan.config_path}")
    stage(
        f"done in {time.monotonic() - started:.0f} s; serve it with: "
        f"ovserve serve --config_path {plan.config_path} --port 8000"
    )
