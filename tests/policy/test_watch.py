"""SCU's watch: placed reads that run slower than unplaced ones put the VM back, for a
back-off that doubles; the first interval of a standing is never counted."""

from __future__ import annotations

from unicache.model import ChunkAccess, ChunkId, GuestReport, Observation
from unicache.policy.scu.watch import (
    WATCH_BACKOFF_ROUNDS,
    WATCH_TOLERANCE,
    ReadRate,
    ReadRates,
    read_rates,
    watch_round,
)

from tests.policy.conftest import sample

MB = 1_000_000


def _rate(per_second: float, per_busy_second: float | None = None) -> ReadRate:
    return ReadRate(per_second, per_second if per_busy_second is None else per_busy_second)


def _run(
    rounds: list[tuple[ReadRate | None, bool]], known: ReadRates | None = None, start: int = 1
) -> tuple[ReadRates, list[str | None]]:
    """Feed (rate or None, placed) per round for one VM; the verdicts, round by round."""
    state = {"vm": known} if known else {}
    verdicts: list[str | None] = []
    for i, (rate, placed) in enumerate(rounds):
        rates = {} if rate is None else {"vm": rate}
        state, held = watch_round(rates, {"vm"} if placed else set(), state, {"vm"}, start + i)
        verdicts.append(held["vm"].reason if "vm" in held else None)
    return state["vm"], verdicts


def test_rate_is_bytes_read_per_busy_vcpu_second() -> None:
    report = GuestReport("vm", 1, 2.0, (ChunkAccess(ChunkId(1, 0), 300 * MB, 10, 0, ()),))
    samples = (sample("vm", 0, 10), sample("vm", 1, 10))  # busy 0.5 each (conftest)
    obs = Observation(1, (), samples, (report,))
    busy = sum(s.busy for s in samples)
    assert read_rates(obs) == {"vm": ReadRate(150 * MB, 300 * MB / (busy * 2.0))}


def test_reads_without_busy_times_are_not_measured() -> None:
    report = GuestReport("vm", 1, 1.0, (ChunkAccess(ChunkId(1, 0), MB, 1, 0, ()),))
    assert read_rates(Observation(1, (), (), (report,))) == {}


def test_a_new_vm_is_measured_unplaced_for_one_settled_interval_first() -> None:
    rates, verdicts = _run([(_rate(100.0), False), (_rate(100.0), False)])
    # the first interval of a standing is skipped; the second is the baseline
    assert verdicts == ["measuring its reads unplaced first", None]
    assert rates.unplaced == _rate(100.0)


def test_a_vm_that_cannot_be_measured_is_left_to_the_cost_model() -> None:
    _, verdicts = _run([(None, False), (None, False)])
    assert verdicts == [None, None]


def test_placed_reads_slower_than_unplaced_hold_the_vm_with_a_doubling_backoff() -> None:
    base = _rate(100.0)
    # readers that wait for one another: fewer bytes a second, each byte as cheap
    slow = _rate(100.0 * (1 - WATCH_TOLERANCE) - 1, 150.0)
    rates, verdicts = _run([(base, False), (base, False), (_rate(50.0), True), (slow, True)])
    # the first placed interval (caches filling) is not counted; the second is
    assert verdicts[:3] == ["measuring its reads unplaced first", None, None]
    assert verdicts[3] is not None and f"unplaced for {WATCH_BACKOFF_ROUNDS} rounds" in verdicts[3]
    assert rates.hold_until == 4 + WATCH_BACKOFF_ROUNDS
    assert rates.backoff == 2 * WATCH_BACKOFF_ROUNDS
    # held through the back-off, then tried again with a fresh placed rate
    _, held = _run([(base, False)], rates, start=5)
    assert held[0] is not None and "keeps it unplaced" in held[0]
    again, free = _run([(base, False)], rates, start=rates.hold_until)
    assert free == [None] and again.hold_until == 0 and again.placed is None


def test_placed_reads_that_cost_more_cpu_per_byte_hold_the_vm_too() -> None:
    base = _rate(100.0)
    costly = _rate(100.0, 100.0 * (1 - WATCH_TOLERANCE) - 1)
    _, verdicts = _run([(base, False), (base, False), (costly, True), (costly, True)])
    assert verdicts[3] is not None and "unplaced for" in verdicts[3]


def test_placed_reads_within_the_tolerance_keep_the_vm_placed() -> None:
    ok = _rate(100.0 * (1 - WATCH_TOLERANCE) + 0.5)
    base = _rate(100.0)
    rates, verdicts = _run([(base, False), (base, False), (ok, True), (ok, True), (ok, True)])
    assert verdicts[1:] == [None, None, None, None]
    assert rates.hold_until == 0


def test_vms_that_are_gone_are_forgotten() -> None:
    state, _ = watch_round({"a": _rate(1.0), "b": _rate(1.0)}, set(), {}, {"a", "b"}, 1)
    state, _ = watch_round({}, set(), state, {"a"}, 2)
    assert set(state) == {"a"}
