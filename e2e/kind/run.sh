#!/usr/bin/env bash
# Run the e2e suite against a kind cluster. Needs a container engine (Docker
# or Podman), kind, kubectl and the Python test dependencies.
#
#   e2e/kind/run.sh [pytest args...]
# Env: KIND_CLUSTER_NAME (default disagg-e2e), KIND_NODE_IMAGE (kindest/node
#      tag; default: kind's own), KEEP_CLUSTER=1 to keep the cluster afterwards,
#      SKIP_LWS=1 to leave LeaderWorkerSet out, SKIP_IMAGE=1 to skip building
#      the operator image, DISAGG_E2E_OPERATOR_IMAGE to name it (default
#      ghcr.io/disagg-dev/disagg-operator:e2e).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NAME=${KIND_CLUSTER_NAME:-disagg-e2e}
created=0
kind get clusters 2>/dev/null | grep -qx "$NAME" || created=1
KUBECONFIG_FILE=$("$HERE/up.sh" | tail -n1)
export KUBECONFIG=$KUBECONFIG_FILE
if [[ $created == 1 && -z "${KEEP_CLUSTER:-}" ]]; then
	trap 'kind delete cluster --name "$NAME"; rm -f "$KUBECONFIG_FILE"' EXIT
fi
# The engines run the vLLM simulator and the router the image built from images/vllm-router (see up.sh).
export DISAGG_E2E_OPERATOR_IMAGE=${DISAGG_E2E_OPERATOR_IMAGE:-ghcr.io/disagg-dev/disagg-operator:e2e}
export DISAGG_E2E_ROUTER_IMAGE=${DISAGG_E2E_ROUTER_IMAGE:-ghcr.io/disagg-dev/vllm-router:e2e}
export DISAGG_E2E_ENGINE_IMAGE=${DISAGG_E2E_ENGINE_IMAGE:-disagg-vllm-sim:e2e}

cd "$REPO"
DISAGG_E2E_KUBECONFIG=$KUBECONFIG_FILE python -m pytest e2e "$@"
