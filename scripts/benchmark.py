#!/usr/bin/env python3
"""Benchmark suite: named workloads, each on the raw pipeline and on the server in one run.

Workloads (``--workloads``, default ``uniform``; ``all`` for every one):

  uniform               N concurrent streams (--concurrency), 256-token prompts, 128 output tokens
  multiturn             U users x T turns (--users, --turns), each conversation resent every turn
  shared-system-prompt  a ~1k-token system prompt shared by N concurrent short requests
  long-prompt           4 streams running, then one 4k-token prompt admitted beside them
  many-streams          uniform at 64 and 128 streams
  vlm                   text streams on the VLM with an image request admitted (server only)
  dialects              uniform's streams through chat, completions, Responses, Anthropic and Ollama, alternated:
                        tok/s and server CPU per token, each against chat's (server only)
  bandwidth             memory read bandwidth -> the one-stream decode ceiling of the model
  embeddings            embeddings/s for batches of 1, 8, 64 inputs of 128 tokens (--embed_model_path, default:
                        the BERT-base-shaped bench-bert-base-embed, built if absent)

Every request is greedy with ignore_eos. The raw ContinuousBatchingPipeline runs in this process
first, built from the engine spec the server builds for the same flags, then ``ovserve serve``
starts and gets the same conversations over HTTP. ``--variants NAME=ARGS`` runs each workload once
per set of server flags (servers one after the other; the raw pipeline with the matching
SchedulerConfig and plugin config):

    .venv/bin/python scripts/benchmark.py --concurrency 1 4 8 16
    .venv/bin/python scripts/benchmark.py --workloads multiturn \\
        --variants prefix_on="--enable_prefix_caching true" prefix_off="--enable_prefix_caching false"
    .venv/bin/python scripts/benchmark.py --workloads uniform long-prompt bandwidth --out results.json
    .venv/bin/python scripts/benchmark.py --workloads uniform --compare results.json

Results: a markdown table per workload on stdout; ``--out`` writes them as JSON with the machine
(CPU model, cores, OpenVINO version, git commit); ``--compare OLD.json`` prints this run's figures
against an earlier file's for matching (workload, variant, level). ``--repeats N`` runs every level
N times, raw and server alternating, and reports medians. ``--baseline_checkout`` is the A/B mode:
this checkout's server against another checkout's (a git worktree of an earlier commit) on the
chosen workloads' headline figures, in ``--rounds`` interleaved rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ovserve.__main__ import build_parser, flag_values, settings_from_flags  # noqa: E402
from ovserve.engine.spec import EngineSpec  # noqa: E402
from ovserve.models.served import ServedModel  # noqa: E402
from ovserve.settings.schema import ModelSettings, ServerSettings  # noqa: E402
from scripts.benchmarks import bandwidth  # noqa: E402
from scripts.benchmarks.embeddings import Embeddings  # noqa: E402
from scripts.benchmarks.measure import Figures  # noqa: E402
from scripts.benchmarks.report import (  # noqa: E402
    Result,
    bandwidth_table,
    compare_table,
    machine_info,
    workload_table,
    write_json,
)
from scripts.benchmarks.server import MODEL_NAME, running_server  # noqa: E402
from scripts.benchmarks.workloads import WORKLOADS, Context, Options, Prompts, Workload  # noqa: E402
from scripts.make_demo_models import (  # noqa: E402
    BENCH_EMBED,
    build_benchmark_model,
    build_demo_models,
    build_retrieval_models,
)

WORKLOADS = {**WORKLOADS, Embeddings.name: Embeddings}

BANDWIDTH = "bandwidth"


def engine_spec(model_dir: Path, server_args: str) -> EngineSpec:
    """The engine spec ``ovserve serve`` builds from these flags: the raw pipeline gets the same."""
    argv = ["serve", "--model_path", str(model_dir), "--model_name", MODEL_NAME, *shlex.split(server_args)]
    settings = settings_from_flags(flag_values(build_parser().parse_args(argv), {}))
    return settings.models[0].engine_spec()


def parse_variant(text: str) -> tuple[str, str]:
    name, sep, args = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a variant is NAME=SERVER_ARGS, got {text!r}")
    return name, args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=["uniform"], choices=[*WORKLOADS, BANDWIDTH, "all"])
    parser.add_argument("--server_args", default="", help="flags for every server (and the raw pipeline's spec)")
    parser.add_argument(
        "--variants", nargs="+", type=parse_variant, default=[("default", "")], metavar="NAME=ARGS",
        help='server flags per variant, after --server_args, e.g. off="--enable_prefix_caching false"',
    )  # fmt: skip
    parser.add_argument("--no_raw", action="store_true", help="server only (no raw pipeline runs)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    parser.add_argument("--compare", type=Path, metavar="OLD.json", help="print this run against an earlier --out")
    parser.add_argument("--model_path", type=Path, help="text model (default: build/reuse the benchmark model)")
    parser.add_argument("--vlm_model_path", type=Path, help="VLM for 'vlm' (default: models/tiny-vlm)")
    parser.add_argument(
        "--embed_model_path", type=Path, help=f"embedding model for 'embeddings' (default: models/{BENCH_EMBED})"
    )
    parser.add_argument("--models_dir", type=Path, default=ROOT / "models")
    parser.add_argument("--port", type=int, default=8765)
    defaults = Options()
    sizes = parser.add_argument_group("workload sizes")
    for name, value in vars(defaults).items():
        if isinstance(value, list):
            sizes.add_argument(f"--{name}", type=int, nargs="+", default=value)
        else:
            sizes.add_argument(f"--{name}", type=int, default=value)
    ab = parser.add_argument_group("A/B mode")
    ab.add_argument(
        "--baseline_checkout",
        type=Path,
        help="another checkout (e.g. the previous commit as a git worktree): its server runs the uniform levels, "
        "interleaved with this one's, and the table compares the two servers instead of server vs raw",
    )
    ab.add_argument("--rounds", type=int, default=1, help="with --baseline_checkout: A/B rounds per level")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run each level this many times, raw and server alternating (the server stays up), and report "
        "each figure's median: run-to-run drift on a shared machine then hits both sides alike",
    )
    args = parser.parse_args(argv)
    if "all" in args.workloads:
        args.workloads = [*WORKLOADS, BANDWIDTH]
    args.options = Options(**{name: getattr(args, name) for name in vars(defaults)})
    return args


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median_figures(runs: list[Figures]) -> Figures:
    """Each figure's median over repeated runs (None where no run has it)."""
    keys = {key for figures in runs for key in figures}
    medians: Figures = {}
    for key in sorted(keys):
        values = [value for figures in runs if (value := figures.get(key)) is not None]
        medians[key] = statistics.median(values) if values else None
    if len(runs) > 1:
        medians["repeats"] = len(runs)
    return medians


