"""Which eflomal build is installed: the align job and the job graph refuse one that ignores
``alignment.seed`` (the PyPI release seeds itself from /dev/urandom), before any job runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ramen.errors import ConfigError

# tools/patch_eflomal.py: the eflomal binary seeded by this environment variable contains its name.
EFLOMAL_SEED_ENV = "EFLOMAL_SEED"
EFLOMAL_INSTALL = (
    "run `make install`, or tools/install_eflomal.sh ENV/bin for another environment: it builds eflomal 2.0.0 "
    "patched to take its seed from alignment.seed; the PyPI release seeds itself from /dev/urandom"
)


def seeded_eflomal_binary() -> Path:
    """The eflomal binary, refused unless it is the build that honours EFLOMAL_SEED."""
    # Found, not imported: the job graph checks the build too, and the package's import is not free.
    spec = importlib.util.find_spec("eflomal")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("alignment.aligner", "eflomal is not installed", EFLOMAL_INSTALL)
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "eflomal"
    if not binary.is_file():
        raise ConfigError("alignment.aligner", f"the eflomal package has no binary at {binary}", EFLOMAL_INSTALL)
    if EFLOMAL_SEED_ENV.encode() not in binary.read_bytes():
        raise ConfigError("alignment.seed", f"{binary} ignores seeds, so the links would differ on every run",
                          EFLOMAL_INSTALL)
    return binary
