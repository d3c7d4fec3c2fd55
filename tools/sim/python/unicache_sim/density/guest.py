"""The guest side of ``unicache density --live``: one tenant's file requests, timed in the guest.

This file is a program for the guest's ``python3`` (Debian 12: Python 3.11, standard
library only): the host reads it as text and runs it with ``python3 -c PROGRAM JSON``
through the guest's command runner (:mod:`unicache_sim.density.live`); nothing on the host
imports it. The JSON argument is one object:

* ``mode``: ``prepare`` writes the tenant's files under ``dir`` and reads them once (they
  are in the guest's page cache before anything is measured); ``run`` serves requests;
* ``files``, ``file_bytes``: the data; ``access``: ``whole`` (a request opens a file and
  reads it whole in ``read_bytes`` calls, 0: one call) or ``random`` (a request preads
  ``read_bytes`` at an aligned offset of the first file); ``popularity``: ``zipf``
  (P(n) ~ 1/n over files, or over offsets in a seeded order) or ``uniform``;
* ``workers``: one process per guest vCPU, pinned to it (a vCPU's guest thread, as in
  the simulator); ``rate_hz``: requests per second per worker arriving as a Poisson
  process (0: back to back, each after a short sleep: the window over the requests is
  the service time, wake-up included); ``seconds``: the window; ``seed``.

A request's latency runs from its arrival to its last byte (queueing included), measured
with ``time.perf_counter_ns``; a request that arrived in the window but has not started
when it closes counts with the time it waited (a lower bound). ``run`` prints one JSON
object: ``requests``, ``mean_us``, ``p50_us``, ``p95_us``, ``p99_us``, ``per_s``, ``bytes``.
"""

import bisect
import itertools
import json
import math
import os
import random
import sys
import time
from typing import Any

Cfg = dict[str, Any]
#: back to back, each request still starts with a timer wake-up (as one arriving at a rate
#: does), so that the service time the rate is made from includes it (costly under TCG)
WAKE_S = 1e-5


def _weights(n: int, popularity: str) -> list[float]:
    if popularity == "zipf":
        return list(itertools.accumulate(1.0 / (i + 1) for i in range(n)))
    return list(itertools.accumulate(1.0 for _ in range(n)))


def _prepare(cfg: Cfg) -> dict[str, Any]:
    base = cfg["dir"]
    os.makedirs(base, exist_ok=True)
    total = 0
    for i in range(cfg["files"]):
        path = os.path.join(base, f"f{i}")
        with open(path, "wb") as f:
            f.write(os.urandom(cfg["file_bytes"]))
        total += cfg["file_bytes"]
    os.sync()
    for i in range(cfg["files"]):
        with open(os.path.join(base, f"f{i}"), "rb") as f:
            while f.read(1 << 20):
                pass
    return {"bytes": total, "files": cfg["files"]}


def _worker(cfg: Cfg, index: int, out: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[index % len(cpus)]})
    rng = random.Random(cfg["seed"] * 1000 + index)
    base, access = cfg["dir"], cfg["access"]
    if access == "random":
        slots = max(1, cfg["file_bytes"] // cfg["read_bytes"])
        order = list(range(slots))
        random.Random(cfg["seed"]).shuffle(order)  # the hot offsets, spread over the file
        cum = _weights(slots, cfg["popularity"])
        fd = os.open(os.path.join(base, "f0"), os.O_RDONLY)
    else:
        cum = _weights(cfg["files"], cfg["popularity"])
        buf = cfg["read_bytes"] or cfg["file_bytes"]
    rate = float(cfg["rate_hz"])
    window = int(cfg["seconds"] * 1e9)
    lat: list[float] = []
    moved = 0
    start = time.perf_counter_ns()
    end = start + window
    arrival = start
    while True:
        if rate > 0:
            arrival += int(rng.expovariate(rate) * 1e9)
            if arrival >= end:
                break
            now = time.perf_counter_ns()
            if now < arrival:
                time.sleep((arrival - now) / 1e9)
            elif now >= end:  # arrived, never started: the time it waited
                lat.append((end - arrival) / 1e3)
                continue
        else:
            time.sleep(WAKE_S)  # a request's wake-up: its cost is part of the service time
            arrival = time.perf_counter_ns()
            if arrival >= end:
                break
        pick = bisect.bisect_left(cum, rng.random() * cum[-1])
        if access == "random":
            moved += len(os.pread(fd, cfg["read_bytes"], order[pick] * cfg["read_bytes"]))
        else:
            f = os.open(os.path.join(base, f"f{pick}"), os.O_RDONLY)
            while True:
                data = os.read(f, buf)
                if not data:
                    break
                moved += len(data)
            os.close(f)
        lat.append((time.perf_counter_ns() - arrival) / 1e3)
    os.write(out, json.dumps({"lat": lat, "bytes": moved}).encode())
    os.close(out)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(values[max(0, math.ceil(q * len(values)) - 1)])


def _run(cfg: Cfg) -> dict[str, Any]:
    children = []
    for index in range(cfg["workers"]):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _worker(cfg, index, w)
            finally:
                os._exit(0)
        os.close(w)
        children.append((pid, r))
    lat: list[float] = []
    moved = 0
    for pid, r in children:
        chunks = []
        while True:
            data = os.read(r, 1 << 16)
            if not data:
                break
            chunks.append(data)
        os.close(r)
        os.waitpid(pid, 0)
        part = json.loads(b"".join(chunks) or b'{"lat": [], "bytes": 0}')
        lat += part["lat"]
        moved += part["bytes"]
    lat.sort()
    return {
        "requests": len(lat),
        "mean_us": sum(lat) / len(lat) if lat else float("nan"),
        "p50_us": _pct(lat, 0.50),
        "p95_us": _pct(lat, 0.95),
        "p99_us": _pct(lat, 0.99),
        "per_s": len(lat) / cfg["seconds"],
        "bytes": moved,
    }


def main() -> None:
    """Run the mode the JSON argument names and print its result as one JSON line."""
    cfg = json.loads(sys.argv[1])
    out = _prepare(cfg) if cfg["mode"] == "prepare" else _run(cfg)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
