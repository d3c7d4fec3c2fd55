"""Which opens the simulated guest's shim counts: the agent's per-open sampling, mirrored.

The agent publishes in every table buffer which opens the shims count
(``unicache_agent.shm.OpenSample``: ``sample_bytes``, ``sample_shift`` of
``uc_table_buf``); the shim applies it when the program's fstat names a file it opened.
The agent is a guest program (stdlib Python 3.9, not installed on the host), so the
simulator carries the rule and the agent's default as this mirror, as
:mod:`unicache_sim.guest.shimrule` carries the shim's vCPU rule; ``tests/sim/test_opensample.py``
holds the constants to the agent's.

The rule, for one open (:func:`decide`):

* a read-only open of a file of at most ``max_bytes``, with ``shift`` above 0, draws once:
  one draw in 2^``shift`` counts it, its counts (bytes and runs) multiplied by 2^``shift``;
* a file the table names (an entry for any of its chunks) is counted whole whatever the
  draw, so a placed file keeps every mechanism (migration, non-temporal loads) and its
  counts are exact (scaling the lucky draws of a file also counted on the others would
  inflate its counts);
* another file of those that loses the draw is skipped: its calls pass straight to libc;
* larger files, files opened for writing, and every open when ``shift`` is 0 are counted
  whole.

The sample applies from the guest's first open: the agent publishes an empty table with
it as it starts, before the host's first table (a guest whose host never sends one, a VM
SCU leaves alone, samples all along).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the agent's opt-in ``unicache_agent.shm.SMALL_FILES_SAMPLE``: files up to 256 KiB ...
SAMPLE_MAX_BYTES = 256 * 1024
#: ... one read-only open in 2^3 counted
SAMPLE_SHIFT = 3


@dataclass(frozen=True, slots=True)
class OpenSample:
    """Which opens the shim counts (``unicache_agent.shm.OpenSample``).

    :param max_bytes: the largest file sampled (0: none).
    :param shift: log2 of the sampling interval (0: every open counted whole).
    """

    max_bytes: int = 0
    shift: int = 0


#: every open counted whole (``unicache_agent.shm.EVERY_OPEN``; the agent's
#: ``--open-sample 0:0``)
EVERY_OPEN = OpenSample()
#: the agent's opt-in (``unicache-agent --open-sample 262144:3``): it spares a program of
#: many small files most of the shim's per-file work, and shows SCU fewer of the small files
#: a VM re-reads (``tests/sim/test_mfc_open_sample.py``)
SMALL_FILES_SAMPLE = OpenSample(SAMPLE_MAX_BYTES, SAMPLE_SHIFT)
#: what the agent publishes by default: every open counted whole
AGENT_OPEN_SAMPLE = EVERY_OPEN


@dataclass(frozen=True, slots=True)
class OpenFile:
    """What the shim decided for one open file.

    :param counted: the shim counts its calls (else every call passes straight through).
    :param scale: what its counts are multiplied by (0 when skipped).
    """

    counted: bool
    scale: int


#: a file counted whole (a caller that opens nothing: a store kept open)
COUNTED_WHOLE = OpenFile(True, 1)
#: a file the shim passes straight through
SKIPPED = OpenFile(False, 0)


def decide(
    file_bytes: int,
    read_only: bool,
    named: bool,
    draw: float,
    sample: OpenSample = AGENT_OPEN_SAMPLE,
) -> int | None:
    """The rule for one open (module docstring).

    :param file_bytes: the file's size, as fstat gives it.
    :param read_only: opened ``O_RDONLY``.
    :param named: the table has an entry for one of the file's chunks.
    :param draw: the open's random draw, uniform in [0, 1).
    :param sample: which opens are sampled (the table's).
    :returns: the scale of the file's counts (1: counted whole), or None: skipped.
    """
    if sample.shift == 0 or not read_only or file_bytes > sample.max_bytes or named:
        return 1
    interval = 1 << sample.shift
    return interval if draw * interval < 1.0 else None


def open_file(decision: int | None) -> OpenFile:
    """The open file of a decision of :func:`decide`."""
    if decision is None:
        return SKIPPED
    return COUNTED_WHOLE if decision == 1 else OpenFile(True, decision)
