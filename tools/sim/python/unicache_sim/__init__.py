"""unicache_sim: trace-driven multicore cache / NUMA simulator with a native (Rust) core.

The simulated host runs the same unicache policy objects as the live daemon, on modelled
machines (16-core 4-chip Opteron, cc-NUMA boxes, EPYC) this machine is not.

Three layers, each importing only the ones below it:

* the front end: the ``unicache-sim`` command (:mod:`.cli`, ``cli_*``), the grid that fans
  the MFC experiment out on Dask (``grid``, ``grid_store``, ``grid_report``,
  ``grid_plot``), the plots (:mod:`.plot`, :mod:`.figures`);
* :mod:`unicache_sim.experiments`: the papers' experiments and the measurements, one
  module each;
* the simulator's machinery: the native engine (``_native``), the machine from a
  topology (:mod:`.config`), the simulated host and guest (:mod:`.simhost`,
  :mod:`.shimrule`), the live loop's timing (:mod:`.livetiming`) and the tools' compute
  costs (:mod:`.calibration`).
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
