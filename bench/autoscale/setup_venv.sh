#!/usr/bin/env bash
# Build the benchmark's own virtualenv, outside the repository: Dynamo's offline replay simulator (Rust mocker,
# ai-dynamo-runtime), Dynamo's Planner for the baseline (ai-dynamo, installed --no-deps because its pinned
# aisimulate release is sdist-only and needs a Rust build; a prebuilt dev wheel of aisimulate is used instead),
# and matplotlib for the plots. Every version comes from requirements.lock, so reruns get the same simulator.
#
# Usage: bench/autoscale/setup_venv.sh            (idempotent; prints the venv path on the last line)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${DISAGG_CACHE_DIR:-$HOME/.cache/disagg-operator}"
venv="${BENCH_VENV:-$cache/bench-autoscale-venv}"
python="${PYTHON:-python3.11}"
stamp="$venv/.installed-$(sha256sum "$here/requirements.lock" | cut -c1-16)"

if [[ -f "$stamp" ]]; then
    echo "$venv"
    exit 0
fi

mkdir -p "$cache"
rm -rf "$venv"
"$python" -m venv "$venv"
# The lock holds everything except the two packages that must skip dependency resolution.
"$venv/bin/python" -m pip install --quiet --only-binary :all: -r "$here/requirements.lock"
"$venv/bin/python" -m pip install --quiet --no-deps "ai-dynamo==1.6.1"
"$venv/bin/python" -m pip install --quiet --no-deps --only-binary :all: "aisimulate==0.13.0.dev202610270000000085"
touch "$stamp"
echo "$venv"
