"""A shim that costs nothing: for the tests of what the policy alone changes (the shim's
charge per call has tests of its own in test_simhost.py)."""

from __future__ import annotations

from unicache_sim.guest.shimcost import TABLE_STATES, ShimCost

SIZES = (512, 4096, 16384, 65536, 262144)
FREE_SHIM = ShimCost("free", 2.6, SIZES, {s: (0.0,) * len(SIZES) for s in TABLE_STATES})
