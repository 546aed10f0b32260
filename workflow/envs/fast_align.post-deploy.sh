#!/usr/bin/env bash
# Build fast_align into the freshly created conda environment (run once by Snakemake).
set -euo pipefail
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone --depth 1 https://github.com/clab/fast_align.git "$work/fast_align"
cmake -S "$work/fast_align" -B "$work/build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$work/build" -j "$(nproc)"
install -m 755 "$work/build/fast_align" "$work/build/atools" "$CONDA_PREFIX/bin/"
