"""unicache_sim: trace-driven multicore cache / NUMA simulator with a native (Rust) core.

The simulated host runs the same unicache policy objects as the live daemon, on modelled
machines (16-core 4-chip Opteron, cc-NUMA boxes, EPYC) this machine is not.
"""

from __future__ import annotations

import logging

from unicache_sim._native import Counters, Engine, SimulatorError, ThreadStats, Trace
from unicache_sim.config import SimConfig, from_topology, oracle, single_core

__all__ = [
    "Counters",
    "Engine",
    "SimConfig",
    "SimulatorError",
    "ThreadStats",
    "Trace",
    "from_topology",
    "oracle",
    "single_core",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
