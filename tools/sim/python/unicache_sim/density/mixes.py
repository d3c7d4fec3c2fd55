"""The density experiment's mixes: reading a mix file, drawing random mixes, the VMs of a
mix at size N, and whether a mix is file-heavy.

The VMs of a mix at size N are the first N of an endless sequence in which every flavor
appears in proportion to its weight, interleaved (:func:`mix_vms`, the smooth weighted
round-robin of nginx's upstream balancer), so that N + 1 VMs are the N VMs plus one: a
search over N never reshuffles the host. Pure but for :func:`load_mixes`'s read.
"""

from __future__ import annotations

import random
import tomllib
from collections.abc import Mapping
from pathlib import Path

from unicache.errors import ConfigError

from unicache_sim.density.tenants import Catalogue, CatalogueError, Mix, Problems

#: a mix is file-heavy when at least this share of its weight reads files
FILE_HEAVY_SHARE = 2 / 3
#: flavors a random mix draws (at least, at most)
RANDOM_MIX_FLAVORS = (2, 4)
#: weights a random mix gives each flavor (at least, at most)
RANDOM_MIX_WEIGHTS = (1, 3)


def parse_mixes(text: str, origin: str, catalogue: Catalogue) -> tuple[Mix, ...]:
    """Parse a mix file: ``[[mix]]`` tables with a ``name`` and a ``flavors`` table of
    integer weights (``flavors = { web = 3, kv = 1 }``).

    :raises CatalogueError: listing every problem, one line each.
    """
    problems = Problems(origin)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CatalogueError([f"{origin}: not valid TOML ({err})"]) from None
    for key in sorted(set(data) - {"mix"}):
        problems.add(f"table {key!r}", "unknown (a mix file has only [[mix]] tables)")
    raw = data.get("mix")
    if not isinstance(raw, list) or not raw:
        problems.add("[[mix]]", "no mixes (expected [[mix]] tables)")
        problems.raise_any()
    assert isinstance(raw, list)
    mixes: list[Mix] = []
    names: set[str] = set()
    for i, entry in enumerate(raw, 1):
        where = f"[[mix]] #{i}"
        if not isinstance(entry, Mapping):
            problems.add(where, "must be a table")
            continue
        for key in sorted(set(entry) - {"name", "flavors"}):
            problems.add(where, f"unknown key {key!r} (known: flavors, name)")
        name = entry.get("name", f"mix-{i}")
        if not isinstance(name, str) or not name or not name.replace("-", "").isalnum():
            problems.add(where, f"'name' must be letters, digits and '-', not {name!r}")
            continue
        if name in names:
            problems.add(where, f"name {name!r} is used twice")
        names.add(name)
        flavors = entry.get("flavors")
        if not isinstance(flavors, Mapping) or not flavors:
            problems.add(where, "'flavors' must be a table of flavor = weight")
            continue
        weights = []
        for flavor in sorted(flavors):
            weight = flavors[flavor]
            if flavor not in catalogue.names:
                problems.add(where, f"no flavor {flavor!r} in {catalogue.source}")
            elif isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1000:
                problems.add(where, f"weight of {flavor!r} must be a whole number within 1..1000")
            else:
                weights.append((flavor, weight))
        if len(weights) == len(flavors):
            mixes.append(Mix(name, tuple(weights)))
    problems.raise_any()
    return tuple(mixes)


def load_mixes(path: Path, catalogue: Catalogue) -> tuple[Mix, ...]:
    """Read a mix file.

    :raises ConfigError: if it cannot be read; :class:`CatalogueError` if it is wrong.
    """
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read mix file {path}") from err
    return parse_mixes(text, str(path), catalogue)


def random_mixes(catalogue: Catalogue, count: int, seed: int = 1) -> tuple[Mix, ...]:
    """``count`` mixes drawn from the catalogue: each of 2-4 flavors, weights 1-3.

    :param catalogue: the flavors to draw from.
    :param count: how many.
    :param seed: the draw's seed (mix i uses its own stream: mix 3 is the same whatever
        ``count`` is).
    """
    out = []
    names = catalogue.names
    for i in range(1, count + 1):
        rng = random.Random(seed * 1_000_003 + i)
        low, high = RANDOM_MIX_FLAVORS
        k = rng.randint(min(low, len(names)), min(high, len(names)))
        picked = sorted(rng.sample(names, k))
        weights = tuple((f, rng.randint(*RANDOM_MIX_WEIGHTS)) for f in picked)
        out.append(Mix(f"random-{i}", weights))
    return tuple(out)


def mix_vms(mix: Mix, n: int) -> tuple[str, ...]:
    """The flavors of the first ``n`` VMs of a mix, in arrival order.

    Smooth weighted round-robin: each step every flavor's credit grows by its weight, the
    flavor with the most credit (ties: the first by name) is taken and pays the total
    weight. Over any prefix each flavor's count is within one of its share, and the
    flavors interleave (``web:2 kv:1`` gives web, kv, web, web, kv, web, ...).
    """
    total = sum(w for _, w in mix.weights)
    credit = dict.fromkeys((f for f, _ in mix.weights), 0)
    out = []
    for _ in range(n):
        for flavor, weight in mix.weights:
            credit[flavor] += weight
        best = max(mix.weights, key=lambda fw: (credit[fw[0]], -mix.weights.index(fw)))[0]
        credit[best] -= total
        out.append(best)
    return tuple(out)


def file_heavy(mix: Mix, catalogue: Catalogue) -> bool:
    """Whether at least ``FILE_HEAVY_SHARE`` of the mix's weight reads files."""
    total = sum(w for _, w in mix.weights)
    files = sum(w for f, w in mix.weights if catalogue.get(f).reads_files)
    return files >= FILE_HEAVY_SHARE * total
