"""A run of ``unicache bench live``, step by step: the guests, the daemon, the steady
window, the trials, then its result.

What the bench measures and reports is live_bench.py's (its docstring says how a run
goes, step by step); how the host measures, live_measure.py's; what the guests run,
live_guest.py. Each step here is one stretch of :func:`run_live_bench`, in its order: the
guests' boots, the daemon's start and stop and the progress steps come as they always did.
This module drives the guests and the daemon with the simulator's package.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache_sim.density.live_daemon import DaemonSummary, LiveDaemon, read_log
from unicache_sim.density.live_vms import GuestCommand, GuestSpec, LiveGuests

from unicache.bench import live_measure
from unicache.bench.live_bench import (
    AGENT_LIB,
    BUSY_FILES,
    DATA_DIR,
    GUEST_MEMORY_MIB,
    GUEST_PROGRAM,
    GUEST_VCPUS,
    POLL_S,
    SHIM,
    TRIAL_TIMEOUT_S,
    WARM_S,
    LiveBenchResult,
    Trial,
    file_bytes,
)
from unicache.errors import BenchError, UnicacheError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _guest_cmd(guest: str, cfg: dict[str, Any], timeout: float) -> GuestCommand:
    argv = ("python3", "-c", GUEST_PROGRAM.read_text(), json.dumps(cfg))
    return GuestCommand(guest, argv, {"PYTHONPATH": AGENT_LIB}, timeout)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one run asks of its guests.

    :param names: the guests' names.
    :param seconds: the steady window.
    :param trials: reaction trials per guest.
    :param base: the guest program's configuration every step shares.
    """

    names: list[str]
    seconds: float
    trials: int
    base: dict[str, Any]

    def in_every_guest(self, cfg: dict[str, Any], timeout: float) -> list[GuestCommand]:
        """The guest program with ``cfg``, one command per guest."""
        return [_guest_cmd(n, cfg, timeout) for n in self.names]


@dataclass(frozen=True, slots=True)
class _ChannelBytes:
    """The daemon's channel bytes (in, out) so far, read at ``at`` (this host's monotonic)."""

    in_out: tuple[int, int]
    at: float

    @classmethod
    def read(cls, port: int) -> _ChannelBytes:
        return cls(live_measure.channel_bytes(port), time.monotonic())

    def rates_since(self, earlier: _ChannelBytes) -> tuple[float, float]:
        """Bytes per second (in, out) from ``earlier`` to this reading."""
        return ((self.in_out[0] - earlier.in_out[0]) / (self.at - earlier.at),
                (self.in_out[1] - earlier.in_out[1]) / (self.at - earlier.at))


@dataclass(frozen=True, slots=True)
class _SampledDaemon:
    """The daemon started, its metrics' port and the sampler of its ``/proc``."""

    daemon: LiveDaemon
    port: int
    sampler: live_measure.ProcSampler


@dataclass(frozen=True, slots=True)
class _Measured:
    """What the guests' programs measured while the daemon ran (their answers by guest).

    :param steady: the busy readers' answers (the window on each guest's clock).
    :param reacted: the trials' answers.
    :param window_start: the channel's bytes as the window started.
    :param window_end: as it ended (the trials started).
    :param trials_end: as the trials ended.
    :param rt_to_mono: this host's realtime clock to its monotonic one.
    """

    steady: dict[str, dict[str, Any]]
    reacted: dict[str, dict[str, Any]]
    window_start: _ChannelBytes
    window_end: _ChannelBytes
    trials_end: _ChannelBytes
    rt_to_mono: float


@dataclass(frozen=True, slots=True)
class _Stopped:
    """The daemon once stopped: its flags, its summary, its samples, its decision log."""

    flags: tuple[str, ...]
    summary: DaemonSummary
    samples: list[live_measure.ProcSample]
    records: list[dict[str, Any]]


def _start_daemon(tmp: Path, names: list[str], always_place: bool) -> _SampledDaemon:
    """The daemon over the guests, its metrics on a free port, started and sampled."""
    daemon = LiveDaemon(tmp / "state", tmp / "vms", names, always_place=always_place)
    port = _free_port()
    daemon.flags = (*daemon.flags, "--metrics-port", str(port))
    daemon.start()
    assert daemon.proc is not None
    sampler = live_measure.ProcSampler(daemon.proc.pid)
    sampler.start()
    return _SampledDaemon(daemon, port, sampler)