def run_workload(workload: Workload, args: argparse.Namespace, model_dir: Path, context: Context) -> list[Result]:
    results = []
    levels = workload.levels(args.options)
    with_raw = workload.raw_note is None and not args.no_raw
    for variant, variant_args in args.variants:
        server_args = " ".join(a for a in (workload.server_args, args.server_args, variant_args) if a)
        spec = engine_spec(model_dir, server_args) if with_raw else None
        raw: dict[int, list[Figures]] = {level: [] for level in levels}
        served: dict[int, list[Figures]] = {level: [] for level in levels}
        if spec is not None and args.repeats == 1:  # the raw runs first, alone on the machine
            for level in levels:
                started = time.perf_counter()
                raw[level].append(workload.run_raw(context, spec, level))
                progress(f"{workload.name} {variant} {level}: raw in {time.perf_counter() - started:.1f} s")
        with running_server(model_dir, args.port, server_args) as url:
            for level in levels:
                for repeat in range(args.repeats):
                    # A new label per repeat: no repeat finds an earlier one's prompts in the server's cache.
                    repeat_context = dataclasses.replace(context, run_label=f"{context.run_label} repeat {repeat}")
                    if spec is not None and args.repeats > 1:
                        started = time.perf_counter()
                        raw[level].append(workload.run_raw(repeat_context, spec, level))
                        progress(f"{workload.name} {variant} {level} #{repeat + 1}: raw in "
                                 f"{time.perf_counter() - started:.1f} s")  # fmt: skip
                    started = time.perf_counter()
                    served[level].append(asyncio.run(workload.run_server(repeat_context, url, level)))
                    progress(f"{workload.name} {variant} {level} #{repeat + 1}: server in "
                             f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        for level in levels:
            raw_figures = median_figures(raw[level]) if raw[level] else None
            results.append(Result.of(workload, variant, server_args, level, raw_figures, median_figures(served[level])))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Absolute: the servers run with another working directory (the A/B mode's baseline checkout).
    model_dir = (args.model_path or build_benchmark_model(args.models_dir)).resolve()
    vlm_dir = (args.vlm_model_path or args.models_dir / "tiny-vlm").resolve()
    names = [name for name in args.workloads if name != BANDWIDTH]
    if any(WORKLOADS[name]().vlm for name in names) and args.vlm_model_path is None:
        build_demo_models(args.models_dir)
    model = ModelSettings(name=MODEL_NAME, path=model_dir)
    served = ServedModel.load(model, ServerSettings(models=[model]))
    context = Context(Prompts(served), args.options, run_label=f"run {time.time_ns() % 10**9}")

    if args.baseline_checkout is not None:
        return compare_servers(args, model_dir, vlm_dir, context)

    machine = machine_info()
    print(f"model {model_dir}; {machine['cpu']}, {machine['usable_cpus']} CPUs; openvino {machine['openvino']}; "
          f"commit {machine['git_commit']}")  # fmt: skip
    results: list[Result] = []
    tables = []
    for name in names:
        workload = WORKLOADS[name]()
        workload_dir = vlm_dir if workload.vlm else model_dir
        if isinstance(workload, Embeddings):
            workload_dir = args.embed_model_path or build_retrieval_models(args.models_dir, benchmark=True)[BENCH_EMBED]
            workload.model_dir = workload_dir
        workload_results = run_workload(workload, args, workload_dir, context)
        results += workload_results
        tables.append(workload_table(workload, workload_results))
    probe = None
    if BANDWIDTH in args.workloads:
        probe = bandwidth.probe(model_dir)
        tables.append(bandwidth_table(probe, results))

    print("\n" + "\n\n".join(tables))
    if args.compare is not None:
        print("\n" + compare_table(args.compare, results, probe))
    if args.out is not None:
        settings = {"workloads": args.workloads, "server_args": args.server_args, "variants": dict(args.variants),
                    "model": str(model_dir), "options": vars(args.options)}  # fmt: skip
        write_json(args.out, machine, settings, results, probe)
        print(f"\nwrote {args.out}")
    return 0


def compare_servers(args: argparse.Namespace, model_dir: Path, vlm_dir: Path, context: Context) -> int:
    """This checkout's server (B) against ``--baseline_checkout``'s (A) on the chosen workloads:
    both up at once on two ports, each level run A, B, A, B... so drift (thermal, other load)
    hits both alike. The table compares the workload's headline figure."""
    from contextlib import ExitStack

    checkouts = {"baseline": args.baseline_checkout.resolve(), "this": ROOT}
    print(f"\nbaseline: {checkouts['baseline']}")
    report: dict[str, list[float]] = {}
    for name in [name for name in args.workloads if name != BANDWIDTH]:
        workload = WORKLOADS[name]()
        server_args = " ".join(a for a in (workload.server_args, args.server_args) if a)
        served_dir = vlm_dir if workload.vlm else model_dir
        results: dict[tuple[str, int], list[float]] = {}
        server_cpu: dict[tuple[str, int], list[float]] = {}  # the server process's CPU per token, if measured
        with ExitStack() as stack:
            urls = {
                label: stack.enter_context(running_server(served_dir, args.port + offset, server_args, checkout))
                for offset, (label, checkout) in enumerate(checkouts.items())
            }
            for level in workload.levels(args.options):
                for round_number in range(args.rounds):
                    # A new label per round: no round finds an earlier round's prompts in a cache.
                    round_context = dataclasses.replace(context, run_label=f"{context.run_label} round {round_number}")
                    for label, url in urls.items():
                        figures = asyncio.run(workload.run_server(round_context, url, level))
                        results.setdefault((label, level), []).append(figures[workload.headline] or 0.0)
                        if (cpu := figures.get("server_cpu_us_per_token")) is not None:
                            server_cpu.setdefault((label, level), []).append(cpu)
                        progress(f"{name} {level} round {round_number + 1} {label}: "
                                 f"{workload.headline} {figures[workload.headline]}")  # fmt: skip
        better = "higher" if workload.higher_is_better else "lower"
        print(f"\n### {name}: {workload.headline} ({better} is better)\n")
        print("| level | baseline (median) | this (median) | this / baseline | median paired ratio "
              "| runs (baseline/this) |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for level in workload.levels(args.options):
            before, after = results[("baseline", level)], results[("this", level)]
            a, b = statistics.median(before), statistics.median(after)
            pairs = list(zip(before, after, strict=True))
            paired = statistics.median(y / x for x, y in pairs if x)  # each A/B pair ran back to back
            runs = ", ".join(f"{x:.1f}/{y:.1f}" for x, y in pairs)
            print(f"| {level} | {a:.1f} | {b:.1f} | {b / a:.3f} | {paired:.3f} | {runs} |")
            report.update({f"{name}:baseline:{level}": list(before), f"{name}:this:{level}": list(after)})
        if server_cpu:
            print(f"\n### {name}: server CPU us per streamed token (lower is better)\n")
            print("| level | baseline (median) | this (median) | this / baseline | runs (baseline/this) |")
            print("|---|---|---|---|---|")
            for level in workload.levels(args.options):
                before, after = server_cpu.get(("baseline", level), []), server_cpu.get(("this", level), [])
                if not before or not after:
                    continue
                a, b = statistics.median(before), statistics.median(after)
                runs = ", ".join(f"{x:.0f}/{y:.0f}" for x, y in zip(before, after, strict=False))
                print(f"| {level} | {a:.0f} | {b:.0f} | {b / a:.3f} | {runs} |")
                report.update({f"{name}:cpu:baseline:{level}": before, f"{name}:cpu:this:{level}": after})
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
