"""A run of ``unicache bench programs``, step by step: its guest started and prepared, the
rounds, the calls and the starts timed, then its result.

What the bench runs and what it reports is guest_programs.py's (its docstring says how a
run goes); what makes a run proof, guest_programs_checks.py's; what the guest runs,
guest_programs_runner.py. Each step here is one stretch of :func:`run_guest_programs`, in
its order: the guest's boots, files and progress lines come as they always did.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicache.bench import guest_programs_checks as checks
from unicache.bench.guest_programs import (
    AGENT_LIB,
    BOOT_TIMEOUT_S,
    CLOCK_INSTRUCTIONS,
    DATA_DIR,
    FULL,
    GUEST_MEMORY_MIB,
    GUEST_PROGRAM,
    GUEST_VCPUS,
    ICOUNT_SHIFT,
    MAX_ROUNDS,
    MAX_SHIFT,
    NULL_PRELOAD,
    RUNS_TIMEOUT_S,
    SELFTEST,
    SHIM,
    TINY,
    GuestProgramsResult,
    Program,
    Run,
    Sizes,
    compare,
    programs,
    resolve_clock,
    sides,
)
from unicache.errors import BenchError, UnicacheError
from unicache.host.qemu import QemuVm, VmConfig, load_image


def _call(vm: QemuVm, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run the guest program with ``cfg``; its JSON answer."""
    res = vm.run_in_guest(["python3", "-c", GUEST_PROGRAM.read_text(), json.dumps(cfg)],
                          timeout=timeout)
    if not res.ok:
        why = res.error or (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"the guest runner ({cfg['mode']}) exited {res.exit_code}: {why}")
    try:
        return json.loads(res.stdout)  # type: ignore[no-any-return]
    except ValueError as err:
        raise BenchError(f"the guest runner printed no JSON: {res.stdout[-200:]!r}") from err


@dataclass(slots=True)
class _ProgramRuns:
    """One program's runs as the rounds gather them.

    :param program: the program.
    :param digest: its output's digest, which every run must match (``None``: no run yet).
    :param output: the first line of its output.
    :param timed: its timed runs, in order (the warm-up's are checked, not kept).
    """

    program: Program
    digest: str | None = None
    output: str = ""
    timed: list[Run] = field(default_factory=list)

    def add(self, got: dict[str, Any], timed: bool) -> None:
        """Check one answer of the runner for this program (``got``) and keep its runs (their
        times only when ``timed``).

        :raises BenchError: when the table or the runs prove nothing (guest_programs.py's
            docstring).
        """
        checks.check_table(got["table"])
        self.digest = checks.check_runs(
            self.program, got["runs"], self.digest,
            counts_expected=got["table"].get("sample_shift", 0) < MAX_SHIFT)
        self.output = got["runs"][0]["first_line"]
        if timed:
            self.timed += [Run(x["side"], float(x["seconds"]), int(x["counted_bytes"]),
                               int(x["counted_reads"]), int(x["clients"]), str(x["digest"]))
                           for x in got["runs"]]


@dataclass(frozen=True, slots=True)
class _Measured:
    """What the guest gave before it stopped (the result is made once it has).

    :param boot_s: seconds the guest took to boot.
    :param runs: per program, its runs.
    :param table: the shared table as the last run saw it.
    :param agent_pid: the guest agent's pid as the last run found it.
    :param costs: the calls' and the starts' figures (:func:`checks.check_calls`).
    """

    boot_s: float
    runs: tuple[_ProgramRuns, ...]
    table: dict[str, Any]
    agent_pid: int
    costs: dict[str, Any]


def _check_arguments(rounds: int, open_sample: str | None) -> None:
    """:raises BenchError: when ``rounds`` or ``open_sample`` is out of range."""
    if not 1 <= rounds <= MAX_ROUNDS:
        raise BenchError(f"--rounds takes 1 to {MAX_ROUNDS}, not {rounds}")
    if open_sample is not None and not re.fullmatch(r"\d{1,10}:\d{1,2}", open_sample):
        raise BenchError(f"--open-sample takes BYTES:SHIFT, not {open_sample!r}")


def _runner_config(mode: str, **fields: Any) -> dict[str, Any]:
    """The runner's configuration for one call in ``mode``: where the image keeps the agent
    and the shim and where the bench's files go, then the mode's own ``fields``."""
    return {"agent_lib": AGENT_LIB, "shim": SHIM, "dir": DATA_DIR, "mode": mode, **fields}


def _guest(clock: str, open_sample: str | None, image_dir: Path | None, vms: Path) -> QemuVm:
    """The bench's guest, not started: on the ``instructions`` clock one vCPU under TCG
    counting instructions (-icount is TCG's alone), else :data:`GUEST_VCPUS`; its agent
    with ``open_sample`` when one is given."""
    agent_args = (f"unicache.agent_args=--open-sample={open_sample}",) if open_sample else ()
    icount = clock == CLOCK_INSTRUCTIONS
    return QemuVm(VmConfig("ucbench-programs", vcpus=1 if icount else GUEST_VCPUS,
                           memory_mib=GUEST_MEMORY_MIB, image_dir=image_dir,
                           accel="tcg" if icount else None,
                           icount_shift=ICOUNT_SHIFT if icount else None,
                           append=agent_args),
                  vms)


