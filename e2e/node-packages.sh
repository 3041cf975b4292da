#!/usr/bin/env bash
# Install the Debian packages the local cluster's real node needs (containerd, runc, iptables, iproute2) when any
# is missing. The images' builder (docker.io, mmdebstrap) is installed by e2e/images itself. Needs root; fails loudly
# otherwise, so CI never runs without the real node by accident.
set -euo pipefail
need=()
for tool in containerd:containerd containerd-shim-runc-v2:containerd runc:runc ctr:containerd iptables:iptables ip:iproute2; do
	command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
[[ ${#need[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
	echo "node-packages: missing ${need[*]}; install them as root (apt-get install ${need[*]}) or run without the" \
		"real node (DISAGG_E2E_REAL_NODE=0)" >&2
	exit 1
fi
mapfile -t unique < <(printf '%s\n' "${need[@]}" | sort -u)
echo "node-packages: installing ${unique[*]}" >&2
DEBIAN_FRONTEND=noninteractive apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${unique[@]}" >&2
