#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus and promtool) for the integration test, if missing, without
# starting its service: when the machine has no /usr/sbin/policy-rc.d, a temporary one refuses service starts
# during the install and is removed afterwards. Same sudo pattern as scripts/deps.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
policy=/usr/sbin/policy-rc.d
made_policy=0
cleanup() { if [ "$made_policy" = 1 ]; then $sudo_cmd rm -f "$policy"; fi; }
trap cleanup EXIT
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# temporary, from tests/metrics/install_prometheus.sh: start no service while installing\nexit 101\n' |
    $sudo_cmd tee "$policy" >/dev/null
  $sudo_cmd chmod 755 "$policy"
  made_policy=1
fi
echo "install_prometheus: installing Debian's prometheus package"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends prometheus >/dev/null