def _prepare(vm: QemuVm, sizes: Sizes) -> None:
    """Write the bench's files in the guest; check that the shim, the agent and its table
    are there.

    :raises BenchError: when one is not.
    """
    ready = _call(vm, _runner_config("prepare", seed=1, small_files=sizes.small_files,
                                     sqlite_rows=sizes.sqlite_rows), 600)
    if not ready["shim_exists"]:
        raise BenchError(f"the image has no shim at {SHIM}: make image")
    if not ready["agent_pid"]:
        raise BenchError("the guest agent is not running in the guest")
    checks.check_table(ready["table"])


def _run_rounds(vm: QemuVm, sizes: Sizes, rounds: int, tick: Callable[[str], None],
                ) -> tuple[tuple[_ProgramRuns, ...], dict[str, Any]]:
    """The warm-up, then ``rounds`` timed rounds of every program; the programs' runs and
    the runner's last answer (the table and the agent as the runs left them)."""
    runs = tuple(_ProgramRuns(p) for p in programs(sizes))
    for r in range(-1, rounds):  # round -1: the warm-up, untimed
        for p in runs:
            got = _call(vm, _runner_config("runs", argv=list(p.program.argv), cwd=p.program.cwd,
                                           sides=["with", "without"] if r < 0 else sides(r)),
                        RUNS_TIMEOUT_S)
            p.add(got, timed=r >= 0)
            tick(f"{'warm-up' if r < 0 else f'round {r + 1}/{rounds}'}: {p.program.name}")
    return runs, got


def _measure(vm: QemuVm, sizes: Sizes, rounds: int, tick: Callable[[str], None]) -> _Measured:
    """Boot the guest, prepare it, run the rounds, then time the calls and the starts.

    :raises BenchError: when a step proves nothing or the agent stopped during the runs.
    """
    vm.start()
    boot_s = vm.wait_for_boot(BOOT_TIMEOUT_S)
    tick("boot")
    _prepare(vm, sizes)
    tick("prepare")
    runs, last = _run_rounds(vm, sizes, rounds, tick)
    agent_pid = int(last["agent_pid"] or 0)
    costs = checks.check_calls(_call(vm, _runner_config(
        "calls", selftest=SELFTEST, null=NULL_PRELOAD, n=sizes.calls, starts=sizes.starts),
        RUNS_TIMEOUT_S))
    tick("calls")
    if not agent_pid:
        raise BenchError("the guest agent stopped during the runs")
    return _Measured(boot_s, runs, last["table"], agent_pid, costs)


def run_guest_programs(rounds: int = 5, tiny: bool = False, image_dir: Path | None = None,
                       tick: Callable[[str], None] = lambda _: None,
                       clock: str = "auto", open_sample: str | None = None) -> GuestProgramsResult:
    """Run the benchmark (guest_programs.py's docstring).

    :param rounds: timed rounds (each program W O O W or O W W O per round).
    :param tiny: small trees and few files (a run of some 20 s under TCG here).
    :param image_dir: the guest image (``None``: the project's, ``make image``).
    :param tick: told what just ended, once per :func:`guest_programs.steps`.
    :param clock: the guest's clock (:data:`guest_programs.CLOCKS`; ``auto``:
        :func:`resolve_clock`).
    :param open_sample: ``BYTES:SHIFT``, the guest agent's ``--open-sample`` (None: its
        default); the run's JSON says what the table carried (``table``).
    :raises BenchError: when an argument is out of range, the guest cannot run the programs,
        or a run proves nothing (guest_programs.py's docstring).
    """
    _check_arguments(rounds, open_sample)
    sizes = TINY if tiny else FULL
    load0, t0 = os.getloadavg()[0], time.monotonic()
    try:
        image = load_image(image_dir)  # a missing image: one line (make image)
        with tempfile.TemporaryDirectory(prefix="unicache-bench-programs-") as tmp:
            clock = resolve_clock(clock, image, Path(tmp) / "vms")
            vm = _guest(clock, open_sample, image_dir, Path(tmp) / "vms")
            try:
                measured = _measure(vm, sizes, rounds, tick)
            finally:
                vm.stop(timeout=15.0)
            tick("stop")
    except UnicacheError as err:
        if isinstance(err, BenchError):
            raise
        raise BenchError(f"the programs bench failed: {err}") from err
    return GuestProgramsResult(
        rounds=rounds, tiny=tiny, sizes=sizes,
        accel=vm.accel.accel if vm.accel is not None else "",
        accel_why=vm.accel.reason if vm.accel is not None else "", clock=clock,
        kernel=image.kernel_version,
        table=measured.table, agent_pid=measured.agent_pid,
        programs=tuple(compare(p.program, p.timed, p.output) for p in measured.runs),
        calls=measured.costs["calls"], starts=measured.costs["starts"],
        boot_s=measured.boot_s, seconds=time.monotonic() - t0, load=(load0, os.getloadavg()[0]))
