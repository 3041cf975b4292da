#!/usr/bin/env bash
# Create (once) the contract-test virtualenv that holds the genuine vllm 0.33.0
# and vllm-router 0.1.17 packages, and print its python path on the last line
# of stdout. Everything else (progress, installer output) goes to stderr so a
# caller can do:  PY="$(tests/contract/env.sh | tail -n1)"
#
# The venv lives outside the repo because it is ~5.9 GB and must survive
# work-tree resets. It is rebuilt only when the lock file changes.
#
# Environment:
#   DISAGG_CACHE_DIR        cache root (default: $HOME/.cache/disagg-operator)
#   DISAGG_CONTRACT_PYTHON  interpreter for the venv (default: python3.11, else
#                           python3 if it is 3.11); the lock targets CPython 3.11
#   UV_CACHE_DIR            uv download cache (default: $DISAGG_CACHE_DIR/uv-cache;
#                           same filesystem as the venv, so uv can hardlink files)
set -euo pipefail

VLLM_VERSION=0.33.0
ROUTER_VERSION=0.1.17
# uv resolves nothing here (the lock is installed with --no-deps); it is used
# because it downloads and unpacks in parallel: ~40 s cold instead of minutes.
UV_VERSION=0.13.9

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock="$here/constraints-vllm${VLLM_VERSION}-router${ROUTER_VERSION}.txt"
cache_dir="${DISAGG_CACHE_DIR:-$HOME/.cache/disagg-operator}"
venv="$cache_dir/contract-venv-vllm${VLLM_VERSION}-router${ROUTER_VERSION}"
marker="$venv/.complete"

log() { printf 'contract-env: %s\n' "$*" >&2; }

# The marker stores the lock's hash, so editing the lock forces a rebuild while
# an unchanged lock costs only this check.
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

pick_python() {
  if [[ -n "${DISAGG_CONTRACT_PYTHON:-}" ]]; then
    echo "$DISAGG_CONTRACT_PYTHON"
    return
  fi
  local cand
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
      [[ "$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == "3.11" ]]; then
      command -v "$cand"
      return
    fi
  done
  log "need CPython 3.11 (the lock pins cp311 wheels); set DISAGG_CONTRACT_PYTHON"
  exit 1
}

mkdir -p "$cache_dir"
# Serialise concurrent callers (parallel pytest workers, two shells): the
# second one waits and then sees the marker.
exec 9>"$venv.lock"
flock 9
if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

python_bin="$(pick_python)"
log "building $venv with $python_bin (cold: ~1 min, ~5.9 GB)"
start=$SECONDS
# A venv without the marker is a half-finished or outdated one: start over
# rather than trying to repair it.
rm -rf "$venv"
"$python_bin" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >&2
export UV_CACHE_DIR="${UV_CACHE_DIR:-$cache_dir/uv-cache}"
# --no-deps: the lock is the full, resolved set; vllm's own metadata would pull
# the ~3.5 GB of GPU kernels listed in constraints-gpu-excludes.txt back in.
"$venv/bin/uv" pip install --python "$venv/bin/python" --no-deps --quiet -r "$lock" >&2

# Smoke test before declaring the venv complete: both packages import and the
# installed versions are the pinned ones.
"$venv/bin/python" - "$VLLM_VERSION" "$ROUTER_VERSION" <<'PY' >&2
import importlib.metadata as md
import sys

for dist, want in (("vllm", sys.argv[1]), ("vllm-router", sys.argv[2])):
    got = md.version(dist)
    if got != want:
        sys.exit(f"{dist}: installed {got}, expected {want}")
import vllm_router.router_args  # noqa: F401
import vllm.platforms  # noqa: F401
PY

echo "$want" >"$marker"
log "ready in $((SECONDS - start)) s: $(du -sh "$venv" | cut -f1)"
echo "$venv/bin/python"
