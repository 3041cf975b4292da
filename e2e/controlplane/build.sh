#!/usr/bin/env bash
# Build the local Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) plus kwok, helm and the
# LeaderWorkerSet controller from Go modules, into a versioned cache directory outside the repository.
#
# Idempotent: each component has a stamp file recording the version it was
# built from; a component whose stamp matches is skipped, and `.complete` marks
# a full set. Timings (wall clock, peak RSS) of every step that actually ran
# are appended to build-times.tsv next to bin/.
#
# Usage: e2e/controlplane/build.sh [--print-bin-dir]
# Env:   DISAGG_CACHE_DIR (default ~/.cache/disagg-operator), GO (default go)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$HERE/versions.env"

CACHE_ROOT=${DISAGG_CACHE_DIR:-$HOME/.cache/disagg-operator}
ROOT="$CACHE_ROOT/k8s-$K8S_VERSION"
BIN="$ROOT/bin"
WORK="$ROOT/src"
LOGS="$ROOT/build-logs"
TIMES="$ROOT/build-times.tsv"
GO=${GO:-go}

if [[ "${1:-}" == "--print-bin-dir" ]]; then
	echo "$BIN"
	exit 0
fi

# Static, reproducible-path binaries; never fetch another Go toolchain behind
# our back (the go lines below must be satisfied by the installed Go).
export CGO_ENABLED=0 GOTOOLCHAIN=local
GOBUILD_FLAGS=(-p 2 -trimpath)

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# run_step NAME CMD... : run CMD, recording wall time and peak RSS under NAME.
# GNU time reports the largest RSS among the command and its waited-for
# children, which is where the Go compiler/linker memory shows up.
run_step() {
	local name=$1; shift
	local tfile="$LOGS/$name.time" start end
	log "step $name: $*"
	start=$(date +%s)
	if [[ -x /usr/bin/time ]]; then
		/usr/bin/time -v -o "$tfile" "$@" || die "step $name failed (see above)"
	else
		"$@" || die "step $name failed (see above)"
	fi
	end=$(date +%s)
	local rss_kb="?"
	if [[ -f "$tfile" ]]; then
		rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tfile")
	fi
	local secs=$((end - start))
	printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$name" "$secs" "$rss_kb" >>"$TIMES"
	log "step $name done in ${secs}s, peak RSS ${rss_kb} KiB"
}

stamp_ok() { [[ -f "$BIN/.stamp-$1" && "$(cat "$BIN/.stamp-$1")" == "$2" ]]; }
stamp() { echo "$2" >"$BIN/.stamp-$1"; }

mod_field() { # mod_field MODULE@VERSION FIELD[.SUB] -> field of `go mod download -json`
	"$GO" mod download -json "$1" | python3 -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print(v or "")' "$2"
}

