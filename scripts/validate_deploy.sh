#!/usr/bin/env bash
# Offline checks of deploy/: the chart lints and renders with helm, the checked-in manifests match
# the chart, every manifest passes the Kubernetes API schemas (kubernetes-validate, strict) and
# yamllint, and the alert rules pass promtool's check and their unit tests. tests/deploy renders
# the chart's other variants, checks the container args against `ovserve serve`'s parser, and the
# metrics the alerts and the dashboard name against a running server. Called by scripts/test.sh;
# runs in the project's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_helm.sh >/dev/null
bash scripts/install_promtool.sh >/dev/null
# shellcheck disable=SC1091
. .venv/bin/activate
helm lint --strict deploy/helm/ovserve
python scripts/render_manifests.py --check
python scripts/validate_manifests.py deploy/manifests/*.yaml deploy/kserve/*.yaml
yamllint --strict deploy .yamllint
promtool check rules deploy/monitoring/ovserve-alerts.yaml
promtool test rules deploy/monitoring/ovserve-alerts.test.yaml
