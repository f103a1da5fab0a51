"""The chart's routing option (inferencePool): an InferencePool of the server's pods that its CRD
accepts, and an endpoint picker whose config reads the gauges ovserve exports under the names
ovserve.scrape declares (docs/routing.md), wired to the pool, its pods and its RBAC."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from ovserve.scrape import ROUTING_METRICS
from scripts.render_manifests import CHART
from scripts.validate_manifests import validate_text
from tests.deploy.chart import Manifest, helm_fails, only, render_objects, render_text

EXAMPLE = CHART / "examples" / "inference-pool.values.yaml"
MODEL = "qwen2.5-0.5b-instruct"  # the example's model.single.name
ENGINE_LABELS = ("llm-d.ai/engine-type", "inference.networking.k8s.io/engine-type")
# The endpoint picker's parsing of a metric spec (llm-d-router, extractor/metrics/spec.go):
# name{label="value",...}, the pairs split on commas.
SPEC = re.compile(r"^\s*(\S+?)\s*(?:\{([^}]*)\})?\s*$")
PAIR = re.compile(r'^\s*(\S+?)\s*=\s*"([^"]*)"\s*$')


def example() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return values


@pytest.fixture(scope="module")
def objects() -> list[Manifest]:
    return render_objects(example())


def named(objects: list[Manifest], kind: str, name: str) -> Manifest:
    [found] = [item for item in objects if item["kind"] == kind and item["metadata"]["name"] == name]
    return found


def picker_config(objects: list[Manifest]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(named(objects, "ConfigMap", "ovserve-epp")["data"]["config.yaml"])
    return config


def extractor_parameters(objects: list[Manifest]) -> dict[str, Any]:
    """The parameters of the picker's core-metrics-extractor plugin."""
    [plugin] = [item for item in picker_config(objects)["plugins"] if item["type"] == "core-metrics-extractor"]
    parameters: dict[str, Any] = plugin["parameters"]
    return parameters


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    match = SPEC.match(spec)
    assert match, spec
    pairs = [PAIR.match(pair) for pair in match.group(2).split(",")] if match.group(2) else []
    assert all(pairs), spec
    return match.group(1), {pair.group(1): pair.group(2) for pair in pairs if pair}


def test_routing_is_off_by_default() -> None:
    objects = render_objects()
    assert not [item for item in objects if item["kind"] in {"InferencePool", "Role", "RoleBinding", "ConfigMap"}]
    assert len([item for item in objects if item["kind"] == "Deployment"]) == 1
    labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not set(ENGINE_LABELS) & set(labels)


def test_the_example_passes_the_kubernetes_schemas_and_the_inference_pool_crd() -> None:
    findings = validate_text(render_text(example()), "inference-pool", versions=["1.29.0", "1.33.0"])
    assert [str(finding) for finding in findings if not finding.ok] == []
    [pool] = [finding for finding in findings if finding.resource.startswith("InferencePool/")]
    assert "valid against the CRD schema of inference.networking.k8s.io_inferencepools.yaml" in pool.message