build_k8s() {
	local stampv="$K8S_VERSION"
	if stamp_ok k8s "$stampv"; then log "k8s $K8S_VERSION: up to date"; return; fi
	local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	local staging_version="v0.$minor.${K8S_VERSION##*.}"
	local src="$WORK/k8s"
	mkdir -p "$src"

	log "k8s: reading go.mod of k8s.io/kubernetes@$K8S_VERSION"
	local gomod
	gomod=$(mod_field "k8s.io/kubernetes@$K8S_VERSION" GoMod)
	[[ -f "$gomod" ]] || die "could not download go.mod of k8s.io/kubernetes@$K8S_VERSION"

	# The published module requires every staging module at v0.0.0 and points it
	# at ./staging/src via replace; as a dependency those replaces are ignored, so
	# the wrapper must pin each staging module to its published v0.X.Y instead.
	# Derive the list from the real go.mod rather than hard-coding it.
	python3 - "$gomod" "$staging_version" "$src/go.mod" "$HERE/k8s/go.mod.in" "$K8S_STAGING_MODULES" <<'PY'
import re, sys
gomod, ver, out, tmpl, expected = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
text = open(gomod).read()
mods = re.findall(r'^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/', text, re.M)
if len(mods) != expected:
    sys.exit(f"expected {expected} staging replace directives, found {len(mods)}: {mods}")
other = [l for l in re.findall(r'^.*=>.*$', text, re.M) if './staging/src/' not in l]
if other or re.search(r'^\s*exclude\b', text, re.M):
    sys.exit(f"unexpected non-staging replace/exclude directives: {other}")
go_line = re.search(r'^go\s+(\S+)', text, re.M).group(1)
godebug = re.search(r'^godebug\s+(.+)$', text, re.M)
head = "".join(l for l in open(tmpl) if not l.startswith("//"))
lines = [head.rstrip(), "", f"go {go_line}", ""]
if godebug:
    lines += [f"godebug {godebug.group(1)}", ""]
lines += ["replace ("] + [f"\t{m} => {m} {ver}" for m in mods] + [")", ""]
open(out, "w").write("\n".join(lines))
print(f"derived {len(mods)} staging replaces at {ver}; go {go_line}", file=sys.stderr)
PY

	local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
	local pkgs=()
	for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
	(cd "$src" && run_step k8s-modules "$GO" get -tool "${pkgs[@]}")

	# Stamp versions the way Kubernetes' own build does (hack/lib/version.sh);
	# without it /version says v0.0.0-master and Helm kubeVersion checks fail.
	local commit date ldf="-s -w"
	commit=$(mod_field "k8s.io/kubernetes@$K8S_VERSION" Origin.Hash || true)
	date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldf+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		ldf+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
		[[ -n "$commit" ]] && ldf+=" -X $p.gitCommit=$commit"
	done
	mkdir -p "$BIN"
	# One binary per step so the cost of each is measured; later ones reuse
	# most of the build cache of the first.
	for c in "${cmds[@]}"; do
		(cd "$src" && run_step "$c" "$GO" build "${GOBUILD_FLAGS[@]}" -ldflags "$ldf" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
	done
	local got
	got=$("$BIN/kube-apiserver" --version)
	[[ "$got" == "Kubernetes $K8S_VERSION" ]] || die "kube-apiserver reports '$got', expected Kubernetes $K8S_VERSION"
	stamp k8s "$stampv"
}

build_etcd() {
	if stamp_ok etcd "$ETCD_VERSION"; then log "etcd $ETCD_VERSION: up to date"; return; fi
	local src="$WORK/etcd"
	rm -rf "$src"; mkdir -p "$src"
	cp "$HERE/etcd/main.go" "$HERE/etcd/go.mod" "$src/"
	(cd "$src" && "$GO" mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" && run_step etcd-modules "$GO" mod tidy)
	(cd "$src" && run_step etcd "$GO" build "${GOBUILD_FLAGS[@]}" -ldflags "-s -w" -o "$BIN/etcd" .)
	# Captured first: `grep -q` exits at the first match, and under pipefail the writer's SIGPIPE fails the check.
	local got
	got=$("$BIN/etcd" --version)
	[[ "$got" == *"etcd Version: ${ETCD_VERSION#v}"* ]] || die "etcd reports unexpected version: $got"
	stamp etcd "$ETCD_VERSION"
}

build_kwok() {
	if stamp_ok kwok "$KWOK_VERSION"; then log "kwok $KWOK_VERSION: up to date"; return; fi
	# kwok's go.mod has no replace directives, so plain `go install` works.
	GOBIN="$BIN" run_step kwok "$GO" install "${GOBUILD_FLAGS[@]}" -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	write_kwok_stages
	stamp kwok "$KWOK_VERSION"
}

# kwok refuses to start without Stage objects, so ship the ones kwok itself
# publishes in its module (the same stages kwokctl embeds): fast node init,
# heartbeat renewing a Lease, and pod ready/complete/delete.
write_kwok_stages() {
	local dir out="$BIN/kwok-stages.yaml"
	dir=$(mod_field "sigs.k8s.io/kwok@$KWOK_VERSION" Dir)
	local files=(
		kustomize/stage/node/fast/node-initialize.yaml
		kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
		kustomize/stage/pod/fast/pod-ready.yaml
		kustomize/stage/pod/fast/pod-complete.yaml
		kustomize/stage/pod/fast/pod-delete.yaml
	)
	{
		echo "# Generated by e2e/controlplane/build.sh from sigs.k8s.io/kwok@$KWOK_VERSION"
		for f in "${files[@]}"; do
			[[ -f "$dir/$f" ]] || die "kwok stage file missing from module: $f"
			echo "---"
			echo "# $f"
			sed -e '/^---[[:space:]]*$/d' "$dir/$f"
		done
	} >"$out.tmp"
	mv "$out.tmp" "$out"
	log "kwok stages: $(grep -c '^kind: Stage' "$out") Stage objects in $out"
}

build_helm() {
	if stamp_ok helm "$HELM_VERSION"; then log "helm $HELM_VERSION: up to date"; return; fi
	# Without these -X flags `helm version` reports only "v4.3" + "unreleased".
	local v=helm.sh/helm/v4/internal/version
	GOBIN="$BIN" run_step helm "$GO" install "${GOBUILD_FLAGS[@]}" \
		-ldflags "-s -w -X $v.version=$HELM_VERSION -X $v.metadata= -X $v.gitTreeState=clean" \
		"helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
	stamp helm "$HELM_VERSION"
}

build_lws() {
	if stamp_ok lws "$LWS_VERSION"; then log "lws $LWS_VERSION: up to date"; return; fi
	local src="$WORK/lws" v=sigs.k8s.io/lws/pkg/version
	rm -rf "$src"; mkdir -p "$src"
	cp "$HERE/lws/go.mod" "$src/"
	(cd "$src" && "$GO" mod edit -require="sigs.k8s.io/lws@$LWS_VERSION" && run_step lws-modules "$GO" mod tidy)
	(cd "$src" && run_step lws "$GO" build "${GOBUILD_FLAGS[@]}" \
		-ldflags "-s -w -X $v.GitVersion=$LWS_VERSION -X $v.GitCommit= -X $v.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
		-o "$BIN/lws-controller" sigs.k8s.io/lws/cmd)
	# CRDs and webhook registrations as released in the same module; the
	# cluster tooling rewrites the webhooks to a loopback URL.
	local dir out="$BIN/lws"
	dir=$(mod_field "sigs.k8s.io/lws@$LWS_VERSION" Dir)
	rm -rf "$out"; mkdir -p "$out/crds"
	cp "$dir"/config/crd/bases/*.yaml "$out/crds/"
	cp "$dir"/config/webhook/{manifests,mutating-patch,validating-patch}.yaml "$out/"
	chmod -R u+w "$out"
	stamp lws "$LWS_VERSION"
}

build_prometheus() {
	if stamp_ok prometheus "$PROMETHEUS_VERSION"; then log "prometheus $PROMETHEUS_VERSION: up to date"; return; fi
	# Module tag v0.MMM.P is Prometheus 3.MM.P; stamp it so /api/v1/status/buildinfo says which one runs.
	local release v=github.com/prometheus/common/version minor
	minor=${PROMETHEUS_VERSION#v0.3}; minor=${minor%%.*}
	release="3.$((10#$minor)).${PROMETHEUS_VERSION##*.}"
	GOBIN="$BIN" run_step prometheus "$GO" install "${GOBUILD_FLAGS[@]}" -tags remove_all_sd \
		-ldflags "-s -w -X $v.Version=$release -X $v.Branch=release -X $v.Revision=$PROMETHEUS_VERSION" \
		"github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
	stamp prometheus "$PROMETHEUS_VERSION"
}

# The real worker node's Kubernetes binaries, from the same wrapper module (and so the same module set) as the
# control plane: kubelet and kube-proxy.
build_node() {
	if stamp_ok node "$K8S_VERSION"; then log "kubelet/kube-proxy $K8S_VERSION: up to date"; return; fi
	local src="$WORK/k8s"
	[[ -f "$src/go.mod" ]] || die "$src/go.mod missing: the k8s step must run first"
	local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	local cmds=(kubelet kube-proxy) pkgs=() c ldf="-s -w"
	for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
	(cd "$src" && run_step node-modules "$GO" get -tool "${pkgs[@]}")
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldf+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	for c in "${cmds[@]}"; do
		(cd "$src" && run_step "$c" "$GO" build "${GOBUILD_FLAGS[@]}" -ldflags "$ldf" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
	done
	local got
	got=$("$BIN/kubelet" --version)
	[[ "$got" == "Kubernetes $K8S_VERSION" ]] || die "kubelet reports '$got', expected Kubernetes $K8S_VERSION"
	stamp node "$K8S_VERSION"
}

# CNI plugins for the node's pod network (a bridge with host-local IPAM); containerd finds them in bin/cni.
build_cni() {
	if stamp_ok cni "$CNI_PLUGINS_VERSION"; then log "CNI plugins $CNI_PLUGINS_VERSION: up to date"; return; fi
	mkdir -p "$BIN/cni"
	local m=github.com/containernetworking/plugins/plugins
	GOBIN="$BIN/cni" run_step cni-plugins "$GO" install "${GOBUILD_FLAGS[@]}" \
		-ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
		"$m/main/bridge@$CNI_PLUGINS_VERSION" "$m/ipam/host-local@$CNI_PLUGINS_VERSION" \
		"$m/main/loopback@$CNI_PLUGINS_VERSION" "$m/meta/portmap@$CNI_PLUGINS_VERSION"
	stamp cni "$CNI_PLUGINS_VERSION"
}

# Cluster DNS for the real node's pods (Services of the DisaggDeployment by name, e.g. the KV store).
build_coredns() {
	if stamp_ok coredns "$COREDNS_VERSION"; then log "coredns $COREDNS_VERSION: up to date"; return; fi
	GOBIN="$BIN" run_step coredns "$GO" install "${GOBUILD_FLAGS[@]}" -ldflags "-s -w" \
		"github.com/coredns/coredns@$COREDNS_VERSION"
	stamp coredns "$COREDNS_VERSION"
}

# crictl: the node's CRI client, used to remove every pod sandbox when the node stops (and for debugging).
build_crictl() {
	if stamp_ok crictl "$CRI_TOOLS_VERSION"; then log "crictl $CRI_TOOLS_VERSION: up to date"; return; fi
	GOBIN="$BIN" run_step crictl "$GO" install "${GOBUILD_FLAGS[@]}" \
		-ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
		"sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION"
	stamp crictl "$CRI_TOOLS_VERSION"
}

# The sandbox ("pause") program; e2e/localcluster packs it into an image for containerd.
build_pause() {
	local key
	key=$(cat "$HERE/pause/main.go" "$HERE/pause/go.mod" | sha256sum | cut -c1-16)
	if stamp_ok pause "$key"; then log "pause: up to date"; return; fi
	(cd "$HERE/pause" && run_step pause "$GO" build "${GOBUILD_FLAGS[@]}" -ldflags "-s -w" -o "$BIN/pause" .)
	stamp pause "$key"
}

main() {
	command -v "$GO" >/dev/null || die "Go not found (need >= 1.26)"
	mkdir -p "$BIN" "$WORK" "$LOGS"
	[[ -f "$TIMES" ]] || printf 'finished_utc\tstep\tseconds\tpeak_rss_kib\n' >"$TIMES"
	local want
	want=$(grep -E '^[A-Z0-9_]+=' "$HERE/versions.env")
	if [[ -f "$BIN/.complete" && "$(cat "$BIN/.complete")" == "$want" ]]; then
		log "all binaries present in $BIN"
		exit 0
	fi
	rm -f "$BIN/.complete"
	local t0; t0=$(date +%s)
	log "building into $BIN with $("$GO" version)"
	# Two streams at once: Kubernetes' binaries (the long pole, and the most likely to hit a missing module on a
	# partial proxy) and everything else. Each Go build leaves a core idle while it links or waits on the module
	# proxy; the other stream fills it. They share only the Go caches, which are safe for concurrent builds.
	( build_k8s; build_node ) &
	local k8s_stream=$!
	( build_etcd; build_kwok; build_helm; build_lws; build_prometheus; build_cni; build_coredns; build_crictl; build_pause ) &
	local other_stream=$!
	local failed=0
	wait "$k8s_stream" || failed=1
	wait "$other_stream" || failed=1
	[[ $failed -eq 0 ]] || die "a build stream failed (see the step that failed above; logs in $LOGS)"
	echo "$want" >"$BIN/.complete"
	log "done in $(($(date +%s) - t0))s; binaries: $(du -sh "$BIN" | cut -f1); timings: $TIMES"
}

main "$@"
