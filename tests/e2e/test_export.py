"""Export, then serve: tiny Hugging Face checkpoints through scripts/export_model.py and `ovserve export`.

The checkpoints are random Qwen2 and LLaVA models built offline with make_demo_models' helpers; the exports
run the real optimum-intel, nncf and openvino_genai in a subprocess, as a user would run them, and
the written repository is served by a real `ovserve serve --config_path` and queried with the
openai SDK.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openvino_genai
import pytest

from tests import images
from tests.conftest import ROOT, Server, start_config_server
from tests.ovms import OVMS_EXPORTED_GRAPH, ovms_graph

MESSAGES = [{"role": "user", "content": "hello there"}]
# Files a served model directory needs besides graph.pbtxt (IR, tokenizer IRs, HF configs).
SERVED_FILES = ("openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml", "openvino_detokenizer.xml",
                "generation_config.json", "tokenizer_config.json", "config.json")  # fmt: skip

# What OVMS's export_model.py renders for the int8 command below (same flags, same spacing, including
# its "enable_prefix_caching:  true" and the space after "dynamic_split_fuse: false,").
INT8_GRAPH_OPTIONS = (
    "          pipeline_type: LM_CB,\n"
    '          models_path: "./",\n'
    "          plugin_config: '{}',\n"
    "          enable_prefix_caching:  true,\n"
    "          cache_size: 1,\n"
    "          max_num_batched_tokens: 512,\n"
    "          dynamic_split_fuse: false, \n"
    "          max_num_seqs: 8,\n"
    '          device: "CPU",\n'
    '          reasoning_parser: "qwen3",\n'
    '          tool_parser: "hermes3",\n'
)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Hugging Face checkpoints of tiny-llm, tiny-draft and tiny-vlm (what a user downloads from the Hub)."""
    from scripts.make_demo_models import (
        TINY_DRAFT_SPEC,
        TINY_LLM_SPEC,
        TINY_VLM_SPEC,
        _build_hf_model,
        build_tokenizer,
        build_vlm_tokenizer,
    )

    root = tmp_path_factory.mktemp("hf")
    tokenizer = build_tokenizer(root / "tokenizer")
    for spec in (TINY_LLM_SPEC, TINY_DRAFT_SPEC):
        _build_hf_model(spec, tokenizer, root / spec.name)
    _build_hf_model(TINY_VLM_SPEC, build_vlm_tokenizer(tokenizer, root / "vlm-tokenizer"), root / "tiny-vlm")
    return {name: root / name for name in ("tiny-llm", "tiny-draft", "tiny-vlm")}


def export_command(*args: str, script: bool = True) -> list[str]:
    command = [sys.executable, "scripts/export_model.py"] if script else [sys.executable, "-m", "ovserve", "export"]
    return [*command, "text_generation", *args]


