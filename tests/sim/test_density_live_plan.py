"""The live density run's plan and guest program, without a guest: sizes, checks, timing.

The guest program (``unicache_sim/density/guest.py``) is plain Python; here it runs on
the host, in a temporary directory, as the guest runs it (``python3 -c PROGRAM JSON``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from unicache.errors import ConfigError
from unicache_sim.density.live import (
    GUEST_PROGRAM,
    LIVE_DATA_BYTES,
    LiveRequest,
    live_workload,
    plan_guests,
)
from unicache_sim.density.live_cli import DEFAULT_MIX
from unicache_sim.density.tenants import load_catalogue


def test_tenant_data_is_sized_down_keeping_its_shape() -> None:
    cat = load_catalogue()
    web = live_workload(cat.get("web"))
    assert (web.files, web.file_bytes, web.access) == (256, 16 << 10, "whole")
    kv = live_workload(cat.get("kv"))
    assert (kv.files, kv.file_bytes, kv.access, kv.read_bytes) == (1, LIVE_DATA_BYTES,
                                                                   "random", 4096)
    analytics = live_workload(cat.get("analytics"))
    assert analytics.data_bytes <= LIVE_DATA_BYTES and analytics.read_bytes == 128 << 10
    with pytest.raises(ConfigError, match="flavor build runs mergesort"):
        live_workload(cat.get("build"))


def test_the_guests_are_the_first_n_vms_of_the_mix_one_tenant_each() -> None:
    cat = load_catalogue()
    guests = plan_guests(LiveRequest("epyc-2s", cat, DEFAULT_MIX, guests=3, vcpus=2))
    assert [g.flavor.name for g in guests] == ["kv", "web", "kv"]
    assert [g.name for g in guests] == ["live-1-kv", "live-2-web", "live-3-kv"]
    assert all(g.vcpus == 2 for g in guests)
    for bad, message in (({"guests": 4}, "--guests"), ({"vcpus": 0}, "--vcpus"),
                         ({"seconds": 0.1}, "--seconds"), ({"policies": ("magic",)}, "magic")):
        with pytest.raises(ConfigError, match=message):
            plan_guests(LiveRequest("epyc-2s", cat, DEFAULT_MIX, **bad))


def _program(cfg: dict[str, object]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", GUEST_PROGRAM.read_text(), json.dumps(cfg)],
                         capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("access", ["whole", "random"])
def test_the_guest_program_times_requests_back_to_back_and_at_a_rate(
    tmp_path: Path, access: str
) -> None:
    cfg: dict[str, object] = {
        "mode": "prepare", "dir": str(tmp_path), "files": 1 if access == "random" else 32,
        "file_bytes": 64 << 10 if access == "random" else 4096, "access": access,
        "read_bytes": 4096 if access == "random" else 0, "popularity": "zipf",
        "workers": 2, "rate_hz": 0, "seconds": 0.5, "seed": 1,
    }
    assert _program(cfg)["bytes"] > 0
    back_to_back = _program({**cfg, "mode": "run"})
    at_rate = _program({**cfg, "mode": "run", "rate_hz": 200})
    for r in (back_to_back, at_rate):
        assert r["requests"] > 0 and r["bytes"] > 0
        assert 0 < r["p50_us"] <= r["p95_us"] <= r["p99_us"]
    # two workers at 200 requests/s for 0.5 s: about 200 requests (Poisson)
    assert 120 <= at_rate["requests"] <= 300
    assert back_to_back["requests"] > at_rate["requests"]
