"""Every class of deployment-file mistake stops startup with the file, line and field named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from ovserve.engine.spec import PipelineKind
from ovserve.settings.graph import GraphError
from ovserve.settings.schema import models_from_config
from tests.conftest import ROOT


def graph(options: str) -> str:
    return (
        'input_stream: "HTTP_REQUEST_PAYLOAD:input"\n'
        "node: {\n"
        '  calculator: "HttpLLMCalculator"\n'
        "  node_options: {\n"
        "    [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {\n"
        f"{options}\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def repository(tmp_path: Path, tiny_llm: Path, options: str, config: dict | None = None) -> Path:
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "graph.pbtxt").write_text(graph(options.replace("TINY", str(tiny_llm))))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config or {"model_config_list": [{"config": {"name": "m", "base_path": "m"}}]}))
    return path


def load_error(config: Path) -> str:
    with pytest.raises((GraphError, ValidationError)) as excinfo:
        models_from_config(config)
    return str(excinfo.value)


def test_shipped_graphs_load_with_their_pipeline_kinds(
    demo_models: dict[str, Path], retrieval_models: dict[str, Path]
) -> None:
    kinds = {model.name: model.pipeline_kind for model in models_from_config(ROOT / "graphs" / "config.json")}
    assert kinds == {
        "tiny-llm": PipelineKind.CONTINUOUS_BATCHING,
        "tiny-llm-speculative": PipelineKind.SPECULATIVE,
        "tiny-llm-prompt-lookup": PipelineKind.PROMPT_LOOKUP,
        "tiny-llm-stateful": PipelineKind.STATEFUL,
        "tiny-vlm": PipelineKind.CONTINUOUS_BATCHING,
        "tiny-embed": PipelineKind.EMBEDDINGS,
        "tiny-rerank": PipelineKind.RERANK,
    }


def retrieval_graph(options_type: str, options: str) -> str:
    """An embeddings or rerank graph as OVMS's export_model.py writes it."""
    return (
        'input_stream: "REQUEST_PAYLOAD:input"\n'
        "node {\n"
        '  calculator: "EmbeddingsCalculatorOV"\n'
        "  node_options: {\n"
        f"    [type.googleapis.com / mediapipe.{options_type}]: {{\n"
        f"{options}\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def retrieval_repository(tmp_path: Path, options_type: str, options: str, model: Path) -> Path:
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "graph.pbtxt").write_text(retrieval_graph(options_type, options.replace("MODEL", str(model))))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mediapipe_config_list": [{"name": "r", "base_path": "r"}]}))
    return path


def test_embeddings_graph_options_become_settings(retrieval_models: dict[str, Path], tmp_path: Path) -> None:
    options = (
        'models_path: "MODEL", normalize_embeddings: false, pooling: LAST, truncate: true, '
        'target_device: "CPU", max_position_embeddings: 64, plugin_config: \'{"NUM_STREAMS": "1"}\''
    )
    config = retrieval_repository(tmp_path, "EmbeddingsCalculatorOVOptions", options, retrieval_models["tiny-embed"])
    (model,) = models_from_config(config)
    assert model.task == "embeddings" and model.pipeline_kind is PipelineKind.EMBEDDINGS
    assert model.retrieval.normalize_embeddings is False
    assert model.retrieval.pooling == "LAST" and model.retrieval.truncate is True
    assert model.plugin_config == {"NUM_STREAMS": "1"}
    spec = model.engine_spec()
    assert spec.max_input_tokens == 64 and spec.kind is PipelineKind.EMBEDDINGS


def test_embeddings_graph_defaults_follow_ovms(retrieval_models: dict[str, Path], tmp_path: Path) -> None:
    config = retrieval_repository(
        tmp_path, "EmbeddingsCalculatorOVOptions", 'models_path: "MODEL"', retrieval_models["tiny-embed"]
    )
    (model,) = models_from_config(config)
    assert model.retrieval.normalize_embeddings is True and model.retrieval.pooling == "CLS"
    assert model.retrieval.truncate is False
    assert model.engine_spec().max_input_tokens == 512  # config.json's max_position_embeddings


def test_rerank_graph_options_become_settings(retrieval_models: dict[str, Path], tmp_path: Path) -> None:
    options = 'models_path: "MODEL", max_allowed_chunks: 50, target_device: "CPU"'
    config = retrieval_repository(tmp_path, "RerankCalculatorOVOptions", options, retrieval_models["tiny-rerank"])
    (model,) = models_from_config(config)
    assert model.pipeline_kind is PipelineKind.RERANK and model.retrieval.max_allowed_chunks == 50


@pytest.mark.parametrize(
    ("options_type", "options", "words"),
    [
        ("EmbeddingsCalculatorOVOptions", 'models_path: "MODEL", pooling: AVERAGE', "AVERAGE"),
        ("EmbeddingsCalculatorOVOptions", 'models_path: "MODEL", normalise: true', "normalise"),
        ("RerankCalculatorOVOptions", 'models_path: "MODEL", pooling: CLS', "pooling"),
        ("EmbeddingsCalculatorOVOptions", "truncate: true", "models_path"),
        ("EmbeddingsCalculatorOVOptions", 'models_path: "MODEL", max_allowed_chunks: 0', "max_allowed_chunks"),
    ],
)
def test_retrieval_graph_mistakes_name_the_option(
    retrieval_models: dict[str, Path], tmp_path: Path, options_type: str, options: str, words: str
) -> None:
    config = retrieval_repository(tmp_path, options_type, options, retrieval_models["tiny-embed"])
    message = load_error(config)
    assert "graph.pbtxt" in message and words in message, message


