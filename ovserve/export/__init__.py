"""Export a Hugging Face model into an OVMS model repository: IR, tokenizer, graph.pbtxt, config.json.

``ovserve export text_generation ...`` and ``scripts/export_model.py text_generation ...`` run this
package (``text_generation``: see :mod:`ovserve.export.text`; ``embeddings_ov`` / ``rerank_ov``,
aliases ``embeddings`` / ``rerank``: :mod:`ovserve.export.retrieval`; ``speech2text`` /
``text2speech``: :mod:`ovserve.export.speech`; ``image_generation``: :mod:`ovserve.export.images`).
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

One driver runs every task's steps (``driver``: :func:`~ovserve.export.driver.export`); each task
is a set of options of it (``text``, ``retrieval``, ``speech``, ``images``: their arguments, the plan decided
from them, and what they add to a step). One module a step, each stating what it takes, guarantees
and raises:

- ``arguments``: the command line every task shares (nothing on disk is touched);
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
import traceback

from ovserve.export.driver import Options, Plan, export
from ovserve.export.images import add_image_arguments
from ovserve.export.report import ExportError
from ovserve.export.repository import GraphOptions, add_servable, render_graph
from ovserve.export.retrieval import add_retrieval_arguments
from ovserve.export.speech import add_speech_arguments
from ovserve.export.text import TextOptions, add_text_arguments, plan_from_args

__all__ = [
    "ExportError",
    "GraphOptions",
    "Options",
    "Plan",
    "TextOptions",
    "add_export_arguments",
    "add_servable",
    "build_parser",
    "export",
    "main",
    "plan_from_args",
    "render_graph",
    "run",
]


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Every export subcommand: ``text_generation``, ``embeddings_ov`` (``embeddings``), ``rerank_ov``
    (``rerank``), ``speech2text`` (``speech_to_text``), ``text2speech`` (``text_to_speech``),
    ``image_generation``; each sets ``plan_from_args``, its task's planner."""
    tasks = parser.add_subparsers(dest="task", required=True)
    add_text_arguments(tasks)
    add_retrieval_arguments(tasks)
    add_speech_arguments(tasks)
    add_image_arguments(tasks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="export_model.py",
        description="Export a Hugging Face model to an OVMS model repository that ovserve serves.",
    )
    add_export_arguments(parser)
    return parser


# Notes transformers and diffusers log while they are imported (a torchvision fallback, two
# distributions of the ``optimum`` namespace): nothing a user exporting a model can act on, and they
# would bury the one line an export error is. Read once, at their import; a user's own setting wins.
_QUIET_IMPORTS = {"TRANSFORMERS_VERBOSITY": "error", "DIFFUSERS_VERBOSITY": "error"}


def run(args: argparse.Namespace) -> int:
    """Run a parsed export command; returns the exit status."""
    for name, level in _QUIET_IMPORTS.items():
        os.environ.setdefault(name, level)
    try:
        export(args.plan_from_args(args))
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