def _warm_up(live: LiveGuests, daemon: LiveDaemon, plan: _Plan, warm: dict[str, Any]) -> None:
    """Read in every guest until the daemon has seen every guest's reports (ten tries).

    :raises UnicacheError: when it has not after the last.
    """
    for _ in range(10):
        live.run_all(plan.in_every_guest(warm, WARM_S + 120))
        try:
            daemon.wait_reports(timeout=10)
            break
        except UnicacheError:
            continue
    else:
        daemon.wait_reports(timeout=1)


def _react(live: LiveGuests, plan: _Plan, jitter_s: float) -> dict[str, dict[str, Any]]:
    """The reaction trials, in every guest at once (each its own seed); no trial asked
    for: every guest's answer with none."""
    trial_cfg = {**plan.base, "mode": "trials", "first_trial": BUSY_FILES,
                 "poll_s": POLL_S, "timeout_s": TRIAL_TIMEOUT_S, "jitter_s": jitter_s}
    if not plan.trials:
        return {n: {"trials": [], "lookup_s": 0.0} for n in plan.names}
    return live.run_all([
        _guest_cmd(n, {**trial_cfg, "seed": 1 + i}, plan.trials * (TRIAL_TIMEOUT_S + 30) + 120)
        for i, n in enumerate(plan.names)])


def _measure(live: LiveGuests, run: _SampledDaemon, plan: _Plan,
             tick: Callable[[str], None]) -> _Measured:
    """With the daemon started: the warm-up, the steady window, the trials."""
    run.daemon.wait_channels(120)
    tick("daemon")
    warm = {**plan.base, "mode": "steady", "busy_files": BUSY_FILES, "seconds": WARM_S}
    _warm_up(live, run.daemon, plan, warm)
    tick("warm-up")
    window_start = _ChannelBytes.read(run.port)
    steady = live.run_all(plan.in_every_guest({**warm, "seconds": plan.seconds},
                                              plan.seconds + 180))
    window_end = _ChannelBytes.read(run.port)
    tick("steady")
    reacted = _react(live, plan, _interval(run.daemon.flags))
    trials_end = _ChannelBytes.read(run.port)
    tick("trials")
    return _Measured(steady, reacted, window_start, window_end, trials_end,
                     live_measure.realtime_to_monotonic())


def _measure_and_stop(live: LiveGuests, run: _SampledDaemon, plan: _Plan,
                      tick: Callable[[str], None]) -> tuple[_Measured, _Stopped]:
    """:func:`_measure`, then the daemon stopped (SIGTERM) and its sampler, even on a
    failure."""
    try:
        measured = _measure(live, run, plan, tick)
    finally:
        summary = run.daemon.stop()
        samples = run.sampler.stop()
    return measured, _Stopped(run.daemon.flags, summary, samples, read_log(summary.log))


def run_live_bench(guests: int = 1, seconds: float = 30.0, trials: int = 10,
                   always_place: bool = True, image_dir: Path | None = None,
                   tick: Callable[[str], None] = lambda _: None) -> LiveBenchResult:
    """Run the benchmark (live_bench.py's docstring).

    :param guests: guests to boot.
    :param seconds: the steady window.
    :param trials: reaction trials per guest.
    :param always_place: the daemon with ``--unify l2 --always-place`` (else as an operator).
    :param image_dir: the guest image (``None``: the project's, ``make image``).
    :param tick: told the name of each step of :data:`live_bench.STEPS` as it ends.
    :raises BenchError: when an argument is out of range or a step fails.
    """
    if not 1 <= guests <= 3:
        raise BenchError(f"--guests takes 1 to 3 guests on this bench, not {guests}")
    if seconds <= 0 or trials < 0:
        raise BenchError("--seconds must be positive and --trials at least 0")
    size = file_bytes()
    names = [f"ucbench-{i}" for i in range(guests)]
    plan = _Plan(names, seconds, trials, {"dir": DATA_DIR, "files": BUSY_FILES + trials,
                                          "file_bytes": size, "shim": SHIM})
    load0 = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="unicache-bench-live-") as tmp:
            specs = [GuestSpec(n, GUEST_VCPUS, GUEST_MEMORY_MIB) for n in names]
            with LiveGuests(specs, Path(tmp) / "vms", image_dir, lambda _: None) as live:
                tick("boot")
                live.run_all(plan.in_every_guest({**plan.base, "mode": "prepare"}, 300))
                tick("prepare")
                offsets = {n: live_measure.estimate_offset(live.vms[n].ping) for n in names}
                tick("clocks")
                run = _start_daemon(Path(tmp), names, always_place)
                measured, stopped = _measure_and_stop(live, run, plan, tick)
                tick("stop")
    except UnicacheError as err:
        raise BenchError(f"the live bench failed: {err}") from err
    if stopped.summary.exit_code != 0:
        raise BenchError(f"the daemon exited {stopped.summary.exit_code} after SIGTERM "
                         f"(its log: {stopped.summary.log})")
    return _result(plan, live.accel, offsets, measured, stopped, load0)


