#!/usr/bin/env bash
# Create (or reuse) the kind cluster for the e2e suite and the demo, add fake GPU capacity, install
# LeaderWorkerSet, and build and load the images the tests run: the operator, vllm-router, and the vLLM
# simulator (kind runs real containers, and vLLM needs a GPU). Prints the kubeconfig path on its last line.
#
# Env: KIND_CLUSTER_NAME (default disagg-e2e), KIND_NODE_IMAGE, SKIP_LWS=1, SKIP_IMAGE=1 (no image builds).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NAME=${KIND_CLUSTER_NAME:-disagg-e2e}
KUBECONFIG_FILE=${TMPDIR:-/tmp}/disagg-kind-$NAME.kubeconfig
export KUBECONFIG=$KUBECONFIG_FILE

if ! kind get clusters 2>/dev/null | grep -qx "$NAME"; then
	kind create cluster --name "$NAME" --config "$HERE/kind-config.yaml" \
		${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s >&2
fi
kind get kubeconfig --name "$NAME" >"$KUBECONFIG_FILE"
kubectl wait node --all --for=condition=Ready --timeout=180s >&2

# Fake GPUs: extended resources are advertised by patching node *status*
# capacity (the kubelet keeps unknown extended resources and copies them into
# allocatable). Taints match e2e/controlplane/nodes.yaml.
fake_gpus() { # fake_gpus NODE RESOURCE
	local node=$1 res=$2
	kubectl taint node "$node" --overwrite "$res=present:NoSchedule" >&2
	kubectl patch node "$node" --subresource=status --type=json -p "[
		{\"op\": \"add\", \"path\": \"/status/capacity/${res/\//~1}\", \"value\": \"8\"},
		{\"op\": \"add\", \"path\": \"/status/capacity/rdma~1ib\", \"value\": \"8\"}]" >&2
	kubectl wait node "$node" --timeout=60s \
		--for=jsonpath="{.status.allocatable.${res//./\\.}}"=8 >&2
}
for index in "" 2 3 4; do fake_gpus "$NAME-worker$index" nvidia.com/gpu; done
for index in 5 6; do fake_gpus "$NAME-worker$index" amd.com/gpu; done

# LeaderWorkerSet from its release manifests (the version pinned for the local
# control plane); the controller image is pulled by the kind nodes.
LWS_VERSION=$(sed -n 's/^LWS_VERSION=//p' "$REPO/e2e/controlplane/versions.env")
if [[ -z "${SKIP_LWS:-}" ]]; then
	kubectl apply --server-side -f \
		"https://github.com/kubernetes-sigs/lws/releases/download/$LWS_VERSION/manifests.yaml" >&2
	kubectl -n lws-system wait deploy/lws-controller-manager --for=condition=Available --timeout=180s >&2
fi

# Images: built here and loaded into the nodes, so nothing is pulled from a registry that may not have them.
build_and_load() { # build_and_load DOCKERFILE IMAGE
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		docker build -f "$1" -t "$2" "$REPO" >&2
		kind load docker-image "$2" --name "$NAME" >&2
	else # Podman: kind loads an image archive
		podman build -f "$1" -t "$2" "$REPO" >&2
		archive=$(mktemp "${TMPDIR:-/tmp}/disagg-image.XXXXXX.tar")
		podman save -o "$archive" "$2" >&2
		kind load image-archive "$archive" --name "$NAME" >&2
		rm -f "$archive"
	fi
}
if [[ -z "${SKIP_IMAGE:-}" ]]; then
	build_and_load "$REPO/operator/Dockerfile" "${DISAGG_E2E_OPERATOR_IMAGE:-ghcr.io/disagg-dev/disagg-operator:e2e}"
	build_and_load "$REPO/images/vllm-router/Dockerfile" "${DISAGG_E2E_ROUTER_IMAGE:-ghcr.io/disagg-dev/vllm-router:e2e}"
	build_and_load "$REPO/images/vllm-sim/Dockerfile" "${DISAGG_E2E_ENGINE_IMAGE:-disagg-vllm-sim:e2e}"
fi
echo "$KUBECONFIG_FILE"
