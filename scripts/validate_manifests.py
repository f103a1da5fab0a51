"""Validate Kubernetes manifests offline against the API schemas of given Kubernetes versions.

    python scripts/validate_manifests.py deploy/manifests/ovserve.yaml deploy/kserve/*.yaml

Built-in kinds are checked with kubernetes-validate in strict mode (unknown fields, such as a
misspelled one, fail). A custom resource whose CRD is kept in deploy/crds (the InferencePool) is
checked against that CRD's schema, its objects closed as strict field validation treats them, its
metadata as an ObjectMeta; the CRD's CEL rules are not evaluated (the finding counts them). For
other custom resources, what they embed from core v1 is checked instead: a ServingRuntime's
containers and volumes, and an InferenceService predictor's model container, are validated as a
Pod. A ServiceMonitor or PrometheusRule embeds nothing from core v1 and is skipped with that
reason (tests/deploy checks its fields; promtool its rules). Any other unknown kind fails.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

CRD_DIR = Path(__file__).resolve().parents[1] / "deploy" / "crds"

# The chart's kubeVersion floor, the version the chart targets, the newest kubernetes-validate knows.
DEFAULT_VERSIONS = ("1.29.0", "1.33.0", "1.37.0")
# Model-container fields of an InferenceService predictor that are KServe's, not a Container's.
KSERVE_MODEL_FIELDS = {"modelFormat", "runtime", "storageUri", "protocolVersion", "storage"}
_OPERATOR_CRD = "a prometheus-operator CRD with no core v1 parts and no schema available offline"
SKIPPED = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _OPERATOR_CRD,
    ("monitoring.coreos.com/v1", "PrometheusRule"): _OPERATOR_CRD,
}


@dataclass
class Finding:
    source: str
    resource: str
    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.source}: {self.resource}: {self.message}"


@dataclass(frozen=True)
class CustomSchema:
    """One served version of a CRD kept in deploy/crds."""

    source: str  # the CRD's file name
    schema: dict[str, Any]  # its openAPIV3Schema, objects closed (see closed_objects)
    cel_rules: int  # x-kubernetes-validations rules in it, not evaluated here


def closed_objects(schema: Any) -> Any:
    """``schema`` with each object that lists its properties closed to others (unless it says it
    keeps unknown fields): the API server prunes unknown fields, and refuses them under strict field
    validation, kubectl's default; a JSON Schema would let them through."""
    if isinstance(schema, list):
        return [closed_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: closed_objects(value) for key, value in schema.items()}
    open_ended = "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in schema and not open_ended:
        closed["additionalProperties"] = False
    return closed


def _count_rules(schema: Any) -> int:
    if isinstance(schema, list):
        return sum(_count_rules(item) for item in schema)
    if not isinstance(schema, dict):
        return 0
    return len(schema.get("x-kubernetes-validations", [])) + sum(_count_rules(value) for value in schema.values())


@cache
def custom_schemas(directory: Path = CRD_DIR) -> dict[tuple[str, str], CustomSchema]:
    """(apiVersion, kind) -> the schema of each served version of the CRDs in ``directory``."""
    schemas: dict[tuple[str, str], CustomSchema] = {}
    for path in sorted(directory.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                raw = version["schema"]["openAPIV3Schema"]
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schemas[key] = CustomSchema(path.name, closed_objects(raw), _count_rules(raw))
    return schemas


def validate_custom(document: dict[str, Any], source: str, custom: CustomSchema) -> Iterator[Finding]:
    """A custom resource against its CRD's schema, and its metadata as any object's."""
    resource = f"{document.get('kind')}/{(document.get('metadata') or {}).get('name')}"
    errors = sorted(jsonschema.Draft7Validator(custom.schema).iter_errors(document), key=lambda error: error.path)
    for error in errors:
        path = ".".join(str(part) for part in error.absolute_path) or "(root)"
        yield Finding(source, resource, False, f"schema of {custom.source}: {path}: {error.message}")
    # ObjectMeta's own rules (name format, label syntax) are the same for every kind.
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": document.get("metadata") or {}}
    try:
        kubernetes_validate.validate(holder, DEFAULT_VERSIONS[-1], strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(part) for part in exc.absolute_path) or "(root)"
        yield Finding(source, resource, False, f"ObjectMeta: {path}: {exc.message}")
        return
    if not errors:
        unchecked = f"; {custom.cel_rules} CEL rules not evaluated" if custom.cel_rules else ""
        yield Finding(source, resource, True, f"valid against the CRD schema of {custom.source}{unchecked}")


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def core_parts(document: dict[str, Any]) -> dict[str, Any] | None:
    """The core v1 object a custom resource embeds, as a Pod to validate; None if it embeds none."""
    kind, spec = document.get("kind"), document.get("spec") or {}
    name = (document.get("metadata") or {}).get("name", "unnamed")
    runtimes = {"ServingRuntime", "ClusterServingRuntime"}
    if document.get("apiVersion") == "serving.kserve.io/v1alpha1" and kind in runtimes:
        pod_spec = {"containers": spec.get("containers", [])}
        if "volumes" in spec:
            pod_spec["volumes"] = spec["volumes"]
        return _pod(name, pod_spec)
    if document.get("apiVersion") == "serving.kserve.io/v1beta1" and kind == "InferenceService":
        model = dict((spec.get("predictor") or {}).get("model") or {})
        container = {key: value for key, value in model.items() if key not in KSERVE_MODEL_FIELDS}
        # KServe fills the container's name and image from the runtime.
        container.update(name="kserve-container", image="runtime-image")
        return _pod(name, {"containers": [container]})
    return None


def validate_document(document: dict[str, Any], source: str, versions: Iterable[str]) -> Iterator[Finding]:
    resource = f"{document.get('kind')}/{(document.get('metadata') or {}).get('name')}"
    key = (document.get("apiVersion"), document.get("kind"))
    if key in SKIPPED:
        yield Finding(source, resource, True, f"skipped: {SKIPPED[key]}")
        return
    custom = custom_schemas().get((str(key[0]), str(key[1])))
    if custom is not None:
        yield from validate_custom(document, source, custom)
        return
    embedded = core_parts(document)
    target, what = (embedded, "embedded core v1 parts (as a Pod)") if embedded is not None else (document, "schema")
    for version in versions:
        try:
            checked = kubernetes_validate.validate(target, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            yield Finding(source, resource, False, f"no schema for {key[0]} {key[1]} in Kubernetes {version}")
            return
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(part) for part in exc.absolute_path) or "(root)"
            yield Finding(source, resource, False, f"{what}, Kubernetes {version}: {path}: {exc.message}")
            continue
        yield Finding(source, resource, True, f"{what} valid for Kubernetes {checked}")


def validate_text(text: str, source: str, versions: Iterable[str] = DEFAULT_VERSIONS) -> list[Finding]:
    findings: list[Finding] = []
    for document in yaml.safe_load_all(text):
        if document is None:
            continue
        if not isinstance(document, dict) or "kind" not in document or "apiVersion" not in document:
            findings.append(Finding(source, "?", False, "not a Kubernetes object (no apiVersion/kind)"))
            continue
        findings.extend(validate_document(document, source, versions))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "-k", "--kubernetes-version", action="append", dest="versions", help="repeatable; default: 1.29, 1.33, 1.37"
    )
    args = parser.parse_args(argv)
    findings = []
    for path in args.files:
        findings += validate_text(path.read_text(), str(path), args.versions or DEFAULT_VERSIONS)
    for finding in findings:
        print(finding)
    failed = [finding for finding in findings if not finding.ok]
    print(f"{len(findings) - len(failed)} checks passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
