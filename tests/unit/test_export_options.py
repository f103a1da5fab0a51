"""`ovserve export` arguments -> graph.pbtxt and config.json as OVMS's export_model.py writes them,
and the argument mistakes refused before anything is read or written (no model needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ovserve.export import Plan, TextOptions, add_servable, build_parser, main, plan_from_args, render_graph
from ovserve.export.retrieval import RetrievalOptions
from ovserve.export.speech import SpeechOptions
from tests.ovms import ovms_graph


def plan(*args: str):
    return plan_from_args(build_parser().parse_args(["text_generation", "--source_model", "Qwen/Qwen3-8B", *args]))


def test_npu_target_means_int4_symmetric_channel_wise_and_an_npu_graph() -> None:
    npu = plan("--target_device", "NPU", "--max_prompt_len", "1024", "--ov_cache_dir", "/var/cache/ov",
               "--pipeline_type", "LM", "--max_num_seqs", "4", "--tool_parser", "qwen3")  # fmt: skip
    assert npu.weight_format == "int4"
    assert npu.quantization_params == ["--sym", "--ratio", "1.0", "--group-size", "-1"]
    assert npu.model_dir == Path("models").resolve() / "Qwen" / "Qwen3-8B"
    assert render_graph(npu.options.graph) == ovms_graph(
        "          pipeline_type: LM,\n"
        '          models_path: "./",\n'
        """          plugin_config: '{"MAX_PROMPT_LEN": 1024, "CACHE_DIR": "/var/cache/ov"}',\n"""
        "          enable_prefix_caching:  true,\n"
        "          cache_size: 10,\n"
        "          max_num_seqs: 4,\n"
        '          device: "NPU",\n'
        '          tool_parser: "qwen3",\n'
    )


def test_extra_quantization_params_replace_the_npu_defaults() -> None:
    npu = plan("--target_device", "NPU", "--extra_quantization_params", "--sym --group-size 128 --awq")
    assert npu.quantization_params == ["--sym", "--group-size", "128", "--awq"]


def test_prompt_lookup_graph_and_cache_size_zero_kept() -> None:
    # cache_size 0 (grow on demand) is written as 0; OVMS's template would turn it into 10.
    lookup = plan("--prompt_lookup_decoding", "--kv_cache_precision", "u8", "--cache_size", "0",
                  "--max_num_batched_tokens", "1024", "--disable_dynamic_split_fuse")  # fmt: skip
    assert render_graph(lookup.options.graph) == ovms_graph(
        '          models_path: "./",\n'
        """          plugin_config: '{"KV_CACHE_PRECISION": "u8", "prompt_lookup": true}',\n"""
        "          enable_prefix_caching:  true,\n"
        "          cache_size: 0,\n"
        "          max_num_batched_tokens: 1024,\n"
        "          dynamic_split_fuse: false, \n"
        "          max_num_seqs: 256,\n"
        '          device: "CPU",\n'
    )


def test_draft_directory_is_named_after_its_source_or_draft_model_name(tmp_path: Path) -> None:
    assert plan("--draft_source_model", "Qwen/Qwen3-0.6B").options.graph.draft_dir_name == "Qwen-Qwen3-0.6B"
    local = tmp_path / "checkpoints" / "my-draft"
    local.mkdir(parents=True)
    assert plan("--draft_source_model", str(local)).options.graph.draft_dir_name == "my-draft"
    named = plan("--draft_source_model", str(local), "--draft_model_name", "org/draft")
    assert named.options.graph.draft_dir_name == "org-draft"


def test_config_entry_is_added_then_updated_in_place_keeping_the_rest(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_config_list": [{"config": {"name": "m", "base_path": "m"}}]}))
    assert add_servable(config, "Qwen/Qwen3-8B", "Qwen/Qwen3-8B") is False
    assert add_servable(config, "other", "other") is False
    assert add_servable(config, "Qwen/Qwen3-8B", "elsewhere/Qwen3-8B") is True
    assert config.read_text() == json.dumps(
        {
            "model_config_list": [{"config": {"name": "m", "base_path": "m"}}],
            "mediapipe_config_list": [
                {"name": "Qwen/Qwen3-8B", "base_path": "elsewhere/Qwen3-8B"},
                {"name": "other", "base_path": "other"},
            ],
        },
        indent=4,
    )
    assert not [path.name for path in tmp_path.iterdir() if path.name != "config.json"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max_prompt_len", "512"], "--max_prompt_len is an NPU setting"),
        (["--target_device", "NPU", "--max_prompt_len", "0"], "--max_prompt_len must be a positive integer"),
        (["--draft_source_model", "Qwen/Qwen3-0.6B", "--prompt_lookup_decoding"], "exclude each other"),
        (["--draft_source_model", "Qwen/Qwen3-0.6B", "--pipeline_type", "LM"], "continuous batching pipeline"),
        (["--pipeline_type", "VLM"], "use --pipeline_type VLM_CB or AUTO"),
        (["--weight-format", "fp16", "--extra_quantization_params", "--sym --ratio 0.8"], "int8 and int4 weights"),
        (["--extra_quantization_params", "--task text-generation"], "--task is not a weight compression option"),
        (["--extra_quantization_params", "--group-size big"], "argument --group-size: invalid int value"),
        (["--model_name", "../outside"], "must be a relative name"),
        (["--source_model", "./no-such-checkpoint"], "./no-such-checkpoint: no such directory"),
        (["--ov_cache_dir", "/it's"], "may not contain a single quote"),
    ],
)
def test_argument_mistakes_are_one_line_errors_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    repository = tmp_path / "models"
    argv = ["text_generation", "--source_model", "Qwen/Qwen3-8B", "--model_repository_path", str(repository), *args]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ovserve export: ") and message in lines[0], lines
    assert not repository.exists()


def test_unreadable_config_json_is_refused_before_exporting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repository = tmp_path / "models"
    repository.mkdir()
    (repository / "config.json").write_text('{"mediapipe_config_list": [')
    argv = ["text_generation", "--source_model", "Qwen/Qwen3-8B", "--model_repository_path", str(repository)]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert "config.json is not a readable JSON config" in error and "\n" not in error
    assert [path.name for path in repository.iterdir()] == ["config.json"]


def test_exporting_a_checkpoint_over_itself_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tmp_path / "models" / "my-model"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text('{"model_type": "qwen2"}')
    argv = ["text_generation", "--source_model", str(checkpoint), "--model_repository_path", str(tmp_path / "models"),
            "--overwrite_models"]  # fmt: skip
    assert main(argv) == 2
    assert "overlap" in capsys.readouterr().err
    assert [path.name for path in checkpoint.iterdir()] == ["config.json"]


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["text_generation"], TextOptions),
        (["embeddings_ov"], RetrievalOptions),
        (["rerank"], RetrievalOptions),
        (["speech2text"], SpeechOptions),
        (["text_to_speech", "--vocoder", "microsoft/speecht5_hifigan"], SpeechOptions),
    ],
)
def test_every_task_is_planned_as_options_of_the_one_export_driver(argv: list[str], options: type) -> None:
    args = build_parser().parse_args([*argv, "--source_model", "org/model", "--model_name", "m"])
    plan = args.plan_from_args(args)
    assert isinstance(plan, Plan) and isinstance(plan.options, options)
    assert plan.model_dir == Path("models").resolve() / "m"
    assert plan.config_path == Path("models").resolve() / "config.json"
