"""The build: a fingerprint of the code the simulator's results depend on.

Every sweep that keeps results between runs (the grid's checkpoint, the density
experiment's cache of points) tags them with :func:`build_fingerprint`, and reuses only the
ones of the running build.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import unicache

#: files whose bytes make the build: the code, the native engine and the machine models
_BUILD_SUFFIXES = frozenset({".py", ".so", ".toml"})


def build_fingerprint() -> str:
    """A hash of every source, native library and model file a sweep's results depend on."""
    digest = hashlib.sha256()
    assert unicache.__file__ is not None  # a package imported from files
    # this package's directory is this module's (not its __init__'s import: the engine)
    for name, root in (("unicache_sim", Path(__file__).parent),
                       (unicache.__name__, Path(unicache.__file__).parent)):
        for file in sorted(root.rglob("*")):
            if file.suffix in _BUILD_SUFFIXES and "__pycache__" not in file.parts:
                digest.update(f"{name}/{file.relative_to(root)}\0".encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
