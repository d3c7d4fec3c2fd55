"""The MFC experiment's parameters (MFC paper §6.1-§6.3): the baselines, workloads and
set-ups it runs, and :class:`MfcSpec`, one experiment.

Apart from :mod:`~unicache_sim.experiments.mfc.read`, which runs it, so that the baselines
(:mod:`~unicache_sim.experiments.mfc.baselines`) and the co-runners
(:mod:`~unicache_sim.experiments.mfc.corunners`) that take a spec import no module that
imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from unicache_sim.engine.calibration import CYCLES_PER_BYTE
from unicache_sim.experiments.dmc.whatif import MigrationMode
from unicache_sim.guest.livetiming import LoopTiming

BASELINES = ("linux", "unicache", "oracle")
#: the parallel set-up's fourth baseline: Linux with as many readers as unicache, so that a
#: loss of the set-up itself (twice the readers on the same CPUs) is not read as unicache's
LINUX_SAME_READERS = "linux-same-readers"
WORKLOADS = tuple(CYCLES_PER_BYTE)
DISTRIBUTIONS = ("uniform", "zipf")
#: how unicache runs: the product's loop, or the in-kernel MFC what-if
PATHS = ("live", "whatif")
#: equal threads in every baseline, or MFC §6.3's 16 under Linux and 32 under MFC
SETUPS = ("equal", "parallel")
#: co-runners of the observations paper, in a second VM on the last CPU
CORUNNERS = ("none", "mergesort", "cachebuster", "spinloop")
MIB = 1024 * 1024
#: §6.1: every file of the read benchmark is 256 KiB
FILE_BYTES = 256 * 1024
#: policy rounds the live unicache baseline decides before it measures: SCU's watch
#: measures a VM unplaced (rounds 1-2) and placed (3-4) before it keeps or withdraws the
#: placement, and the prediction's hysteresis settles in a few more; the measured phase
#: is then the steady state a long-running VM sees, not the first probe
WARM_ROUNDS = 8
#: ... and until the policy's standing has held for this many rounds in a row: no vCPU
#: pinned anew, SCU leaving the VM alone or placing it as in the round before (a watch
#: trial that withdraws a placement in round 7 would otherwise be measured in round 8)
SETTLE_ROUNDS = 3
#: ... but never longer than this: a policy that keeps changing its mind is measured so
MAX_WARM_ROUNDS = 2 * WARM_ROUNDS


@dataclass(frozen=True, slots=True)
class MfcSpec:
    """One experiment.

    :param workload: read, grep, wc or md5sum.
    :param dist: uniform or zipf.
    :param threads: reader threads (one VM, one vCPU per host CPU); in the parallel
        set-up, the Linux baseline's (unicache and the oracle run twice as many).
    :param file_bytes: size of every file (MFC §6.1: 256 KiB).
    :param read_bytes: bytes per read call of the guest's program on the product's path
        (``live``); 0: one call per chunk, as MFC §6.1's benchmark reads each file whole.
        coreutils' ``cat``, ``wc`` and ``md5sum`` read 128 KiB at a time (``IO_BUFSIZE``,
        src/ioblksize.h). The shim counts a sequential reader's rest of the chunk
        (``uc_read_span``), so buffers smaller than ``min_read_size`` still migrate.
    :param dram_bw_scale: factor on DRAM bandwidth (§6.5.1).
    :param timing: the live loop's timing (the daemon's defaults) and its sampling.
    :param warm_factor: warm-up reads, in working sets (at least ``min_warm_bytes``).
    :param measure_factor: measured reads, in working sets (at least ``min_measure_bytes``).
    :param min_warm_bytes: smallest warm-up.
    :param min_measure_bytes: smallest measurement.
    :param min_measure_per_reader: smallest measurement per reader thread: the measured
        time runs from the first reader's start to the last reader's end, so with many
        readers each must read many files for one read's skew not to matter (64 of
        §6.1's files: 1/64 of a reader's measured time; 128 readers on ``epyc-2s`` read 8
        files each in the 256 MiB the other floors give).
    :param balance_interval_s: Linux load-balancing period.
    :param float_prob: probability that a busy vCPU is moved at a balancing tick.
    :param update_use_s: period of MFC's ``update_use`` aging (Figure 2 lines 45-47).
    :param corunner: a co-runner thread in a second VM, on the last CPU: ``mergesort``
        (a VM-intensive sort over 64-byte records, reading one buffer and writing another),
        ``cachebuster`` (streams over four times the on-chip cache) or ``spinloop``.
    :param file_placement: ``spread`` — file i's pages on node i mod nodes, as files
        written before the run by processes all over the machine; ``first_touch`` — on the
        node of the first thread that reads them (this favours a baseline that stays put).
    :param background_bytes: footprint of the other users of the caches, per CPU (MFC §4.6:
        "program text and data", the kernel, other processes, small files): an object on the
        CPU's node that the CPU reads every ``background_period_s`` outside the reader
        threads, in every baseline alike (the oracle's merged caches get all of them). 0 (the
        default) turns it off; docs/simulator.md shows what it does to Figure 3.
    :param background_period_s: how often each CPU's other users read their footprint.
    :param path: ``live`` — the product's loop (daemon round, agent report and table delay
        from their defaults; the guest follows the shim's rule); ``whatif`` — the
        synchronous per-read ``mfc_access`` of an in-kernel MFC (a what-if, not the product).
    :param setup: ``equal`` — every baseline runs ``threads`` readers; ``parallel`` — MFC
        §6.3's set-up: ``threads`` instances under Linux, twice as many under unicache.
    :param unify: the unification level, the daemon's ``--unify``: ``llc`` (default: a unit
        is an LLC group) or ``l2`` (a unit is one core and its private levels).
    :param dmc_migration: WHAT-IF, hardware that does not exist: ``none`` (default) keeps
        the model's migration cost; ``push`` or ``handoff`` gives the machine (and the
        daemon's cost model) DMC's ``cpush``-assisted cost (``dmc.whatif``).
    :param dmc_lookup: WHAT-IF: the live path's shim finds chunks with DMC's ``cllookup``
        before the table's assignment (``dmc.whatif.LookupShim``).
    :param opens: the readers open each file they read whole (its shim charged its per-file
        work, under the agent's open sample, ``GuestShim.open_file``), as grep -r and wc
        do; else they keep their files open and read them (a server's open-file cache).
    :param seed: seed of file choice, page placement and floating.
    """

    workload: str = "read"
    dist: str = "uniform"
    threads: int = 1
    file_bytes: int = FILE_BYTES
    read_bytes: int = 0
    dram_bw_scale: float = 1.0
    timing: LoopTiming = field(default_factory=LoopTiming.daemon_defaults)
    warm_factor: float = 3.0
    measure_factor: float = 4.0
    min_warm_bytes: int = 32 * MIB
    min_measure_bytes: int = 256 * MIB
    min_measure_per_reader: int = 64 * FILE_BYTES
    balance_interval_s: float = 0.004
    float_prob: float = 0.05
    update_use_s: float = 0.4
    file_placement: str = "spread"
    corunner: str = "none"
    # MFC §4.6: "MFC must share the caches with other uses such as program text and data"
    background_bytes: int = 0
    background_period_s: float = 0.004
    path: str = "live"
    setup: str = "equal"
    unify: str = "llc"
    dmc_migration: MigrationMode = "none"
    dmc_lookup: bool = False
    opens: bool = False
    seed: int = 1
