#!/usr/bin/env bash
# Create (once) the benchmark's vllm-router 0.1.17 virtualenv and print its python path on the last stdout line.
# Cached outside the repo, rebuilt when the lock file changes (the marker holds the lock's sha256).
set -euo pipefail
UV_VERSION=0.13.9
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock="$here/constraints-router0.1.17.txt"
cache_dir="${DISAGG_CACHE_DIR:-$HOME/.cache/disagg-operator}"
venv="$cache_dir/bench-frontend-venv-router0.1.17"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [[ -f "$venv/.complete" && "$(cat "$venv/.complete")" == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$cache_dir"
exec 9>"$venv.lock"
flock 9
if [[ -f "$venv/.complete" && "$(cat "$venv/.complete")" == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
"${DISAGG_BENCH_PYTHON:-python3.11}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >&2
UV_CACHE_DIR="${UV_CACHE_DIR:-$cache_dir/uv-cache}" "$venv/bin/uv" pip install --python "$venv/bin/python" --no-deps --quiet -r "$lock" >&2
"$venv/bin/vllm-router" --help >/dev/null
echo "$want" >"$venv/.complete"
echo "$venv/bin/python"
