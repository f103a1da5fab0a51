"""The offline manifest validator refuses what a cluster would refuse, and says which CRDs it skipped."""

from __future__ import annotations

import pytest

from scripts.render_manifests import MANIFEST, ROOT
from scripts.validate_manifests import main, validate_text

RUNTIME = (ROOT / "deploy" / "kserve" / "servingruntime.yaml").read_text()


def test_misspelled_field_fails_with_its_path() -> None:
    broken = MANIFEST.read_text().replace("terminationGracePeriodSeconds:", "terminationGracePeriodSecond:")
    failed = [finding for finding in validate_text(broken, "broken", ["1.33.0"]) if not finding.ok]
    assert len(failed) == 1
    assert failed[0].resource == "Deployment/ovserve"
    assert "spec.template.spec" in failed[0].message
    assert "'terminationGracePeriodSecond' was unexpected" in failed[0].message


def test_wrong_type_fails() -> None:
    broken = MANIFEST.read_text().replace("maxUnavailable: 1\n", "maxUnavailable: [1]\n")
    failed = [finding for finding in validate_text(broken, "broken", ["1.33.0"]) if not finding.ok]
    assert [finding.resource for finding in failed] == ["PodDisruptionBudget/ovserve"]


def test_serving_runtime_container_is_validated_as_core_v1() -> None:
    assert all(finding.ok for finding in validate_text(RUNTIME, "runtime", ["1.33.0"]))
    broken = RUNTIME.replace("readinessProbe:", "readinesProbe:")
    failed = [finding for finding in validate_text(broken, "runtime", ["1.33.0"]) if not finding.ok]
    assert len(failed) == 1 and "'readinesProbe' was unexpected" in failed[0].message


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PrometheusRule"])
def test_prometheus_operator_resources_are_skipped_with_a_reason(kind: str) -> None:
    text = f"apiVersion: monitoring.coreos.com/v1\nkind: {kind}\nmetadata: {{name: m}}\nspec: {{}}\n"
    [finding] = validate_text(text, "monitor", ["1.33.0"])
    assert finding.ok and finding.message.startswith("skipped: ")


def test_unknown_kind_fails_rather_than_passing_unchecked() -> None:
    text = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
    [finding] = validate_text(text, "widget", ["1.33.0"])
    assert not finding.ok and "no schema" in finding.message


def test_command_line_exit_status(tmp_path, capsys) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(MANIFEST.read_text().replace("readinessProbe:", "readinesProbe:"))
    assert main(["-k", "1.33.0", str(MANIFEST)]) == 0
    assert main(["-k", "1.33.0", str(broken)]) == 1
    assert "1 failed" in capsys.readouterr().out