def _result(plan: _Plan, accel: str, offsets: dict[str, live_measure.ClockOffset],
            measured: _Measured, stopped: _Stopped, load0: float) -> LiveBenchResult:
    """The run's figures from what it measured (``load0``: this host's load at its start)."""
    names, steady, samples = plan.names, measured.steady, stopped.samples
    # the steady window on the host's clock: the guests' readers, placed with the offsets
    start = max(offsets[n].to_host(steady[n]["start"]) for n in names)
    end = min(offsets[n].to_host(steady[n]["end"]) for n in names)
    window = max(end - start, 1e-9)
    agent = tuple(100.0 * steady[n]["agent_cpu_s"] / (steady[n]["end"] - steady[n]["start"])
                  for n in names)
    t_first = samples[0].t if samples else 0.0
    in_window = [s for s in samples if start <= s.t <= end] or samples[-1:]
    all_trials = [
        _trial(n, t, offsets[n], stopped.records, measured.rt_to_mono) for n in names for t in
        measured.reacted[n]["trials"]]
    bound = max(o.uncertainty_s for o in offsets.values())
    lookup = max(float(measured.reacted[n]["lookup_s"]) for n in names)
    channel_in_bps, channel_out_bps = measured.window_end.rates_since(measured.window_start)
    return LiveBenchResult(
        guests=len(names), interval_s=_interval(stopped.flags), accel=accel,
        daemon_command=shlex.join(["unicache", "run", *stopped.flags[:-2]]),
        seconds=plan.seconds, window_s=window,
        daemon_cpu_pct=live_measure.cpu_percent(samples, start, end),
        daemon_cpu_all_pct=live_measure.cpu_percent(samples, t_first, samples[-1].t)
        if samples else 0.0,
        daemon_rss_mib=in_window[-1].rss_mib if in_window else 0.0,
        daemon_rss_peak_mib=max((s.rss_mib for s in samples), default=0.0),
        agent_cpu_pct=agent, channel_in_bps=channel_in_bps, channel_out_bps=channel_out_bps,
        trials_channel_bps=measured.trials_end.rates_since(measured.window_end),
        reads_per_s=sum(steady[n]["reads"] / (steady[n]["end"] - steady[n]["start"])
                        for n in names),
        trials=tuple(all_trials), clock_bound_ms=1000 * bound,
        poll_ms=1000 * (POLL_S + lookup), load=(load0, os.getloadavg()[0]),
        samples=tuple((t - t_first, c, r) for t, c, r in live_measure.series(samples)),
        steady_from_s=start - t_first, daemon_exit=stopped.summary.exit_code)


def _interval(flags: tuple[str, ...]) -> float:
    return float(flags[flags.index("--interval") + 1]) if "--interval" in flags else 1.0


def _trial(guest: str, raw: dict[str, Any], offset: Any, records: list[dict[str, Any]],
           rt_to_mono: float) -> Trial:
    """A guest's trial, with the daemon's first publish record that holds its file."""
    start, seen = float(raw["start"]), raw["seen"]
    publish = next((float(r["time"]) for r in records
                    if r.get("kind") == "publish-placement" and r.get("vm") == guest
                    and any(e.get("file") == raw["file"] and e.get("chunk") == 0
                            for e in r.get("entries", ()))), None)
    published = None if publish is None else offset.to_guest(publish + rt_to_mono)
    return Trial(
        guest=guest, file=raw["file"],
        reaction_ms=None if seen is None else 1000 * (float(seen) - start),
        to_publish_ms=None if published is None else 1000 * (published - start),
        publish_to_table_ms=None if published is None or seen is None
        else 1000 * (float(seen) - published),
        caching=bool(raw["caching"]))