def start_export(*args: str, script: bool = True, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        export_command(*args, script=script),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_export(*args: str, script: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return finish(start_export(*args, script=script, env=env))


def succeeded(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The export's progress lines, after checking it succeeded."""
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if line.startswith("[export]")]


STAGE_LINE = re.compile(r"\[export\] \[\d+/\d+\] ")


def progress_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The export's stage lines (``[export] [i/N] ...``, its details left out), times as T; off a
    terminal they are plain lines: no carriage return, no escape sequence."""
    assert "\r" not in result.stdout and "\x1b" not in result.stdout, result.stdout
    lines = [line for line in result.stdout.splitlines() if STAGE_LINE.match(line)]
    return [re.sub(r" \d+\.\d s$", " T", line) for line in lines]


def expected_progress(*names: str) -> list[str]:
    n = len(names)
    return [
        line
        for i, name in enumerate(names, 1)
        for line in (f"[export] [{i}/{n}] {name} ...", f"[export] [{i}/{n}] done in T")
    ]


def within_stage(stages: list[str], detail: str, stage: str) -> bool:
    """Whether the detail line comes between the start and the end of the named stage."""
    start = next(i for i, line in enumerate(stages) if STAGE_LINE.match(line) and line.endswith(f"] {stage} ..."))
    end = next(i for i, line in enumerate(stages) if i > start and STAGE_LINE.match(line))
    return any(detail in line for line in stages[start + 1 : end])


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The user sees exit status 2 and a single readable line, never a traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ovserve export: "), result.stderr
    return lines[0]


def snapshot(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every file's size and mtime, and which directories exist (their mtimes move with any staging)."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns) if path.is_file() else None
        for path in root.rglob("*")
    }


@dataclass
class Exports:
    fp16: Path  # repository written by scripts/export_model.py: fp16 model + draft, and an int8 VLM
    fp16_result: subprocess.CompletedProcess[str]
    vlm_result: subprocess.CompletedProcess[str]
    int8: Path  # repository whose older model `ovserve export --overwrite_models` replaced at int8
    int8_result: subprocess.CompletedProcess[str]
    refused: subprocess.CompletedProcess[str]  # the same int8 command without --overwrite_models
    before_refusal: dict[str, tuple[int, int] | None]
    after_refusal: dict[str, tuple[int, int] | None]
    failed: Path  # repository whose older model an export of a corrupt checkpoint tried to replace
    failed_result: subprocess.CompletedProcess[str]
    before_failure: dict[str, tuple[int, int] | None]


def int8_command(source: str, repository: Path) -> tuple[str, ...]:
    return (
        "--source_model", source, "--model_name", "org/tiny-chat",
        "--model_repository_path", str(repository), "--weight-format", "int8", "--pipeline_type", "LM_CB",
        "--enable_prefix_caching", "--cache_size", "1", "--max_num_batched_tokens", "512",
        "--disable_dynamic_split_fuse", "--max_num_seqs", "8",
        "--tool_parser", "hermes3", "--reasoning_parser", "qwen3",
    )  # fmt: skip


@pytest.fixture(scope="module")
def exports(
    checkpoints: dict[str, Path], demo_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Exports:
    """The exports run at once (each spends most of its time importing torch and optimum)."""
    root = tmp_path_factory.mktemp("export")
    fp16 = root / "fp16"
    int8 = earlier_export(root / "int8", demo_models)
    failed = earlier_export(root / "failed", demo_models)
    corrupt = root / "corrupt-checkpoint"
    shutil.copytree(checkpoints["tiny-llm"], corrupt)
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 4096)  # a download cut short

    # The int8 export reads "acme/tiny-chat" from a Hugging Face cache, as after `hf download` online.
    hub_cache = hub_cache_with(root / "hub-cache", "acme/tiny-chat", checkpoints["tiny-llm"])
    before = snapshot(int8)
    refused = run_export(*int8_command("acme/tiny-chat", int8), script=False, env=hub_cache)
    after = snapshot(int8)
    before_failure = snapshot(failed)
    fp16_export = start_export(
        "--source_model", str(checkpoints["tiny-llm"]), "--model_name", "org/tiny-chat",
        "--draft_source_model", str(checkpoints["tiny-draft"]), "--weight-format", "fp16",
        "--kv_cache_precision", "u8", "--model_repository_path", str(fp16),
    )  # fmt: skip
    # Into the same repository at the same time: both entries must end up in its config.json.
    vlm_export = start_export(
        "--source_model", str(checkpoints["tiny-vlm"]), "--weight-format", "int8",
        "--model_repository_path", str(fp16),
    )  # fmt: skip
    int8_export = start_export(*int8_command("acme/tiny-chat", int8), "--overwrite_models", script=False, env=hub_cache)
    failing_export = start_export(*int8_command(str(corrupt), failed), "--overwrite_models")
    return Exports(
        fp16, finish(fp16_export), finish(vlm_export), int8, finish(int8_export), refused, before, after,
        failed, finish(failing_export), before_failure,
    )  # fmt: skip


def hub_cache_with(cache: Path, model_id: str, checkpoint: Path, only: tuple[str, ...] = ()) -> dict[str, str]:
    """A Hugging Face hub cache (HF_HUB_CACHE layout) holding ``checkpoint`` as ``model_id``'s main revision."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snapshot_dir = repo / "snapshots" / revision
    snapshot_dir.mkdir(parents=True)
    for path in checkpoint.iterdir():
        if not only or path.name in only:
            shutil.copy2(path, snapshot_dir / path.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return {"HF_HUB_CACHE": str(cache)}


def earlier_export(repository: Path, demo_models: dict[str, Path]) -> Path:
    """What an earlier export left: OVMS's layout holding the fp16 demo model and its draft."""
    old = repository / "org" / "tiny-chat"
    shutil.copytree(demo_models["tiny-llm"], old)
    shutil.copytree(demo_models["tiny-draft"], old / "tiny-draft")
    (old / "graph.pbtxt").write_text(OVMS_EXPORTED_GRAPH)
    (repository / "config.json").write_text(
        json.dumps({"mediapipe_config_list": [{"name": "org/tiny-chat", "base_path": "org/tiny-chat"}]}, indent=4)
    )
    return repository


@pytest.fixture()
def served() -> Iterator[list[Server]]:
    """Servers a test starts; stopped even when an assertion fails."""
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def fp16_server(exports: Exports, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`ovserve serve --config_path` on the repository the script wrote (LLM + draft, VLM)."""
    server = start_config_server(tmp_path_factory.mktemp("serve"), exports.fp16 / "config.json")
    yield server
    server.stop()


def test_fp16_speculative_export_is_ovms_layout(exports: Exports, checkpoints: dict[str, Path]) -> None:
    stages = succeeded(exports.fp16_result)
    # Visible progress, and the openvino_genai check comes before the graph is written.
    check = max(i for i, line in enumerate(stages) if "check:" in line)
    assert "check: generated" in stages[check]
    assert check < next(i for i, line in enumerate(stages) if "graph.pbtxt" in line)
    # Stage by stage, in the driver's order: no compression at fp16, the draft a stage of its own.
    assert progress_of(exports.fp16_result) == expected_progress(
        "reading the source", "converting to OpenVINO IR", "tokenizer", "draft model", "verification",
        "writing the repository",
    )  # fmt: skip
    assert within_stage(stages, "draft: converting", "draft model")
    assert within_stage(stages, "check: generated", "verification")

    repository = exports.fp16
    model = repository / "org" / "tiny-chat"
    # The one deliberate difference from OVMS's export: prefix caching on unless told otherwise
    # (rendered as OVMS's template renders a true value, with two spaces).
    expected = OVMS_EXPORTED_GRAPH.replace("enable_prefix_caching: false,", "enable_prefix_caching:  true,")
    assert (model / "graph.pbtxt").read_text() == expected
    # OVMS's config.json: indent 4, one entry per export (the VLM export ran at the same time).
    config = json.loads((repository / "config.json").read_text())
    assert (repository / "config.json").read_text() == json.dumps(config, indent=4)
    assert config["model_config_list"] == []
    assert sorted(config["mediapipe_config_list"], key=lambda entry: entry["name"]) == [
        {"name": "org/tiny-chat", "base_path": "org/tiny-chat"},
        {"name": "tiny-vlm", "base_path": "tiny-vlm"},
    ]
    for directory in (model, model / "tiny-draft"):
        missing = [name for name in SERVED_FILES if not (directory / name).is_file()]
        assert not missing, (directory, missing)
    # The checkpoint's sampling defaults and chat template are what the server will apply.
    source = checkpoints["tiny-llm"]
    assert (model / "generation_config.json").read_text() == (source / "generation_config.json").read_text()
    assert (model / "tokenizer_config.json").read_text() == (source / "tokenizer_config.json").read_text()
    template = json.loads((source / "tokenizer_config.json").read_text())["chat_template"]
    assert openvino_genai.Tokenizer(str(model)).chat_template == template
    assert not list(repository.rglob(".ovserve-export-*")), "staging directories left behind"


def test_fp16_speculative_export_serves_completions(fp16_server: Server) -> None:
    completion = fp16_server.client().chat.completions.create(
        model="org/tiny-chat", messages=MESSAGES, max_tokens=12, temperature=0,
        extra_body={"ignore_eos": True, "num_assistant_tokens": 3},
    )  # fmt: skip
    assert completion.model == "org/tiny-chat"
    assert completion.usage is not None and completion.usage.completion_tokens == 12
    assert completion.choices[0].message.content
    assert "'org/tiny-chat'" in fp16_server.log() and "speculative pipeline" in fp16_server.log()


def test_vlm_export_answers_about_the_image(
    exports: Exports, checkpoints: dict[str, Path], fp16_server: Server
) -> None:
    stages = succeeded(exports.vlm_result)
    assert any("task image-text-to-text" in line for line in stages), stages
    model = exports.fp16 / "tiny-vlm"
    # The flat image-processor config openvino_genai's vision encoder reads, as in the checkpoint.
    assert json.loads((model / "preprocessor_config.json").read_text()) == json.loads(
        (checkpoints["tiny-vlm"] / "preprocessor_config.json").read_text()
    )
    assert (model / "graph.pbtxt").read_text() == ovms_graph(
        '          models_path: "./",\n'
        "          plugin_config: '{}',\n"
        "          enable_prefix_caching:  true,\n"
        "          cache_size: 10,\n"
        "          max_num_seqs: 256,\n"
        '          device: "CPU",\n'
    )

    def describe(color: tuple[int, int, int]) -> str:
        content = [{"type": "text", "text": "What is in the picture?"},
                   {"type": "image_url", "image_url": {"url": images.data_url(images.solid(color))}}]  # fmt: skip
        completion = fp16_server.client().chat.completions.create(
            model="tiny-vlm", messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        assert completion.usage is not None and completion.usage.completion_tokens == 8
        return completion.choices[0].message.content or ""

    # The image reaches the model: a red and a blue picture get different greedy answers.
    assert describe(images.RED) != describe(images.BLUE)


def test_rerun_refuses_without_overwrite_and_changes_nothing(exports: Exports) -> None:
    message = one_line_error(exports.refused)
    assert "already exists" in message and "--overwrite_models" in message
    assert exports.after_refusal == exports.before_refusal


def test_overwrite_replaces_the_model_with_an_int8_plain_export(
    exports: Exports, demo_models: dict[str, Path], tmp_path: Path, served: list[Server]
) -> None:
    stages = succeeded(exports.int8_result)
    assert any("source: acme/tiny-chat (cached in" in line for line in stages), stages
    assert progress_of(exports.int8_result) == expected_progress(
        "reading the source", "converting to OpenVINO IR", "compressing weights to int8", "tokenizer",
        "verification", "writing the repository",
    )  # fmt: skip
    assert within_stage(stages, "model: compressing weights to int8 (nncf)", "compressing weights to int8")
    repository = exports.int8
    model = repository / "org" / "tiny-chat"
    assert (model / "graph.pbtxt").read_text() == ovms_graph(INT8_GRAPH_OPTIONS)
    assert not (model / "tiny-draft").exists(), "the old model's draft survived the replacement"
    # int8 weights: about half the bytes of the fp16 model they replaced.
    fp16_bytes = (demo_models["tiny-llm"] / "openvino_model.bin").stat().st_size
    assert (model / "openvino_model.bin").stat().st_size < 0.6 * fp16_bytes
    # The entry is updated in place, not added twice.
    config = json.loads((repository / "config.json").read_text())
    assert config["mediapipe_config_list"] == [{"name": "org/tiny-chat", "base_path": "org/tiny-chat"}]
    assert not list(repository.rglob(".ovserve-export-*")), "staging directories left behind"

    server = start_config_server(tmp_path, repository / "config.json")
    served.append(server)
    completion = server.client().chat.completions.create(
        model="org/tiny-chat", messages=MESSAGES, max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    assert completion.usage is not None and completion.usage.completion_tokens == 12
    assert completion.choices[0].message.content
    assert "continuous_batching pipeline" in server.log()


def test_failed_overwrite_keeps_the_old_model(exports: Exports) -> None:
    result = exports.failed_result
    assert result.returncode == 1, result.stdout + result.stderr
    # Not a mistake a message can explain: the traceback is kept, the last line says what happened.
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ovserve export: export failed (") and last.endswith("the repository was left as it was")
    assert snapshot(exports.failed) == exports.before_failure
    assert "model: converting" in result.stdout, "it failed in the export, not in an earlier check"
    # The stage it failed in says so, and no later stage started.
    assert progress_of(result)[-2:] == ["[export] [2/6] converting to OpenVINO IR ...", "[export] [2/6] failed after T"]


# -- mistakes are refused in one line, before anything is written -----------------------------------


def copy_checkpoint(checkpoints: dict[str, Path], tmp_path: Path, *, without: tuple[str, ...] = ()) -> Path:
    copy = tmp_path / "checkpoint"
    shutil.copytree(checkpoints["tiny-llm"], copy, ignore=shutil.ignore_patterns(*without))
    return copy


def test_hub_id_offline_and_not_cached_says_how_to_use_a_local_directory(tmp_path: Path) -> None:
    result = run_export(
        "--source_model", "Qwen/Qwen2.5-0.5B-Instruct", "--model_repository_path", str(tmp_path / "models"),
        env={"HF_HUB_CACHE": str(tmp_path / "empty-cache")},
    )  # fmt: skip
    message = one_line_error(result)
    assert "Qwen/Qwen2.5-0.5B-Instruct" in message and "HF_HUB_OFFLINE=1" in message
    assert "--source_model DIR" in message
    assert not (tmp_path / "models").exists()


def test_hub_id_partly_cached_offline_is_a_clear_error(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    # `hf download acme/tiny-chat config.json` fetched the config but not the weights.
    cache = hub_cache_with(tmp_path / "cache", "acme/tiny-chat", checkpoints["tiny-llm"], only=("config.json",))
    result = run_export("--source_model", "acme/tiny-chat", "--model_repository_path", str(tmp_path / "m"), env=cache)
    message = one_line_error(result)
    assert "holds only part of acme/tiny-chat" in message and "--source_model DIR" in message
    assert not (tmp_path / "m").exists()


def test_checkpoint_without_tokenizer_is_refused(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    source = copy_checkpoint(checkpoints, tmp_path, without=("tokenizer.json", "tokenizer_config.json"))
    message = one_line_error(
        run_export("--source_model", str(source), "--model_repository_path", str(tmp_path / "models"))
    )
    assert "has no tokenizer" in message and str(source) in message
    assert not (tmp_path / "models").exists()


def test_too_little_disk_is_refused_before_exporting(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    source = copy_checkpoint(checkpoints, tmp_path)
    # A sparse checkpoint twice the free space: as big as a real model on a full disk, without using the disk.
    free = shutil.disk_usage(tmp_path).free
    with (source / "model.safetensors").open("r+b") as weights:
        weights.truncate(min(2 * free + 2**30, 8 * 2**40))
    message = one_line_error(
        run_export("--source_model", str(source), "--model_repository_path", str(tmp_path / "models"))
    )
    assert "not enough disk space" in message and "GB" in message
    assert not (tmp_path / "models").exists()


def test_unsupported_architecture_is_named(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    source = copy_checkpoint(checkpoints, tmp_path)
    config = json.loads((source / "config.json").read_text())
    config.update(model_type="acme_lm", architectures=["AcmeForCausalLM"])
    (source / "config.json").write_text(json.dumps(config))
    message = one_line_error(
        run_export("--source_model", str(source), "--model_repository_path", str(tmp_path / "models"))
    )
    assert "optimum-intel cannot export model type 'acme_lm' (AcmeForCausalLM)" in message
    assert not (tmp_path / "models").exists()
