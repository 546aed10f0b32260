#!/usr/bin/env bash
# Builds the fastBPE command-line tool (learnbpe / applybpe / getvocab) from the
# PyPI source distribution: the PyPI package only ships the code-applying
# Python API, and learning codes needs the C++ tool.
set -euo pipefail
dest="${1:?usage: install_fastbpe.sh DEST_BIN_DIR}"
version="0.1.0"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: -d "$work" "fastBPE==${version}"
tar -xzf "$work"/fastBPE-${version}.tar.gz -C "$work"
src="$work/fastBPE-${version}"
g++ -std=c++11 -pthread -O3 "$src/fastBPE/main.cc" -I"$src/fastBPE" -o "$work/fastbpe"
mkdir -p "$dest"
install -m 0755 "$work/fastbpe" "$dest/fastbpe"
echo "fastbpe installed in $dest"
