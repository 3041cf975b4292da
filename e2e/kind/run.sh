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
KUBECONFIG_FILE=${TMPDIR:-/tmp}/disagg-kind-$NAME.kubeconfig
export KUBECONFIG=$KUBECONFIG_FILE

created=0
if ! kind get clusters 2>/dev/null | grep -qx "$NAME"; then
	kind create cluster --name "$NAME" --config "$HERE/kind-config.yaml" \
		${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s
	created=1
fi
kind get kubeconfig --name "$NAME" >"$KUBECONFIG_FILE"
if [[ $created == 1 && -z "${KEEP_CLUSTER:-}" ]]; then
	trap 'kind delete cluster --name "$NAME"; rm -f "$KUBECONFIG_FILE"' EXIT
fi
kubectl wait node --all --for=condition=Ready --timeout=180s

# Fake GPUs: extended resources are advertised by patching node *status*
# capacity (the kubelet keeps unknown extended resources and copies them into
# allocatable). Taints match e2e/controlplane/nodes.yaml.
fake_gpus() { # fake_gpus NODE RESOURCE
	local node=$1 res=$2
	kubectl taint node "$node" --overwrite "$res=present:NoSchedule"
	kubectl patch node "$node" --subresource=status --type=json -p "[
		{\"op\": \"add\", \"path\": \"/status/capacity/${res/\//~1}\", \"value\": \"8\"},
		{\"op\": \"add\", \"path\": \"/status/capacity/rdma~1ib\", \"value\": \"8\"}]"
	kubectl wait node "$node" --timeout=60s \
		--for=jsonpath="{.status.allocatable.${res//./\\.}}"=8
}
fake_gpus "$NAME-worker" nvidia.com/gpu
fake_gpus "$NAME-worker2" amd.com/gpu

# LeaderWorkerSet from its release manifests (the version pinned for the local
# control plane); the controller image is pulled by the kind nodes.
LWS_VERSION=$(sed -n 's/^LWS_VERSION=//p' "$REPO/e2e/controlplane/versions.env")
if [[ -z "${SKIP_LWS:-}" ]]; then
	kubectl apply --server-side -f \
		"https://github.com/kubernetes-sigs/lws/releases/download/$LWS_VERSION/manifests.yaml"
	kubectl -n lws-system wait deploy/lws-controller-manager --for=condition=Available --timeout=180s
fi

# ---- operator image -------------------------------------------------------
# Built from operator/Dockerfile and loaded into the nodes, so the Helm chart's
# Deployment (e2e/test_helm.py) runs the code under test. SKIP_IMAGE=1 skips
# the build (the chart's pod then stays in ImagePullBackOff and the install
# test fails unless DISAGG_E2E_OPERATOR_IMAGE names a pullable image).
export DISAGG_E2E_OPERATOR_IMAGE=${DISAGG_E2E_OPERATOR_IMAGE:-ghcr.io/disagg-dev/disagg-operator:e2e}
if [[ -z "${SKIP_IMAGE:-}" ]]; then
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		docker build -f "$REPO/operator/Dockerfile" -t "$DISAGG_E2E_OPERATOR_IMAGE" "$REPO"
		kind load docker-image "$DISAGG_E2E_OPERATOR_IMAGE" --name "$NAME"
	else # Podman: kind loads an image archive
		podman build -f "$REPO/operator/Dockerfile" -t "$DISAGG_E2E_OPERATOR_IMAGE" "$REPO"
		archive=$(mktemp "${TMPDIR:-/tmp}/disagg-operator-image.XXXXXX.tar")
		podman save -o "$archive" "$DISAGG_E2E_OPERATOR_IMAGE"
		kind load image-archive "$archive" --name "$NAME"
		rm -f "$archive"
	fi
fi
# ---------------------------------------------------------------------------

cd "$REPO"
DISAGG_E2E_KUBECONFIG=$KUBECONFIG_FILE python -m pytest e2e "$@"
