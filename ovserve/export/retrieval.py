"""``embeddings_ov`` / ``rerank_ov`` (aliases ``embeddings`` / ``rerank``): export an embedding model or a
cross-encoder reranker into an OVMS model repository.

Takes OVMS ``export_model.py``'s argument names for those tasks (:func:`add_retrieval_arguments`);
:class:`RetrievalOptions` is what they add to the export's steps and guarantees
(:func:`ovserve.export.driver.export`): conversion with optimum-intel (``feature-extraction`` /
``text-classification``), ``graph.pbtxt`` as OVMS's ``embedding_graph_ov_template`` /
``rerank_graph_ov_template`` render it, and a check that the pipeline it describes embeds (or
scores) a text. Raises :class:`~ovserve.export.report.ExportError`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from ovserve.engine.spec import EngineSpec
from ovserve.export.arguments import add_task_parser, non_negative_int
from ovserve.export.driver import Checkpoint, Options, Plan
from ovserve.export.source import Source
from ovserve.export.verification import check_runs
from ovserve.json_types import JsonObject
from ovserve.settings.graph import POOLING_TYPES
from ovserve.settings.schema import ModelSettings

# Subcommand (OVMS's name), its alias (ovserve's task name), what it exports.
_SUBCOMMANDS = (
    ("embeddings_ov", "embeddings", "an embedding model for /v3/embeddings"),
    ("rerank_ov", "rerank", "a cross-encoder reranker for /v3/rerank"),
)
RETRIEVAL_COMMANDS = {name: task for command, task, _ in _SUBCOMMANDS for name in (command, task)}
# optimum-intel's export task for each.
OPTIMUM_TASKS = {"embeddings": "feature-extraction", "rerank": "text-classification"}


def add_retrieval_arguments(tasks: Any) -> None:
    """``embeddings_ov`` and ``rerank_ov`` under the export command's subparsers ``tasks``."""
    for command, alias, what in _SUBCOMMANDS:
        parser = add_task_parser(tasks, command, what, plan_from_args, alias=alias)
        parser.add_argument("--num_streams", type=non_negative_int, default=0, help="plugin_config NUM_STREAMS")
        if alias == "embeddings":
            parser.add_argument(
                "--skip_normalize", dest="normalize", action="store_false", help="do not L2-normalise embeddings"
            )
            parser.add_argument("--pooling", choices=POOLING_TYPES, help="pooling (default: CLS, as OVMS)")
            parser.add_argument("--truncate", action="store_true", help="cut inputs over the model's limit")
        else:
            parser.add_argument("--max_allowed_chunks", type=non_negative_int, help="most documents per request")


@dataclass(frozen=True)
class RetrievalOptions(Options):
    """An embeddings or rerank model's part of the plan: its graph's options."""

    task: str  # "embeddings" or "rerank"
    target_device: str
    plugin_config: JsonObject
    normalize: bool = True
    pooling: str | None = None
    truncate: bool = False
    max_allowed_chunks: int | None = None

    def optimum_task(self, source: Source, config: JsonObject, others: list[Checkpoint]) -> str:
        return OPTIMUM_TASKS[self.task]

    def render_graph(self) -> str:
        """graph.pbtxt as OVMS's embeddings_ov / rerank_ov templates render it (plus the options they lack)."""
        if self.task == "embeddings":
            lines = ['models_path: "./",', f"normalize_embeddings: {'true' if self.normalize else 'false'},"]
            if self.pooling:
                lines.append(f"pooling: {self.pooling},")
            if self.truncate:
                lines.append("truncate: true,")
            head = ("EmbeddingsExecutor", "EMBEDDINGS_NODE_RESOURCES:embeddings_servable", "EmbeddingsCalculatorOV")
        else:
            lines = ['models_path: "./",']
            if self.max_allowed_chunks:
                lines.append(f"max_allowed_chunks: {self.max_allowed_chunks},")
            head = ("RerankExecutor", "RERANK_NODE_RESOURCES:rerank_servable", "RerankCalculatorOV")
        if self.plugin_config:
            lines.append(f"plugin_config: '{json.dumps(self.plugin_config)}',")
        lines.append(f'target_device: "{self.target_device}"')
        name, side_packet, calculator = head
        options = "\n".join(" " * 6 + line for line in lines)
        return (
            '\ninput_stream: "REQUEST_PAYLOAD:input"\noutput_stream: "RESPONSE_PAYLOAD:output"\nnode {\n'
            f'  name: "{name}"\n  input_side_packet: "{side_packet}"\n  calculator: "{calculator}"\n'
            '  input_stream: "REQUEST_PAYLOAD:input"\n  output_stream: "RESPONSE_PAYLOAD:output"\n'
            f"  node_options: {{\n    [type.googleapis.com / mediapipe.{calculator}Options]: {{\n{options}\n"
            "    }\n  }\n}\n"
        )

    def check(self, settings: ModelSettings, task: str, source: Source) -> None:
        """Build the pipeline the server builds from the graph (on CPU) and embed or score one text."""

        def run(spec: EngineSpec) -> str:
            from ovserve.engine.pipelines import build_pipeline

            pipe = build_pipeline(spec)
            if self.task == "embeddings":
                return f"a {len(pipe.embed(['Hello'])[0])}-dimensional embedding"
            return f"relevance {pipe.score('Hello', ['Hello there'])[0]:.3f}"

        check_runs(settings, self.task, run)


def plan_from_args(args: argparse.Namespace) -> Plan[RetrievalOptions]:
    """Defaults resolved, impossible combinations refused; nothing on disk is touched."""
    options = RetrievalOptions(
        task=RETRIEVAL_COMMANDS[args.task],
        target_device=args.target_device,
        plugin_config={"NUM_STREAMS": str(args.num_streams)} if args.num_streams else {},
        normalize=getattr(args, "normalize", True),
        pooling=getattr(args, "pooling", None),
        truncate=getattr(args, "truncate", False),
        max_allowed_chunks=getattr(args, "max_allowed_chunks", None),
    )
    return Plan.from_args(args, options)
