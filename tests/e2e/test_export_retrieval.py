"""Export, then serve, for the retrieval tasks: a tiny BERT embedding model through
``scripts/export_model.py embeddings_ov`` and a tiny cross-encoder through ``ovserve export rerank``,
into one repository that ``ovserve serve --config_path`` then serves (real optimum-intel, nncf and
openvino_genai in subprocesses, as a user runs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from ovserve.settings.graph import parse_graph
from tests.conftest import ROOT, Server, start_config_server


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scripts.make_demo_models import (
        TINY_EMBED_SPEC,
        TINY_RERANK_SPEC,
        build_retrieval_checkpoint,
        build_wordpiece_tokenizer,
    )

    root = tmp_path_factory.mktemp("retrieval-export")
    tokenizer = build_wordpiece_tokenizer(root / "tokenizer")
    embed = build_retrieval_checkpoint(TINY_EMBED_SPEC, tokenizer, root / "hf-embed")
    rerank = build_retrieval_checkpoint(TINY_RERANK_SPEC, tokenizer, root / "hf-rerank")
    repo = root / "repo"
    commands = [
        [sys.executable, "scripts/export_model.py", "embeddings_ov", "--source_model", str(embed),
         "--model_name", "embed", "--weight-format", "fp16", "--pooling", "MEAN", "--truncate"],
        [sys.executable, "-m", "ovserve", "export", "rerank", "--source_model", str(rerank),
         "--model_name", "rerank", "--weight-format", "int8", "--max_allowed_chunks", "100"],
    ]  # fmt: skip
    for command in commands:
        result = subprocess.run(
            [*command, "--model_repository_path", str(repo)],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "[export] check:" in result.stdout, result.stdout
    return repo


@pytest.fixture(scope="module")
def exported_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_config_server(tmp_path_factory.mktemp("served"), repository / "config.json", model_name="embed")
    yield server
    server.stop()


def test_export_writes_ovms_graphs_and_config_entries(repository: Path) -> None:
    config = json.loads((repository / "config.json").read_text())
    assert config["mediapipe_config_list"] == [
        {"name": "embed", "base_path": "embed"},
        {"name": "rerank", "base_path": "rerank"},
    ]
    embed = parse_graph(repository / "embed" / "graph.pbtxt").values
    assert embed["task"] == "embeddings" and embed["pooling"] == "MEAN" and embed["truncate"] is True
    assert "EmbeddingsCalculatorOV" in (repository / "embed" / "graph.pbtxt").read_text()
    rerank = parse_graph(repository / "rerank" / "graph.pbtxt").values
    assert rerank["task"] == "rerank" and rerank["max_allowed_chunks"] == 100


def test_exported_models_serve_embeddings_and_rerank(exported_server: Server) -> None:
    embedding = exported_server.client().embeddings.create(model="embed", input=["hello world", "sea"])
    vectors = np.asarray([item.embedding for item in embedding.data])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    rerank = httpx.post(
        f"{exported_server.url}/v3/rerank",
        json={"model": "rerank", "query": "hello", "documents": ["hello there", "the sea", "import os"]},
        timeout=60,
    )
    assert rerank.status_code == 200, rerank.text
    assert sorted(result["index"] for result in rerank.json()["results"]) == [0, 1, 2]
