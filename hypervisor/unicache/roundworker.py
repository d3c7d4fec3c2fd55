"""The policy round off the event loop: one daemon thread per round, awaited against stop.

The daemon's event loop serves every VM's channel and the signals. A round that one
guest's reports keep busy must stall neither (issue #12): the round runs in a thread of
its own, and the loop waits for whichever comes first, the round's end or the stop
event. On stop the daemon restores the host and exits at once: the thread is a daemon
thread, so a round still running never holds the process (``asyncio.to_thread``'s
executor would: ``asyncio.run`` joins it at exit).

A round that ends after its deadline answered an observation that is no longer the
host's: the caller keeps the policy state it returns (the policy's memory stays
consistent) and drops its actions, saying so in the decision log.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RoundOutcome(Generic[T]):
    """A round that finished.

    :param value: what the round returned.
    :param seconds: how long it ran.
    :param late: it ran past its deadline.
    """

    value: T
    seconds: float
    late: bool


async def run_round(
    work: Callable[[], T], stop: asyncio.Event, deadline_s: float
) -> RoundOutcome[T] | None:
    """Run ``work`` in a daemon thread; return its outcome, or ``None`` once ``stop`` is set.

    :param work: the round (no arguments; bind them with a lambda).
    :param stop: the daemon's stop event.
    :param deadline_s: seconds after which a finished round counts as late.
    :raises Exception: whatever ``work`` raised.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, err: BaseException | None) -> None:
        if done.cancelled():
            return
        if err is not None:
            done.set_exception(err)
        else:
            done.set_result(value)  # type: ignore[arg-type]

    def worker() -> None:
        value: T | None = None
        failure: BaseException | None = None
        try:
            value = work()
        except BaseException as err:  # handed to the loop, raised there
            failure = err
        # the daemon may have stopped and closed its loop meanwhile: nobody waits any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, failure)

    started = time.monotonic()
    threading.Thread(target=worker, name="unicache-round", daemon=True).start()
    stopped = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {done, stopped}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not done.done():
        done.cancel()
        return None
    seconds = time.monotonic() - started
    return RoundOutcome(done.result(), seconds, seconds > deadline_s)
