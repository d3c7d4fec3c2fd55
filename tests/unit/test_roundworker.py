"""The policy round off the event loop: served signals and channels, late rounds, errors."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from unicache.roundworker import run_round


def test_a_round_returns_its_value_and_its_time() -> None:
    async def main() -> None:
        outcome = await run_round(lambda: 42, asyncio.Event(), deadline_s=5.0)
        assert outcome is not None
        assert (outcome.value, outcome.late) == (42, False)
        assert 0 <= outcome.seconds < 1.0

    asyncio.run(main())


def test_stop_during_a_long_round_returns_at_once_and_the_loop_kept_serving() -> None:
    release = threading.Event()

    async def main() -> tuple[float, int]:
        stop = asyncio.Event()
        ticks = 0

        async def channel() -> None:  # stands for the VMs' channels the loop serves
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        served = asyncio.ensure_future(channel())
        asyncio.get_running_loop().call_later(0.3, stop.set)  # SIGTERM
        started = time.monotonic()
        outcome = await run_round(lambda: release.wait(30), stop, deadline_s=5.0)
        took = time.monotonic() - started
        await served
        assert outcome is None
        return took, ticks

    took, ticks = asyncio.run(main())  # asyncio.run returns: nothing joins the round
    release.set()
    assert took < 1.0, took
    assert ticks >= 10  # the loop ran while the round was busy


def test_a_round_past_its_deadline_is_late() -> None:
    async def main() -> None:
        outcome = await run_round(lambda: time.sleep(0.2) or "done", asyncio.Event(), 0.05)
        assert outcome is not None and outcome.late and outcome.value == "done"

    asyncio.run(main())


def test_an_error_in_the_round_is_raised_in_the_loop() -> None:
    def broken() -> None:
        raise ValueError("a bug in a policy")

    async def main() -> None:
        with pytest.raises(ValueError, match="a bug in a policy"):
            await run_round(broken, asyncio.Event(), 5.0)

    asyncio.run(main())
