"""Export a Hugging Face model into an OVMS model repository: IR, tokenizer, graph.pbtxt, config.json.

``ovserve export text_generation ...`` and ``scripts/export_model.py text_generation ...`` run this
package (``embeddings_ov`` / ``rerank_ov``, aliases ``embeddings`` / ``rerank``: see
:mod:`ovserve.export.retrieval`; ``speech2text`` / ``text2speech``: see :mod:`ovserve.export.speech`).
It takes OVMS's ``export_model.py`` argument names and writes what that script writes, so the
repository serves unchanged with ``ovserve serve --config_path`` or with OVMS::

    MODEL_REPOSITORY/config.json             {"mediapipe_config_list": [{"name", "base_path"}], ...}
    MODEL_REPOSITORY/<model_name>/           IR + openvino_{de,}tokenizer + HF configs + graph.pbtxt
    MODEL_REPOSITORY/<model_name>/<draft>/   the draft model (speculative decoding), if any

The steps, each printed as it starts: resolve the source (local directory, or Hub id online or
from the local cache), check it has a tokenizer and that the disk can hold the result, detect the
task from its config (text or image-text-to-text), export with optimum-intel's Python API in a
staging directory next to the target (``main_export`` then nncf weight compression, built from
optimum-cli's own option parser so ``--extra_quantization_params`` mean what they mean there),
restore the checkpoint's tokenizer/generation files, write ``graph.pbtxt`` there and check that
ovserve accepts it, build the pipeline it describes in openvino_genai and generate a token, then
swap the staging directory into place and add or update the ``config.json`` entry. A failure at
any step leaves the repository as it was.

Differences from OVMS's script, on purpose:

- an existing model directory is replaced only with ``--overwrite_models`` (OVMS skips the export
  and rewrites the graph); without it the export is refused and nothing changes;
- for a local source directory the default ``--model_name`` (and the draft's sub-directory name)
  is the directory's name, not the whole path (OVMS would nest the export under the path);
  ``--draft_model_name``, when given, names the draft's sub-directory;
- ``--cache_size 0`` is written as 0 (grow on demand); OVMS's template turns 0 into 10;
- the newer ``tool_parser``/``reasoning_parser`` fields are written, not ``response_parser``, and
  no tuned chat template is downloaded for a tool parser (the model's own template is kept);
- ``config.json`` defaults to ``MODEL_REPOSITORY/config.json`` and is replaced atomically.

torch, transformers and optimum-intel are export-time extras (``pip install ovserve[export]``):
they are imported only once the cheap checks have passed.

One module a step, each stating what it takes, guarantees and raises; :func:`run` calls them in
order through :func:`export_text_generation`:

- ``arguments``: the command line and the plan decided from it (nothing on disk is touched);
- ``source``: the checkpoint (directory, Hub, Hub cache), its tokenizer, the disk it needs;
- ``conversion``: optimum-intel's ``main_export`` and nncf compression into a staging directory;
- ``verification``: the graph as ovserve reads it, the pipeline it builds, one generated token;
- ``repository``: graph.pbtxt, the staging directory and its swap into place, config.json;
- ``report``: the ``[export]`` progress lines and ``ExportError`` (one line, exit status 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

from ovserve.export import arguments
from ovserve.export.arguments import ExportPlan, plan_from_args
from ovserve.export.conversion import (
    TEXT_TASK,
    detect_task,
    export_environment,
    export_ir,
    finalize_export,
    quantization_config,
)
from ovserve.export.report import ExportError, stage
from ovserve.export.repository import (
    GraphOptions,
    add_servable,
    check_not_overlapping,
    check_target_free,
    render_graph,
    staging_directory,
    swap_into_place,
    write_graph,
)
from ovserve.export.retrieval import RETRIEVAL_COMMANDS, add_retrieval_arguments, export_retrieval
from ovserve.export.retrieval import plan_from_args as retrieval_plan
from ovserve.export.source import Source, check_disk, check_tokenizer, resolve_source
from ovserve.export.speech import SPEECH_COMMANDS, add_speech_arguments, export_speech
from ovserve.export.speech import plan_from_args as speech_plan
from ovserve.export.verification import check_loads, ovserve_settings
from ovserve.json_types import JsonObject

__all__ = [
    "ExportError",
    "ExportPlan",
    "GraphOptions",
    "add_export_arguments",
    "add_servable",
    "build_parser",
    "export_text_generation",
    "main",
    "plan_from_args",
    "render_graph",
    "run",
]


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Every export subcommand: ``text_generation``, ``embeddings_ov`` (``embeddings``), ``rerank_ov``
    (``rerank``), ``speech2text`` (``speech_to_text``), ``text2speech`` (``text_to_speech``)."""
    tasks = arguments.add_export_arguments(parser)
    add_retrieval_arguments(tasks)
    add_speech_arguments(tasks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="export_model.py",
        description="Export a Hugging Face model to an OVMS model repository that ovserve serves.",
    )
    add_export_arguments(parser)
    return parser


