"""One density point timed alone: its CPU time, and a hash of its whole outcome.

``python tools/bench/density_point.py POINTS MIX N POLICY SEED`` reruns one search point
of a finished ``unicache density`` run (``POINTS``: its ``points.parquet``, which holds
every parameter of a point: the VMs in arrival order, the request rates, the timing)
with this checkout's simulator, and prints the point's CPU time (``time.process_time``:
the engine and the Python driver, one thread), its wall time, and the SHA-256 of its
outcome as JSON (floats written by ``repr``, so equal hashes mean bit-identical
results). Comparing two builds: run both on the same point, interleaved, and compare the
hashes (must be equal) and the CPU times (docs/PERFORMANCE.md "Density").

The VMs' flavors are read from this checkout's catalogue by name. Benchmark code, not the
product's.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

from unicache_sim.density.point import DensityTiming
from unicache_sim.density.points import DensityPoint, run_task
from unicache_sim.density.store import read_points
from unicache_sim.density.tenants import load_catalogue


def find_point(path: Path, mix: str, n: int, policy: str, seed: int) -> DensityPoint | None:
    """The search point (mix, n, policy, seed) of the run whose table is ``path``."""
    catalogue = load_catalogue()
    for row in read_points(path):
        if (row["stage"], row["mix"], row["n"], row["policy"], row["seed"]) != (
            "search", mix, n, policy, seed
        ):
            continue
        flavors = tuple(catalogue.get(name) for name in str(row["vm_flavors"]).split(","))
        rates = tuple((str(f), float(r)) for f, r in json.loads(row["rates"]))
        timing = DensityTiming(row["window_s"], row["round_s"], row["warm_rounds"],
                               row["measure_rounds"], row["balance_interval_s"],
                               row["float_prob"])
        return DensityPoint("search", row["model"], mix, n, policy, seed, flavors, rates,
                            row["overcommit"], timing)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", type=Path, help="a density run's points.parquet")
    parser.add_argument("mix")
    parser.add_argument("n", type=int, help="VMs")
    parser.add_argument("policy", choices=("linux", "unicache"))
    parser.add_argument("seed", type=int)
    parser.add_argument("--outcome", type=Path, help="also write the outcome's JSON here")
    args = parser.parse_args(argv)
    if not args.points.is_file():
        print(f"density_point: no such file: {args.points}", file=sys.stderr)
        return 2
    point = find_point(args.points, args.mix, args.n, args.policy, args.seed)
    if point is None:
        print(f"density_point: {args.points} has no search point {args.mix} N={args.n} "
              f"{args.policy} seed {args.seed}", file=sys.stderr)
        return 2
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = run_task(point)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    blob = json.dumps(dataclasses.asdict(result.outcome), sort_keys=True)
    if args.outcome is not None:
        args.outcome.write_text(blob)
    print(json.dumps({"point": point.label, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                      "sha256": hashlib.sha256(blob.encode()).hexdigest()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