def test_defaults_follow_ovms(tiny_llm: Path, tmp_path: Path) -> None:
    (model,) = models_from_config(repository(tmp_path, tiny_llm, 'models_path: "TINY"'))
    assert model.scheduler.max_num_batched_tokens == 256
    assert model.scheduler.max_num_seqs == 256
    assert model.scheduler.dynamic_split_fuse is True
    assert model.scheduler.enable_prefix_caching is False
    assert model.best_of_limit == 20 and model.max_tokens_limit is None
    assert model.pipeline_kind is PipelineKind.CONTINUOUS_BATCHING


def test_npu_device_selects_the_stateful_pipeline(tiny_llm: Path, tmp_path: Path) -> None:
    (model,) = models_from_config(repository(tmp_path, tiny_llm, 'models_path: "TINY" device: "NPU"'))
    assert model.pipeline_kind is PipelineKind.STATEFUL


def test_misspelled_option(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"\n cache_sizee: 3'))
    assert "graph.pbtxt:7" in message and "cache_sizee" in message


def test_missing_model_directory(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "./nowhere"'))
    assert "graph.pbtxt:6" in message and "models_path" in message and "nowhere" in message


def test_draft_options_without_draft_model(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"\n draft_max_num_seqs: 4'))
    assert "graph.pbtxt:7" in message and "draft_max_num_seqs" in message and "draft_models_path" in message


def test_malformed_graph(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"\n max_num_seqs: {'))
    assert "graph.pbtxt:7" in message


def test_wrong_value_type(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"\n max_num_seqs: "many"'))
    assert "graph.pbtxt:7" in message and "max_num_seqs" in message


def test_plugin_config_not_json(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, "models_path: \"TINY\"\n plugin_config: '{oops'"))
    assert "graph.pbtxt:7" in message and "plugin_config" in message


def test_unsupported_ovms_option(tiny_llm: Path, tmp_path: Path) -> None:
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"\n draft_eagle3_mode: true'))
    assert "graph.pbtxt:7" in message and "draft_eagle3_mode" in message


def test_draft_and_prompt_lookup_together(tiny_llm: Path, tmp_path: Path) -> None:
    options = 'models_path: "TINY"\n draft_models_path: "TINY"\n plugin_config: \'{"prompt_lookup": true}\''
    message = load_error(repository(tmp_path, tiny_llm, options))
    assert "graph.pbtxt" in message and "draft_models_path" in message and "prompt_lookup" in message


def test_graph_without_llm_node(tiny_llm: Path, tmp_path: Path) -> None:
    config = repository(tmp_path, tiny_llm, 'models_path: "TINY"')
    (tmp_path / "m" / "graph.pbtxt").write_text('node: { calculator: "Other" }\n')
    assert "LLMCalculatorOptions" in load_error(config)


def test_config_not_json(tiny_llm: Path, tmp_path: Path) -> None:
    config = repository(tmp_path, tiny_llm, 'models_path: "TINY"')
    config.write_text('{\n  "model_config_list": [\n    {"config": {"name": "m",}}\n  ]\n}')
    message = load_error(config)
    assert "config.json:3" in message


def test_config_entry_without_base_path(tiny_llm: Path, tmp_path: Path) -> None:
    config = repository(tmp_path, tiny_llm, 'models_path: "TINY"', {"model_config_list": [{"config": {"name": "m"}}]})
    message = load_error(config)
    assert "config.json" in message and "base_path" in message and "'m'" in message


def test_config_entry_unknown_field(tiny_llm: Path, tmp_path: Path) -> None:
    entry = {"name": "m", "base_path": "m", "target_devce": "CPU"}
    message = load_error(
        repository(tmp_path, tiny_llm, 'models_path: "TINY"', {"model_config_list": [{"config": entry}]})
    )
    assert "config.json" in message and "target_devce" in message


def test_config_graph_missing(tiny_llm: Path, tmp_path: Path) -> None:
    entry = {"name": "m", "base_path": "elsewhere"}
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"', {"mediapipe_config_list": [entry]}))
    assert "config.json" in message and "base_path" in message and "elsewhere" in message


def test_duplicate_names(tiny_llm: Path, tmp_path: Path) -> None:
    entries = [{"config": {"name": "m", "base_path": "m"}}, {"config": {"name": "m", "base_path": "m"}}]
    message = load_error(repository(tmp_path, tiny_llm, 'models_path: "TINY"', {"model_config_list": entries}))
    assert "declared twice" in message


def test_cli_reports_a_config_mistake_without_a_traceback(tiny_llm: Path, tmp_path: Path) -> None:
    config = repository(tmp_path, tiny_llm, 'models_path: "TINY"\n cache_sizee: 3')
    result = subprocess.run(
        [sys.executable, "-m", "ovserve", "serve", "--config_path", str(config)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2
    assert "graph.pbtxt:7" in result.stderr and "cache_sizee" in result.stderr
    assert "Traceback" not in result.stderr


def test_scheduler_that_cannot_step(tiny_llm: Path, tmp_path: Path) -> None:
    options = 'models_path: "TINY"\n dynamic_split_fuse: false\n max_num_batched_tokens: 64'
    message = load_error(repository(tmp_path, tiny_llm, options))
    assert "graph.pbtxt" in message and "scheduler" in message
    assert "max_num_batched_tokens (64)" in message and "max_num_seqs (256)" in message
