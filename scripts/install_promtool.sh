#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker and rule unit-test runner) into .venv/bin, from
# Debian's `prometheus` package, which ships it: `apt-get download` fetches the .deb (apt checks it
# against the archive's signed index) and only usr/bin/promtool is unpacked from it, so no
# Prometheus server is installed, started or left behind. A promtool on PATH is used as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=.venv/bin/promtool

if [ -x "$TARGET" ] || command -v promtool >/dev/null; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
download() { (cd "$work" && apt-get download -q=2 -o APT::Sandbox::User=root prometheus); }
# A fresh machine may have no package lists yet.
download 2>/dev/null || { apt-get update -q=2 && download; }
dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$work" ./usr/bin/promtool
install -m 0755 "$work/usr/bin/promtool" "$TARGET"
"$TARGET" --version | head -n 1