def export_text_generation(plan: ExportPlan) -> None:
    """The steps in order: sources, cheap checks, conversion into a staging directory, graph,
    verification, swap into place, config.json. Raises ExportError; the repository is unchanged
    unless every step before the config.json update succeeded."""
    started = time.monotonic()
    target = plan.model_dir
    check_target_free(target, plan.overwrite, plan.config_path)  # an unusable config.json stops us before the export

    source = resolve_source(plan.source)
    stage(f"source: {source.describe()}")
    check_not_overlapping(source.local_dir, target)
    config = source.config()
    check_tokenizer(source)
    draft: tuple[Source, JsonObject] | None = None
    if plan.draft_source:
        draft_source = resolve_source(plan.draft_source)
        stage(f"draft source: {draft_source.describe()}")
        check_not_overlapping(draft_source.local_dir, target)
        draft = (draft_source, draft_source.config())
        check_tokenizer(draft_source)
    check_disk(target, plan.weight_format, [(source, config), *([draft] if draft else [])])

    stage("loading optimum-intel")
    task = detect_task(source, config)
    stage(f"model type {config.get('model_type')} -> task {task}")
    if draft is not None and detect_task(*draft) != TEXT_TASK:
        raise ExportError(f"the draft model must be a text model; {draft[0].describe()} is a VLM")
    compression = quantization_config(plan.weight_format, plan.quantization_params, source.id)
    # OVMS exports the draft at the model's weight format, without the extra parameters.
    draft_compression = quantization_config(plan.weight_format, [], draft[0].id) if draft else None

    with staging_directory(target) as staging:
        staged = staging / "model"
        with export_environment(staging):
            export_ir(source, staged, task, plan.weight_format, compression, "model")
            finalize_export(source, staged, task)
            if draft is not None and plan.graph.draft_dir_name:
                draft_dir = staged / plan.graph.draft_dir_name
                export_ir(draft[0], draft_dir, TEXT_TASK, plan.weight_format, draft_compression, "draft")
                finalize_export(draft[0], draft_dir, TEXT_TASK)
        # The graph goes into the staging directory first: the check builds what the server will
        # build from it, and the repository sees neither unless both are good.
        graph_path = write_graph(staged, plan.graph)
        check_loads(ovserve_settings(graph_path, plan.model_name), task, source)

        swap_into_place(staged, target, staging / "replaced")
    stage(f"wrote {target} and its graph.pbtxt")

    base_path = os.path.relpath(target, plan.config_path.parent)
    updated = add_servable(plan.config_path, plan.model_name, base_path)
    stage(f"{'updated' if updated else 'added'} '{plan.model_name}' in {plan.config_path}")
    stage(
        f"done in {time.monotonic() - started:.0f} s; serve it with: "
        f"ovserve serve --config_path {plan.config_path} --port 8000"
    )


def run(args: argparse.Namespace) -> int:
    """Run a parsed export command; returns the exit status."""
    try:
        if args.task in RETRIEVAL_COMMANDS:
            export_retrieval(retrieval_plan(args))
        elif args.task in SPEECH_COMMANDS:
            export_speech(speech_plan(args))
        else:
            export_text_generation(plan_from_args(args))
    except ExportError as exc:
        print(f"ovserve export: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("ovserve export: interrupted; the repository was left as it was", file=sys.stderr)
        return 130
    except Exception as exc:
        # Not a mistake the user can fix from a message: keep the traceback for the bug report.
        traceback.print_exc()
        print(f"ovserve export: export failed ({type(exc).__name__}: {exc}); the repository was left as it was",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