def test_the_pool_selects_the_server_pods_on_their_port_and_names_the_picker_service(
    objects: list[Manifest],
) -> None:
    pool = only(objects, "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    server = named(objects, "Deployment", "ovserve")
    picker = named(objects, "Deployment", "ovserve-epp")
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector.items() <= server["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= picker["spec"]["template"]["metadata"]["labels"].items()
    [container] = [item for item in server["spec"]["template"]["spec"]["containers"] if item["name"] == "ovserve"]
    assert pool["spec"]["targetPorts"] == [{"number": container["ports"][0]["containerPort"]}]
    ref = pool["spec"]["endpointPickerRef"]
    service = named(objects, "Service", ref["name"])
    ext_proc = next(port for port in service["spec"]["ports"] if port["name"] == "grpc-ext-proc")
    assert ref["port"]["number"] == ext_proc["port"]
    assert ext_proc["appProtocol"] == "kubernetes.io/h2c"
    assert service["spec"]["selector"].items() <= picker["spec"]["template"]["metadata"]["labels"].items()
    assert ref["failureMode"] == "FailOpen"
    # The server's own Service, PDB and HPA do not take in the picker's pods.
    server_service = named(objects, "Service", "ovserve")
    assert not server_service["spec"]["selector"].items() <= picker["spec"]["template"]["metadata"]["labels"].items()


def test_server_pods_carry_the_engine_type_the_picker_config_is_keyed_by(objects: list[Manifest]) -> None:
    labels = named(objects, "Deployment", "ovserve")["spec"]["template"]["metadata"]["labels"]
    assert {labels[key] for key in ENGINE_LABELS} == {"ovserve"}
    parameters = extractor_parameters(objects)
    [engine] = parameters["engineConfigs"]
    assert engine["name"] == parameters["defaultEngine"] == "ovserve"


def test_the_picker_reads_ovserve_s_routing_gauges_of_the_routed_model(objects: list[Manifest]) -> None:
    config = picker_config(objects)
    assert (config["apiVersion"], config["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    plugins = {plugin["type"]: plugin for plugin in config["plugins"]}
    [engine] = extractor_parameters(objects)["engineConfigs"]
    read = {field: parse_spec(engine[field]) for field in ROUTING_METRICS}
    assert read == {field: (name, {"model": MODEL}) for field, name in ROUTING_METRICS.items()}
    # ovserve_cache_config_info's labels (vLLM's says num_gpu_blocks).
    assert (engine["cacheBlockSizeLabelName"], engine["cacheNumBlocksLabelName"]) == ("block_size", "num_blocks")
    assert "loraSpec" not in engine  # no LoRA info metric: the picker's LoRA affinity stays off
    source = plugins["metrics-data-source"]["parameters"]
    assert (source["scheme"], source["path"], source["interval"]) == ("http", "/metrics", "250ms")
    [profile] = config["schedulingProfiles"]
    scorers = {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"}
    assert {ref["pluginRef"] for ref in profile["plugins"]} == scorers <= set(plugins)


def test_the_picker_runs_on_its_pool_its_config_and_its_rbac(objects: list[Manifest]) -> None:
    deployment = named(objects, "Deployment", "ovserve-epp")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = container["args"]
    flag = {name: args[args.index(name) + 1] for name in ("--pool-name", "--pool-group", "--config-file")}
    assert flag["--pool-name"] == only(objects, "InferencePool")["metadata"]["name"]
    assert flag["--pool-group"] == "inference.networking.k8s.io"
    mount = next(item for item in container["volumeMounts"] if flag["--config-file"].startswith(item["mountPath"]))
    volume = next(item for item in pod["volumes"] if item["name"] == mount["name"])
    config_map = named(objects, "ConfigMap", volume["configMap"]["name"])
    assert flag["--config-file"].removeprefix(mount["mountPath"] + "/") in config_map["data"]
    service = named(objects, "Service", "ovserve-epp")
    ports = {port["name"] for port in container["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports
    assert container["readinessProbe"]["grpc"]["port"] == next(
        port["containerPort"] for port in container["ports"] if port["name"] == "grpc-health"
    )
    binding = named(objects, "RoleBinding", "ovserve-epp")
    [subject] = binding["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "default"}
    rules = named(objects, "Role", binding["roleRef"]["name"])["rules"]
    watched = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    assert {("", "pods"), ("inference.networking.k8s.io", "inferencepools")} <= watched
    assert all(rule["verbs"] == ["get", "watch", "list"] for rule in rules)  # reads, never writes
    assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]


def test_a_key_guarded_metrics_endpoint_is_refused() -> None:
    values = {**example(), "server": {"metricsPublic": False}}
    assert "needs server.metricsPublic=true" in helm_fails(values)
    unguarded = {**values, "apiKey": {"enabled": False}}
    assert only(render_objects(unguarded), "InferencePool")


def test_config_mode_needs_the_routed_model_s_name() -> None:
    values = {"inferencePool": {"enabled": True}, "server": {"metricsPublic": True}}
    assert "inferencePool.modelName is required with model.mode=config" in helm_fails(values)
    named_model = {**values, "inferencePool": {"enabled": True, "modelName": "Qwen/Qwen3-8B"}}
    [engine] = extractor_parameters(render_objects(named_model))["engineConfigs"]
    assert parse_spec(engine["queuedRequestsSpec"]) == ("ovserve_requests_waiting", {"model": "Qwen/Qwen3-8B"})


@pytest.mark.parametrize("name", ['a"b', "a,b", "a}b"])
def test_a_model_name_that_would_break_the_picker_s_selector_is_refused(name: str) -> None:
    values = {**example(), "inferencePool": {"enabled": True, "modelName": name}}
    assert "cannot go into a metric selector" in helm_fails(values)
