#!/usr/bin/env bash
# Offline checks of deploy/: the chart lints and renders with helm, the checked-in manifests match
# the chart, every manifest passes the Kubernetes API schemas (kubernetes-validate, strict) and
# yamllint, the chart's routing example (an InferencePool and its endpoint picker) renders to
# manifests that pass them and the InferencePool CRD's schema (deploy/crds), and the alert rules
# pass promtool's check and their unit tests. tests/deploy renders
# the chart's other variants, checks the container args against `ovserve serve`'s parser, and the
# metrics the alerts and the dashboard name against a running server. Called by scripts/test.sh;
# runs in the project's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_helm.sh >/dev/null
bash scripts/install_promtool.sh >/dev/null
# shellcheck disable=SC1091
. .venv/bin/activate
routing_values=deploy/helm/ovserve/examples/inference-pool.values.yaml
routing=$(mktemp --suffix=.yaml)
trap 'rm -f "$routing"' EXIT
helm lint --strict deploy/helm/ovserve
helm lint --strict deploy/helm/ovserve --values "$routing_values"
python scripts/render_manifests.py --check
helm template ovserve deploy/helm/ovserve --values "$routing_values" >"$routing"
python scripts/validate_manifests.py deploy/manifests/*.yaml deploy/kserve/*.yaml "$routing"
yamllint --strict deploy .yamllint "$routing"
promtool check rules deploy/monitoring/ovserve-alerts.yaml
promtool test rules deploy/monitoring/ovserve-alerts.test.yaml
