#!/usr/bin/env bash
# Installs the system tools the test suite needs, only when they are missing:
# Java + Maven (the real Kafka broker), promtool (Prometheus rule checks) and
# kustomize (the deployment tests: kubectl's when installed, else built from the
# Go module proxy into tools/bin), Chromium + chromedriver (the report is checked
# in a real browser, tests/cli/test_replay.py) and Mosquitto (the MQTT broker of the
# edge tests, started by tools/mosquitto.py).
# Idempotent: a machine that has them is left untouched.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v kubectl >/dev/null 2>&1 && [ ! -x "$here/bin/kustomize" ]; then
  echo "ensure-system-deps: building kustomize v5.4.3 into tools/bin (Go module proxy)" >&2
  GOBIN="$here/bin" go install sigs.k8s.io/kustomize/kustomize/v5@v5.4.3
fi
missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null 2>&1 || missing+=(mosquitto)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "ensure-system-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
