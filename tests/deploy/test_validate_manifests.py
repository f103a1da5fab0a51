"""The offline manifest validator refuses what a cluster would refuse, checks custom resources against the
CRDs kept in deploy/crds, and says which CRDs it skipped and what it left unchecked."""

from __future__ import annotations

import pytest

from scripts.render_manifests import MANIFEST, ROOT
from scripts.validate_manifests import closed_objects, main, validate_text

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


POOL = """\
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: ovserve
  labels: {app.kubernetes.io/name: ovserve}
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: ovserve}
  targetPorts:
    - number: 8000
  endpointPickerRef:
    name: ovserve-epp
    port: {number: 9002}
    failureMode: FailOpen
"""


def test_inference_pool_is_valid_against_its_crd_and_says_what_it_left_unchecked() -> None:
    [finding] = validate_text(POOL, "pool", ["1.33.0"])
    assert finding.ok, finding
    assert finding.message == (
        "valid against the CRD schema of inference.networking.k8s.io_inferencepools.yaml; 2 CEL rules not evaluated"
    )


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (POOL.replace("targetPorts:", "targetPort:"), "'targetPort' was unexpected"),  # closed like strict apply
        (POOL.replace("failureMode: FailOpen", "failureMode: Sometimes"), "'Sometimes' is not one of"),
        (POOL.replace("number: 8000", "number: 70000"), "70000 is greater than the maximum of 65535"),
        (POOL.replace("    port: {number: 9002}\n", "    port: {}\n"), "'number' is a required property"),
        (POOL.replace("{app.kubernetes.io/name: ovserve}\n", "{tier: [1]}\n", 1), "ObjectMeta: metadata.labels.tier"),
    ],
)
def test_inference_pool_refused_where_its_crd_refuses_it(broken: str, expected: str) -> None:
    failed = [finding for finding in validate_text(broken, "pool", ["1.33.0"]) if not finding.ok]
    assert failed and all(finding.resource.startswith("InferencePool/") for finding in failed)
    assert any(expected in finding.message for finding in failed), [str(finding) for finding in failed]


def test_objects_that_list_their_properties_are_closed_unless_they_keep_unknown_fields() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
            "free": {"type": "object", "properties": {}, "x-kubernetes-preserve-unknown-fields": True},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["spec"]["additionalProperties"] is False
    assert "additionalProperties" not in closed["properties"]["free"]
    assert closed["properties"]["map"]["additionalProperties"] == {"type": "string"}
