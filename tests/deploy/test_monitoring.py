"""deploy/monitoring: the alert rules pass promtool and their own unit tests, each alert is tested
firing and quiet, the dashboard is Grafana dashboard JSON on a datasource variable, and every
metric the rules and the dashboard's queries name is one a running server exports (whose
exposition passes `promtool check metrics`).

promtool comes from scripts/install_promtool.sh (.venv/bin/promtool) or PATH.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ovserve.metrics import resident_memory_bytes
from scripts.render_manifests import ROOT
from tests.conftest import start_server

MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "ovserve-alerts.yaml"
RULE_TESTS = MONITORING / "ovserve-alerts.test.yaml"
DASHBOARD = MONITORING / "ovserve-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Alerts on metrics without a model label (the server process, API keys, the Responses store).
NOT_PER_MODEL = {
    "OvserveServerMemoryGrowing",
    "OvserveAuthFailureBurst",
    "OvserveResponsesStoreFailing",
    "OvserveFilesStoreFailing",
}


@cache
def promtool() -> str:
    local = ROOT / ".venv" / "bin" / "promtool"
    if not local.exists() and shutil.which("promtool") is None:
        subprocess.run(["bash", str(ROOT / "scripts" / "install_promtool.sh")], check=True)
    return str(local) if local.exists() else str(shutil.which("promtool"))


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False, cwd=ROOT)


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels() -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included, rows themselves left out."""
    panels = []
    for panel in dashboard()["panels"]:
        panels += panel.get("panels", []) if panel["type"] == "row" else [panel]
    return panels


# The dashboard's Audio row: series of audio models only (a text model's server has none).
AUDIO_METRICS = {
    "ovserve_audio_input_seconds_total",
    "ovserve_speech_output_seconds_total",
    "ovserve_speech_input_characters_total",
    "ovserve_audio_real_time_factor_bucket",
}


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in dashboard_panels() for target in panel["targets"]]


def as_promql(expr: str) -> str:
    """A dashboard query as Prometheus sees it once Grafana has put in its variables."""
    return expr.replace("$__rate_interval", "1m").replace("${model}", ".*").replace("$model", ".*")


# Words of PromQL that are not metric names when they stand outside parentheses.
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers,
    ranges, label lists (by, on, ...), function names and keywords are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", expr):
        calls_it = expr[match.end() :].lstrip().startswith("(")
        if not calls_it and match.group().lower() not in _KEYWORDS:
            names.add(match.group())
    return names


def test_metric_names_are_read_out_of_promql() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, model) (rate(a_bucket{model=~"$model", s="x y"}[5m])))'
        " / on (job) group_left () b offset 1h > bool 1.5 * min_over_time((c - d)[6h:5m]) and e"
    )
    assert metric_names(expr) == {"a_bucket", "b", "c", "d", "e"}


# -- alert rules ------------------------------------------------------------------------------


def test_alert_rules_pass_promtool_check() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_alert_rules_pass_their_unit_tests() -> None:
    result = run_promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_quiet() -> None:
    firing: dict[str, list[dict[str, str]]] = {}
    quiet: set[str] = set()
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            if case["exp_alerts"]:
                firing.setdefault(case["alertname"], []).extend(alert["exp_labels"] for alert in case["exp_alerts"])
            else:
                quiet.add(case["alertname"])
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    assert sorted(firing) == sorted(names)
    assert sorted(quiet) == sorted(names)
    # The model label reaches every alert whose metrics carry it.
    for name, alerts in firing.items():
        assert all(("model" in labels) == (name not in NOT_PER_MODEL) for labels in alerts), name


def test_every_alert_has_a_for_a_severity_and_annotations_naming_what_failed() -> None:
    for rule in alert_rules():
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description"}, name
        subject = "{{ $labels.instance }}" if name in NOT_PER_MODEL else "{{ $labels.model }}"
        if name == "OvserveAuthFailureBurst":  # summed over a job's pods
            subject = "{{ $labels.job }}"
        assert subject in annotations["summary"] and subject in annotations["description"], name


# -- dashboard --------------------------------------------------------------------------------


def test_dashboard_is_grafana_json_on_a_datasource_variable_with_a_model_variable() -> None:
    board = dashboard()
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["uid"] and board["title"] and board["time"]
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    model = variables["model"]
    assert model["type"] == "query" and model["datasource"] == DATASOURCE
    assert model["definition"] == model["query"]["query"] == "label_values(ovserve_engine_ready, model)"
    assert model["multi"] and model["includeAll"] and model["allValue"] == ".*"

    nested = [inner for panel in board["panels"] for inner in panel.get("panels", [])]
    ids = [panel["id"] for panel in board["panels"] + nested]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        columns, lines = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        area = {(x, y) for x in columns for y in lines}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
    for panel in dashboard_panels():
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"] and panel["title"] and panel["description"]
        assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"])
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            # Every query follows the model picker (metrics without a model label through the
            # servers that serve the picked models).
            assert 'model=~"$model"' in target["expr"], target["expr"]


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    rules = [{"record": f"dashboard:query:{index}", "expr": as_promql(expr)} for index, expr in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# -- against a running server -----------------------------------------------------------------


def test_every_metric_the_alerts_and_the_dashboard_name_is_exported(tiny_llm: Path, tmp_path: Path) -> None:
    key = "sk-monitoring"
    server = start_server(tmp_path, tiny_llm, "--api_key", key)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        chat = {"model": "tiny-llm", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}
        for body in (chat, {**chat, "stream": True}):
            response = httpx.post(f"{server.url}/v3/chat/completions", json=body, headers=headers, timeout=60)
            assert response.status_code == 200
        response = httpx.post(
            f"{server.url}/v3/responses",
            json={"model": "tiny-llm", "input": "Hello", "max_output_tokens": 8},
            headers=headers,
            timeout=60,
        )
        assert response.status_code == 200
        for refused in ({}, {"Authorization": "Bearer sk-wrong"}):
            assert httpx.post(f"{server.url}/v3/chat/completions", json=chat, headers=refused).status_code == 401
        text = httpx.get(f"{server.url}/metrics", headers=headers, timeout=10).text
        (engine_pid,) = server.engine_pids()
        engine_rss = resident_memory_bytes(engine_pid)
    finally:
        server.stop()

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    lint = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    exported = {name for name, _ in samples}
    in_rules = {name for rule in alert_rules() for name in metric_names(rule["expr"])}
    in_dashboard = {name for expr in dashboard_exprs() for name in metric_names(expr)}
    assert {"ovserve_engine_ready", "ovserve_auth_failures_total", "process_resident_memory_bytes"} <= in_rules
    assert "ovserve_time_to_first_token_seconds_bucket" in in_dashboard
    assert in_rules - exported == set()
    # The Audio row's series exist once an audio model has served: tests/e2e/test_audio_on_demand.py.
    assert in_dashboard - exported == AUDIO_METRICS

    # The values the alerts read: the engine's own memory, the refused keys by their reasons.
    model = (("model", "tiny-llm"),)
    assert engine_rss is not None
    assert abs(samples[("ovserve_engine_resident_memory_bytes", model)] - engine_rss) < 0.2 * engine_rss
    assert samples[("ovserve_auth_failures_total", (("reason", "missing_key"),))] == 1
    assert samples[("ovserve_auth_failures_total", (("reason", "invalid_key"),))] == 1
    assert samples[("ovserve_responses_store_failures_total", (("operation", "put"),))] == 0
    assert samples[("ovserve_files_store_failures_total", ())] == 0
