"""unicache_sim: trace-driven multicore cache / NUMA simulator with a native (Rust) core.

The simulated host runs the same unicache policy objects as the live daemon, on modelled
machines (16-core 4-chip Opteron, cc-NUMA boxes, EPYC) this machine is not.

Subpackages by concern, each importing only the ones below it (the import-linter contract
in ``tools/sim/pyproject.toml``):

* the front end: the ``unicache-sim`` command (:mod:`.cli`: ``cli.main`` and one module
  per command); the reproduction's table and plots (:mod:`.repro`); the grid that fans the
  MFC experiment out on Dask (:mod:`.grid`: ``sweep``, ``store``, ``report``, ``plot``);
  the density experiment (:mod:`.density`); the three know nothing of each other;
* :mod:`unicache_sim.experiments`: the papers' experiments and the measurements, one
  subpackage per paper (``mfc``, ``obs``, ``srm``, ``ncc``, ``dmc``; the MFC experiment
  may run on the DMC what-if's machine, ``dmc`` never imports ``mfc``, and
  ``scu_on_dmc`` composes the two);
* the simulator's machinery: the simulated host and guest (:mod:`.guest`: ``simhost``,
  ``multihost``, ``cfs``, the shim ``shim``, its rule and cost ``shimrule`` and
  ``shimcost``, the agent's ``opensample`` and ``earlyreport``, the live loop's timing
  ``livetiming``), on the engine (:mod:`.engine`: the machine from a topology ``config``,
  the tools' compute costs ``calibration``) and the native core (``_native``);
* under all of them, shared: ``spread`` (a median and range over seeds),
  ``dask_client`` (the local Dask cluster) and ``build`` (the fingerprint of the code a
  sweep's cached results belong to).
"""

from __future__ import annotations

import logging

from unicache_sim._native import Counters, Engine, SimulatorError, ThreadStats, Trace
from unicache_sim.engine.config import SimConfig, from_topology, oracle, single_core

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
