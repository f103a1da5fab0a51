"""The Helm chart: every variant renders to manifests Kubernetes 1.33 accepts, and says what the README says."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

from scripts.render_manifests import CHART, MANIFEST, ROOT
from scripts.validate_manifests import validate_text
from tests.deploy.chart import arg_value, helm_fails, only, render_objects, render_text, server_container

# Each variant switches on a template branch the defaults leave off.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "model-from-image-volume": {"model": {"source": "image", "image": {"reference": "registry.example/models:qwen"}}},
    "model-exported-by-init-container": {"model": {"source": "export", "export": {"hfTokenSecret": "hf-token"}}},
    "single-model-mode": {"model": {"mode": "single", "single": {"name": "qwen", "path": "qwen"}}},
    "kubelet-sleep-prestop": {"preStop": {"handler": "sleep", "sleepSeconds": 5}},
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "alerts-and-dashboard": {
        "monitoring": {
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "dashboard": {"enabled": True, "annotations": {"grafana_folder": "LLM"}, "namespace": "monitoring"},
        }
    },
    "cpu-autoscaling-fallback": {"autoscaling": {"queueDepth": {"enabled": False}}},
    "fixed-replicas": {"autoscaling": {"enabled": False}, "replicaCount": 3},
    "client-ip-affinity": {"service": {"sessionAffinity": "ClientIP"}},
    "key-from-env-metrics-public": {"apiKey": {"mode": "env"}, "server": {"metricsPublic": True}},
    "inference-pool": yaml.safe_load((CHART / "examples" / "inference-pool.values.yaml").read_text()),
    "openvino-cache-and-gpu-node": {
        "server": {"openvinoCacheDir": "/cache/openvino"},
        "resources": {"limits": {"cpu": "4", "memory": "8Gi", "gpu.intel.com/i915": 1}},
        "nodeSelector": {"intel.feature.node.kubernetes.io/gpu": "true"},
        "podSecurityContext": {"supplementalGroups": [109]},
    },
}


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param, render_text(VARIANTS[request.param])


def test_every_variant_passes_the_kubernetes_1_33_schemas(variant: tuple[str, str]) -> None:
    name, text = variant
    findings = validate_text(text, name, versions=["1.33.0"])
    assert findings
    assert [str(finding) for finding in findings if not finding.ok] == []


def test_every_variant_passes_yamllint(variant: tuple[str, str]) -> None:
    name, text = variant
    config = YamlLintConfig(file=str(ROOT / ".yamllint"))
    problems = [f"{problem.line}:{problem.column} {problem.message}" for problem in linter.run(text, config)]
    assert problems == [], name


def test_checked_in_manifests_are_the_default_render() -> None:
    assert MANIFEST.read_text().split("\n", 2)[2] == render_text()


@pytest.mark.parametrize(
    ("cpu_limit", "threads"), [("2", 2), (4, 4), ("1500m", 1), ("500m", 1), (2.5, 2), ("3000m", 3)]
)
def test_engine_threads_follow_the_cpu_limit(cpu_limit: object, threads: int) -> None:
    objects = render_objects({"resources": {"limits": {"cpu": cpu_limit}}})
    plugin_config = json.loads(arg_value(server_container(objects)["args"], "--plugin_config"))
    assert plugin_config == {"INFERENCE_NUM_THREADS": threads}


def test_explicit_thread_count_wins_over_the_cpu_limit() -> None:
    objects = render_objects({"server": {"inferenceNumThreads": 3}})
    assert json.loads(arg_value(server_container(objects)["args"], "--plugin_config")) == {"INFERENCE_NUM_THREADS": 3}


def test_missing_cpu_limit_is_refused_rather_than_guessed() -> None:
    assert "resources.limits.cpu is required" in helm_fails({"resources": {"limits": {"cpu": None}}})


def test_grace_period_covers_prestop_sleep_and_drain() -> None:
    objects = render_objects({"server": {"drainTimeoutSeconds": 45}, "preStop": {"sleepSeconds": 10}})
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 10 + 45
    assert arg_value(server_container(objects)["args"], "--drain_timeout") == "45"
    assert server_container(objects)["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "10"]}}


def test_grace_period_shorter_than_the_drain_is_refused() -> None:
    error = helm_fails({"terminationGracePeriodSeconds": 30, "server": {"drainTimeoutSeconds": 30}})
    assert "must exceed preStop.sleepSeconds + server.drainTimeoutSeconds" in error


def test_probes_use_the_health_endpoints_and_startup_allows_a_model_load() -> None:
    container = server_container(render_objects())
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/v2/health/ready"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_rolling_update_never_drops_below_the_replica_count() -> None:
    deployment = only(render_objects(), "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    assert only(render_objects(VARIANTS["fixed-replicas"]), "Deployment")["spec"]["replicas"] == 3


def test_pod_runs_non_root_on_a_read_only_root_with_writable_tmp() -> None:
    objects = render_objects()
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    container = server_container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert {"name": "HOME", "value": "/tmp"} in container["env"]
    assert pod["automountServiceAccountToken"] is False


def test_openvino_cache_dir_gets_its_own_writable_volume() -> None:
    objects = render_objects(VARIANTS["openvino-cache-and-gpu-node"])
    container = server_container(objects)
    config = json.loads(arg_value(container["args"], "--plugin_config"))
    assert config == {"INFERENCE_NUM_THREADS": 4, "CACHE_DIR": "/cache/openvino"}
    assert any(mount["mountPath"] == "/cache/openvino" for mount in container["volumeMounts"])


def test_api_key_file_comes_from_the_secret() -> None:
    objects = render_objects()
    container = server_container(objects)
    assert arg_value(container["args"], "--api_key_file") == "/etc/ovserve/api-keys/keys"
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    secret = next(volume["secret"] for volume in pod["volumes"] if "secret" in volume)
    assert secret == {"secretName": "ovserve-api-keys", "items": [{"key": "keys", "path": "keys"}]}
    assert not any(item["kind"] == "Secret" for item in objects)  # keys never come from values


def test_api_key_env_mode_uses_the_secret_and_no_file() -> None:
    container = server_container(render_objects(VARIANTS["key-from-env-metrics-public"]))
    assert "--api_key_file" not in container["args"]
    assert "--metrics_public" in container["args"]
    env = {item["name"]: item for item in container["env"]}
    assert env["OVSERVE_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "ovserve-api-keys", "key": "key"}


def test_hpa_scales_on_queue_depth_per_pod() -> None:
    hpa = only(render_objects(), "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "ovserve_requests_waiting"},
                "target": {"type": "AverageValue", "averageValue": "4"},
            },
        }
    ]
    assert hpa["spec"]["minReplicas"] >= 2  # a PDB of maxUnavailable 1 still leaves one serving


def test_hpa_falls_back_to_cpu_without_the_custom_metric() -> None:
    hpa = only(render_objects(VARIANTS["cpu-autoscaling-fallback"]), "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}
    ]


def test_service_monitor_scrapes_metrics_with_the_key_as_bearer_token() -> None:
    monitor = only(render_objects(VARIANTS["service-monitor"]), "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "ovserve-api-keys", "key": "metrics"},
    }
    public = {"serviceMonitor": {"enabled": True}, "server": {"metricsPublic": True}}
    assert "authorization" not in only(render_objects(public), "ServiceMonitor")["spec"]["endpoints"][0]


def test_service_selects_the_pods_and_offers_client_ip_affinity() -> None:
    objects = render_objects(VARIANTS["client-ip-affinity"])
    service = only(objects, "Service")
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] > 0
    assert only(render_objects(), "Service")["spec"]["sessionAffinity"] == "None"


def test_pdb_allows_one_pod_down() -> None:
    objects = render_objects()
    pdb = only(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == only(objects, "Service")["spec"]["selector"]


def test_model_sources_mount_read_only_at_models() -> None:
    for variant, expected in [("defaults", "persistentVolumeClaim"), ("model-from-image-volume", "image")]:
        objects = render_objects(VARIANTS[variant])
        models = next(mount for mount in server_container(objects)["volumeMounts"] if mount["name"] == "models")
        assert models == {"name": "models", "mountPath": "/models", "readOnly": True}
        pod = only(objects, "Deployment")["spec"]["template"]["spec"]
        assert expected in next(volume for volume in pod["volumes"] if volume["name"] == "models")


def test_image_source_without_a_reference_is_refused() -> None:
    assert "model.image.reference is required" in helm_fails({"model": {"source": "image"}})


def test_unknown_model_source_is_refused() -> None:
    assert "model.source must be pvc, image or export" in helm_fails({"model": {"source": "s3"}})


def test_alerts_and_dashboard_are_off_by_default() -> None:
    kinds = {item["kind"] for item in render_objects()}
    assert "PrometheusRule" not in kinds and "ConfigMap" not in kinds


def test_prometheus_rule_holds_the_alert_rule_file() -> None:
    rule = only(render_objects(VARIANTS["alerts-and-dashboard"]), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    # The file's groups, untouched: the alerts' {{ $labels }} templates are Prometheus', not helm's.
    assert rule["spec"] == yaml.safe_load((ROOT / "deploy" / "monitoring" / "ovserve-alerts.yaml").read_text())
    assert "{{ $labels.model }}" in rule["spec"]["groups"][0]["rules"][0]["annotations"]["summary"]


def test_dashboard_config_map_holds_the_dashboard_for_grafana_s_sidecar() -> None:
    config_map = only(render_objects(VARIANTS["alerts-and-dashboard"]), "ConfigMap")
    metadata = config_map["metadata"]
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["annotations"] == {"grafana_folder": "LLM"}
    assert metadata["namespace"] == "monitoring"
    dashboard = (ROOT / "deploy" / "monitoring" / "ovserve-dashboard.json").read_text()
    assert config_map["data"] == {"ovserve-dashboard.json": dashboard}
    in_release_namespace = only(render_objects({"monitoring": {"dashboard": {"enabled": True}}}), "ConfigMap")
    assert "namespace" not in in_release_namespace["metadata"]
