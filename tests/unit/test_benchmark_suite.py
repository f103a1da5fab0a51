"""The benchmark suite's bookkeeping: figures from traces, variants reaching the raw pipeline,
and --compare matching runs. (The workloads themselves need a model and minutes: run them by hand.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.benchmark import engine_spec, parse_variant
from scripts.benchmarks.measure import Trace, percentile, summary
from scripts.benchmarks.report import Result, compare_table, workload_table, write_json
from scripts.benchmarks.workloads import LongPrompt, MultiTurn, Uniform


def _model_dir(tmp_path: Path) -> Path:
    for name in ("openvino_model.xml", "openvino_tokenizer.xml"):
        (tmp_path / name).write_text("<net/>")
    return tmp_path


def test_a_read_of_several_tokens_counts_as_that_many_equal_gaps() -> None:
    trace = Trace("stream", start=0.0)
    trace.add(1.0, 1)
    trace.add(1.3, 3)  # speculative decoding, or a step that read late: 3 tokens after 0.3 s
    assert trace.ttft == 1.0
    assert trace.gaps() == pytest.approx([0.1, 0.1, 0.1])
    assert trace.gaps(window=(1.5, 2.0)) == []


def test_summary_reports_tokens_per_second_over_the_wall_time() -> None:
    traces = [Trace("a", 0.0, [(0.5, 1), (1.0, 1)]), Trace("b", 0.0, [(0.7, 1), (1.0, 3)])]
    figures = summary(traces, wall_s=2.0)
    assert figures["tok_s"] == 3.0
    assert figures["ttft_p50_ms"] == pytest.approx(500)
    assert percentile([], 99) is None


def test_variant_flags_reach_the_raw_pipelines_scheduler_and_plugin_config(tmp_path: Path) -> None:
    name, args = parse_variant("""prefix_on=--enable_prefix_caching true --max_num_batched_tokens 512 \
--plugin_config '{"INFERENCE_NUM_THREADS": 2}'""")
    spec = engine_spec(_model_dir(tmp_path), args)
    assert name == "prefix_on"
    assert spec.scheduler.enable_prefix_caching is True
    assert spec.scheduler.max_num_batched_tokens == 512
    assert spec.plugin_config == {"INFERENCE_NUM_THREADS": 2}
    assert engine_spec(_model_dir(tmp_path), "--enable_prefix_caching false").scheduler.enable_prefix_caching is False


def test_compare_pairs_this_run_with_the_same_workload_variant_and_level(tmp_path: Path) -> None:
    old = [Result.of(Uniform(), "default", "", 4, {"tok_s": 100.0}, {"tok_s": 80.0})]
    write_json(tmp_path / "old.json", {"git_commit": "abc", "cpu": "test CPU"}, {}, old, None)
    new = [
        Result.of(Uniform(), "default", "", 4, {"tok_s": 110.0}, {"tok_s": 100.0}),
        Result.of(Uniform(), "default", "", 8, {"tok_s": 150.0}, {"tok_s": 120.0}),  # not in the old run
    ]
    table = compare_table(tmp_path / "old.json", new, None)
    assert "| uniform | default | 4 | tok_s | 100 → 110 | 1.10 | 80.0 → 100 | 1.25 |" in table
    assert "| 8 |" not in table


def test_table_shows_raw_and_server_side_by_side_and_variants_against_the_first() -> None:
    rows = [
        Result.of(MultiTurn(), "prefix_on", "--enable_prefix_caching true", 8, {"tok_s": 50.0}, {"tok_s": 40.0}),
        Result.of(MultiTurn(), "prefix_off", "--enable_prefix_caching false", 8, {"tok_s": 40.0}, {"tok_s": 20.0}),
    ]
    table = workload_table(MultiTurn(), rows)
    assert "| 8 | prefix_on | 50.0 / 40.0 |" in table
    assert table.splitlines()[-3].endswith("| 0.50 | 0.50 |")  # server/raw, and prefix_off vs prefix_on
    assert "`prefix_off` = `--enable_prefix_caching false`" in table


def test_long_prompt_window_counts_only_gaps_while_the_late_request_waits_for_its_first_token() -> None:
    streams = [Trace("stream", 0.0, [(0.1, 1), (0.2, 1), (0.3, 1), (1.3, 1), (1.4, 1)])]
    late = Trace("long", 0.25, [(1.3, 1)])
    figures = LongPrompt().window_figures(streams, late)
    assert figures["itl_before_p99_ms"] == pytest.approx(100)
    assert figures["itl_during_max_ms"] == pytest.approx(1000)  # the stall the long prefill caused
    assert figures["late_ttft_ms"] == pytest.approx(1050)


def test_the_embeddings_workload_benchmarks_the_pipeline_the_server_builds(tmp_path: Path) -> None:
    from ovserve.engine.spec import PipelineKind
    from scripts.benchmarks.embeddings import Embeddings

    spec = engine_spec(_model_dir(tmp_path), Embeddings.server_args)
    assert spec.kind is PipelineKind.EMBEDDINGS and spec.retrieval.pooling == "MEAN"
    result = Result.of(Embeddings(), "default", "", 64, {"emb_s": 100.0}, {"emb_s": 95.0})
    assert result.ratio == 0.95
    assert "| 64 | default | 100 / 95.0 |" in workload_table(Embeddings(), [result])
