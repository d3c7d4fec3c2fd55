"""What makes a run of ``unicache bench programs`` proof (guest_programs.py): the guest's
table there, valid and empty; every run exited 0 with the same output on both sides; the
shim live and counting under ``with`` (for programs whose reads it sees), silent without;
the calls' and starts' figures all there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from unicache.errors import BenchError


def check_table(table: dict[str, Any]) -> None:
    """The agent's table as the shim must find it for this bench: there, valid, empty.

    :raises BenchError: otherwise.
    """
    if not table.get("exists"):
        raise BenchError(f"no shared table at {table.get('path')} in the guest: the agent "
                         "did not make it (the shim would run without a table)")
    if not table.get("valid"):
        raise BenchError(f"the guest's table {table['path']} is not valid (bad magic)")
    if table.get("entries"):
        raise BenchError(f"the guest's table holds {table['entries']} entries: something "
                         "placed chunks, and this bench measures the shim with nothing placed")


def check_runs(program: Any, raw: Sequence[dict[str, Any]], digest: str | None,
               counts_expected: bool = True) -> str:
    """Check one call's runs of ``program``; the digest of its output.

    :param digest: the digest its earlier runs printed (``None``: none yet).
    :param counts_expected: a run under the shim must count some read (not with a table
        whose open sample leaves out practically every open of the files it covers:
        then the shim's mapping of the counters alone says it was live).
    :raises BenchError: when a run failed, printed other output, or the shim's counts say
        it was not live under ``with`` (or was under ``without``).
    """
    for r in raw:
        side = r["side"]
        if r["exit"] != 0:
            raise BenchError(f"{program.name} exited {r['exit']} {side} the shim: "
                             f"{r['stderr'].strip()[-200:] or 'no error output'}")
        if digest is not None and r["digest"] != digest:
            raise BenchError(f"{program.name} printed other output {side} the shim "
                             f"(digest {r['digest']}, before {digest})")
        digest = r["digest"]
        # a program that reads through stdio only (sha256sum) maps nothing: its streams'
        # descriptors pass, so the shim has nothing to count and never maps the counters
        if side == "with" and program.counted and r["clients"] < 1:
            raise BenchError(f"the shim was not live in {program.name}: no process of it "
                             "mapped the counters (the image's shim not in its scope?)")
        if side == "with" and program.counted and counts_expected and r["counted_bytes"] <= 0:
            raise BenchError(f"the shim counted no read of {program.name}: a run where the "
                             "shim did nothing proves nothing")
        if side == "without" and (r["clients"] or r["counted_bytes"]):
            raise BenchError(f"{program.name} without the shim still counted "
                             f"{r['counted_bytes']} bytes in {r['clients']} process(es): "
                             "something else preloads it")
    assert digest is not None
    return digest


def check_calls(got: dict[str, Any]) -> dict[str, Any]:
    """The calls' and starts' figures as the guest gave them: every one there and positive.

    :raises BenchError: otherwise.
    """
    calls, starts = got.get("calls", {}), got.get("starts", {})
    want = ("getppid", "open_close", "open_fstat_close", "open_classic_fstat_close")
    if sorted(calls) != sorted(want) or not all(calls[k] > 0 for k in want):
        raise BenchError(f"uc_selftest calls gave {calls}")
    for command, times in starts.items():
        if sorted(times) != ["none", "null", "off", "shim"] or not all(
                v > 0 for v in times.values()):
            raise BenchError(f"the starts of {command} gave {times}")
    return {"calls": calls, "starts": starts}
