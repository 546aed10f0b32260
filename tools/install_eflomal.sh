#!/usr/bin/env bash
# Builds and installs eflomal 2.0.0 patched to honour a seed (tools/patch_eflomal.py): the PyPI
# release seeds its sampler from /dev/urandom, so alignment.seed could not fix the links. The
# environment needs numpy, Cython, setuptools and a C compiler with OpenMP (gcc).
set -euo pipefail
bin="${1:?usage: install_eflomal.sh ENV_BIN_DIR (the bin directory of the Python environment)}"
version="2.0.0"
url="https://files.pythonhosted.org/packages/3d/7d/46c02594ebaf7b2f27c671c9d5d517895cf8e58046e41bed95a2cb8394a4/eflomal-${version}.tar.gz"
sha256="b71183dcf85bf4f59f44ef7a59f5268df1c17c0c8d8093f77b220025ffdba100"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl --fail --silent --show-error --location --retry 3 -o "$work/eflomal.tar.gz" "$url"
echo "$sha256  $work/eflomal.tar.gz" | sha256sum --check --quiet - \
	|| { echo "install_eflomal.sh: $url does not have the sha256 it had when pinned" >&2; exit 1; }
tar -xzf "$work/eflomal.tar.gz" -C "$work"
"$bin/python" "$here/patch_eflomal.py" "$work/eflomal-${version}"
# Cython and numpy come from the environment (requirements.txt), not a build sandbox.
"$bin/python" -m pip install --quiet --no-build-isolation --no-deps "$work/eflomal-${version}"
# What ramen.alignment.aligners.seeded_eflomal_binary checks before aligning.
"$bin/python" - <<'EOF'
import pathlib, eflomal
binary = pathlib.Path(eflomal.__file__).parent / "bin" / "eflomal"
assert b"EFLOMAL_SEED" in binary.read_bytes(), f"{binary} is not the seeded build"
print(f"eflomal installed: {binary} honours EFLOMAL_SEED")
EOF
