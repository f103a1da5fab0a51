"""Markdown tables, the JSON results file and ``--compare`` against an earlier one."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .measure import Figures
from .workloads import Workload

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    """One (workload, variant, level): the raw pipeline's figures and the server's."""

    workload: str
    variant: str
    server_args: str
    level: int
    raw: Figures | None
    server: Figures | None
    headline: str
    ratio: float | None  # server / raw on the headline figure

    @classmethod
    def of(cls, workload: Workload, variant: str, server_args: str, level: int, raw: Figures | None,
           server: Figures | None) -> Result:  # fmt: skip
        a = raw.get(workload.headline) if raw else None
        b = server.get(workload.headline) if server else None
        ratio = b / a if a and b is not None else None
        return cls(workload.name, variant, server_args, level, raw, server, workload.headline, ratio)


def machine_info() -> dict[str, Any]:
    import openvino
    import openvino_genai

    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    ) if Path("/proc/cpuinfo").exists() else platform.processor()  # fmt: skip

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "openvino": openvino.get_version(),
        "openvino_genai": openvino_genai.get_version(),
        "python": platform.python_version(),
        "git_commit": git("rev-parse", "HEAD") + ("+dirty" if dirty else ""),
    }


def _cell(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def workload_table(workload: Workload, results: list[Result]) -> str:
    """One markdown table: a row per (level, variant), ``raw / server`` in each figure's column."""
    rows = [r for r in results if r.workload == workload.name]
    variants = list(dict.fromkeys(r.variant for r in rows))
    has_raw = any(r.raw for r in rows)
    direction = "higher" if workload.higher_is_better else "lower"
    lines = [f"### {workload.name}", "", workload.description + ".", ""]
    if workload.raw_note:
        lines += [f"No raw run: {workload.raw_note}.", ""]
    sides = "raw / server" if has_raw else "server"
    header = ["level", "variant"] + [f"{label} ({sides})" for _, label in workload.columns]
    if has_raw:
        header.append(f"server/raw {workload.headline} ({direction} is better)")
    if len(variants) > 1:
        header.append(f"server {workload.headline} vs {variants[0]}")
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(row.level), row.variant]
        for key, _ in workload.columns:
            server = _cell(row.server.get(key) if row.server else None)
            cells.append(f"{_cell(row.raw.get(key))} / {server}" if has_raw and row.raw else server)
        if has_raw:
            cells.append(_cell(row.ratio))
        if len(variants) > 1:
            first = next(r for r in rows if r.level == row.level and r.variant == variants[0])
            a = first.server.get(workload.headline) if first.server else None
            b = row.server.get(workload.headline) if row.server else None
            cells.append(_cell(b / a) if a and b is not None else "–")
        lines.append("| " + " | ".join(cells) + " |")
    variant_args = {r.variant: r.server_args for r in rows}
    if any(variant_args.values()):
        lines += ["", "Variants: " + "; ".join(f"`{v}` = `{a or '(defaults)'}`" for v, a in variant_args.items())]
    return "\n".join(lines)


def bandwidth_table(bandwidth: dict[str, float], results: list[Result]) -> str:
    lines = [
        "### bandwidth",
        "",
        "| read GB/s | threads | buffer MiB | LLC MiB | weights MB | one-stream decode ceiling tok/s |",
        "|---|---|---|---|---|---|",
        f"| {bandwidth['read_gb_s']:.1f} | {bandwidth['threads']:.0f} | {bandwidth['buffer_mib']:.0f} "
        f"| {bandwidth['llc_mib']:.0f} | {bandwidth['weights_mb']:.0f} | {bandwidth['ceiling_tok_s']:.1f} |",
    ]
    single = [r for r in results if r.workload == "uniform" and r.level == 1]
    if single:
        lines += ["", "| uniform, 1 stream | variant | tok/s | fraction of the ceiling |", "|---|---|---|---|"]
        for r in single:
            for side, figures in (("raw", r.raw), ("server", r.server)):
                tok_s = figures.get("tok_s") if figures else None
                if tok_s:
                    fraction = tok_s / bandwidth["ceiling_tok_s"]
                    lines.append(f"| {side} | {r.variant} | {tok_s:.1f} | {fraction:.0%} |")
    return "\n".join(lines)


def write_json(path: Path, machine: dict[str, Any], settings: dict[str, Any], results: list[Result],
               bandwidth: dict[str, float] | None) -> None:  # fmt: skip
    document = {
        "machine": machine,
        "settings": settings,
        "bandwidth": bandwidth,
        "results": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def compare_table(old_path: Path, results: list[Result], bandwidth: dict[str, float] | None) -> str:
    """This run against an earlier ``--out`` file, for each (workload, variant, level) in both."""
    old = json.loads(old_path.read_text())
    before = {(r["workload"], r["variant"], r["level"]): r for r in old["results"]}
    lines = [
        f"### compared with {old_path} ({old['machine'].get('git_commit', '?')}, {old['machine'].get('cpu', '?')})",
        "",
        "| workload | variant | level | figure | raw old → new | raw new/old | server old → new | server new/old |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        o = before.get((r.workload, r.variant, r.level))
        if o is None:
            continue
        key = r.headline
        cells = [r.workload, r.variant, str(r.level), key]
        for new, previous in ((r.raw, o["raw"]), (r.server, o["server"])):
            a = previous.get(key) if previous else None
            b = new.get(key) if new else None
            cells += [f"{_cell(a)} → {_cell(b)}", _cell(b / a) if a and b is not None else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    if bandwidth and old.get("bandwidth"):
        a, b = old["bandwidth"]["read_gb_s"], bandwidth["read_gb_s"]
        lines += ["", f"read bandwidth: {a:.1f} → {b:.1f} GB/s ({b / a:.2f}x)"]
    return "\n".join(lines)
