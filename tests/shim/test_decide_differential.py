"""The shim's vCPU rule in C (uc_decide.c) and its Python mirror (shimrule.py) agree.

Same decisions and same claim tables, read by read: on named cases, on 100,000+ random
single reads with edge values, and on random multi-thread sequences evolving one table.
libuc_decide.so is built by the session fixture (``make all``); a build failure fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from unicache_agent import shm
from unicache_sim.guest import shimrule
from unicache_sim.guest.shimrule import BUDGET_UNLIMITED, CLAIM_TID_BITS, Action, ClaimTable

from tests.shim.rulegen import read_sequences, single_reads, span_cases
from tests.shim.rulelib import STEP, OutcomeT, RuleLib, Step, py_step

SEEDS = (1, 2, 3, 4)
SINGLE_READS_PER_SEED = 15_000
SEQUENCES_PER_SEED = 60
SEQUENCE_LENGTH = 200
NOW = 5_000_000_000  # ns: 5000 ms
ALL = (1 << 256) - 1


@pytest.fixture(scope="module")
def rule_lib(shim_build: Path) -> RuleLib:
    lib = shim_build / "libuc_decide.so"
    assert lib.is_file(), f"{lib} was not built by make"
    return RuleLib(lib)


def _claim(tid: int, expiry_ms: int) -> int:
    return expiry_ms << CLAIM_TID_BITS | tid


def _step(mask: int, *, cur: int = 0, allowed: int = ALL, n: int = 65536, least: int = 4096,
          budget: int = BUDGET_UNLIMITED, spent: int = 0, tid: int = 7, nclaims: int = 8,
          init: tuple[tuple[int, int], ...] = (), file_id: int = 1, chunk: int = 0) -> Step:
    return Step(n, least, mask, allowed, file_id, chunk, spent, NOW, cur, budget, tid,
                nclaims, True, init)


def _file_with_home(mask: int, vcpu: int) -> int:
    """A file id whose chunk 0 has ``vcpu`` as its home among ``mask``."""
    return next(f for f in range(1, 10_000) if shimrule.home_vcpu(mask, f, 0) == vcpu)


LIVE, EXPIRED = 5000 + 5, 5000 - 1  # expiry ms around NOW
AGING = 5000 + 4  # a live claim with less than half a lease (5 ms) left
MINE = _claim(7, 5010)  # what tid 7 claims at NOW: one lease later
F1, F2, F3 = (_file_with_home(0b1110, v) for v in (1, 2, 3))
NAMED: list[tuple[str, Step, tuple[int, int], dict[int, int]]] = [
    ("short-read-does-nothing", _step(0b10, n=100), (0, -1), {}),
    ("unknown-cpu-does-nothing", _step(0b10, cur=-1), (0, -1), {}),
    ("on-a-home-vcpu-stays-and-claims-it", _step(0b11, cur=1), (1, 1), {1: MINE}),
    ("moves-to-the-chunks-home", _step(0b1110, file_id=F2), (2, 2), {2: MINE}),
    ("another-chunk-another-home", _step(0b1110, file_id=F3), (2, 3), {3: MINE}),
    ("skips-a-vcpu-another-live-reader-holds",
     _step(0b1110, file_id=F2, init=((2, _claim(9, LIVE)),)), (2, 3),
     {2: _claim(9, LIVE), 3: MINE}),
    ("wraps-around-to-the-lowest-vcpu",
     _step(0b1110, file_id=F3, init=((3, _claim(9, LIVE)),)), (2, 1),
     {1: MINE, 3: _claim(9, LIVE)}),
    ("takes-an-expired-claim", _step(0b1110, file_id=F1, init=((1, _claim(9, EXPIRED)),)),
     (2, 1), {1: MINE}),
    ("claim-expiring-now-is-free", _step(0b1110, file_id=F1, init=((1, _claim(9, 5000)),)),
     (2, 1), {1: MINE}),
    ("all-held-goes-home-and-leaves-the-claims",
     _step(0b110, file_id=F2, init=((1, _claim(9, LIVE)), (2, _claim(8, LIVE)))), (2, 2),
     {1: _claim(9, LIVE), 2: _claim(8, LIVE)}),
    ("at-home-but-held-by-another-moves-to-a-free-vcpu",
     _step(0b110, cur=1, init=((1, _claim(9, LIVE)),)), (2, 2),
     {1: _claim(9, LIVE), 2: MINE}),
    ("at-home-and-all-held-stays-and-leaves-the-claims",
     _step(0b110, cur=1, init=((1, _claim(9, LIVE)), (2, _claim(8, LIVE)))), (1, 1),
     {1: _claim(9, LIVE), 2: _claim(8, LIVE)}),
    ("own-claim-with-half-a-lease-left-is-kept",
     _step(0b1110, file_id=F1, init=((1, _claim(7, LIVE)),)), (2, 1), {1: _claim(7, LIVE)}),
    ("own-claim-with-less-left-is-renewed",
     _step(0b1110, file_id=F1, init=((1, _claim(7, AGING)),)), (2, 1), {1: MINE}),
    ("own-claim-staying-home-is-kept",
     _step(0b11, cur=1, init=((1, _claim(7, LIVE)),)), (1, 1), {1: _claim(7, LIVE)}),
    ("releases-its-claims-elsewhere",
     _step(0b10, init=((5, _claim(7, LIVE)), (6, _claim(7, EXPIRED)))), (2, 1), {1: MINE}),
    ("budget-spent-does-nothing", _step(0b10, budget=3, spent=3), (0, -1), {}),
    ("budget-left-moves", _step(0b10, budget=3, spent=2), (2, 1), {1: MINE}),
    ("outside-allowed-does-nothing", _step(0b10, allowed=0b01), (0, -1), {}),
    ("no-counters-file-still-moves", _step(0b10, nclaims=0), (2, 1), {}),
    ("vcpu-beyond-the-claims-is-free-and-unclaimed",
     _step(1 << 9, init=((1, _claim(7, LIVE)),)), (2, 9), {}),
    ("tid-too-large-moves-but-never-claims", _step(0b10, tid=1 << 24), (2, 1), {}),
]


@pytest.mark.parametrize(("step", "decision", "table"), [c[1:] for c in NAMED],
                         ids=[c[0] for c in NAMED])
def test_named_case_in_c_and_python(rule_lib: RuleLib, step: Step, decision: tuple[int, int],
                                    table: dict[int, int]) -> None:
    claims = ClaimTable(step.nclaims, dict(step.init)) if step.nclaims else None
    assert py_step(step, claims) == (decision, table)
    assert rule_lib.run([step]) == [(decision, table)]


def _assert_same(steps: list[Step], expected: list[OutcomeT], got: list[OutcomeT]) -> None:
    assert len(got) == len(expected)
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        if want != have:
            start = i
            while start > 0 and not steps[start].reset:
                start -= 1
            context = "\n".join(f"  step {j}: {steps[j].describe()} -> python {expected[j][0]}"
                                for j in range(max(start, i - 5), i + 1))
            pytest.fail(f"step {i}: python {want} != C {have}\n{context}")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_single_reads_agree(rule_lib: RuleLib, seed: int) -> None:
    steps, expected = single_reads(seed, SINGLE_READS_PER_SEED)
    _assert_same(steps, expected, rule_lib.run(steps))
    actions = {d[0] for d, _ in expected}
    assert actions == {Action.NONE, Action.STAY, Action.MIGRATE}  # every branch was taken


@pytest.mark.parametrize("seed", SEEDS)
def test_random_read_sequences_on_one_table_agree(rule_lib: RuleLib, seed: int) -> None:
    steps, expected = read_sequences(seed + 100, SEQUENCES_PER_SEED, SEQUENCE_LENGTH)
    _assert_same(steps, expected, rule_lib.run(steps))
    # the tables really evolved: claims held, moves made, some vCPU skipped for a holder
    assert sum(1 for _, t in expected if len(t) >= 2) > len(steps) // 10
    assert sum(1 for d, _ in expected if d[0] == Action.MIGRATE) > len(steps) // 20


SPAN_CASES_PER_SEED = 30_000
MIB = 1 << 20


def test_a_sequential_reader_counts_the_rest_of_the_chunk() -> None:
    chunk = 2304 << 10  # a Rome extent
    buf = 128 << 10  # coreutils' read buffer
    assert shimrule.read_span(buf, 0, chunk) == chunk  # offset 0 starts a stream
    assert shimrule.read_span(buf, buf, chunk, prev_end=buf) == chunk - buf  # continues it
    assert shimrule.read_span(buf, buf, chunk) == buf  # a jump: its own size
    assert shimrule.read_span(buf, chunk, chunk, prev_end=chunk) == chunk  # next extent
    assert shimrule.read_span(buf, 0, chunk, file_size=MIB) == MIB  # the file ends first
    assert shimrule.read_span(buf, 0, 0) == buf  # no table: its own size


@pytest.mark.parametrize("seed", SEEDS)
def test_random_read_spans_agree(rule_lib: RuleLib, seed: int) -> None:
    cases, expected = span_cases(seed + 200, SPAN_CASES_PER_SEED)
    got = rule_lib.read_spans(cases)
    for case, want, have in zip(cases, expected, got, strict=True):
        assert want == have, f"uc_read_span{case}: python {want} != C {have}"
    # both branches were taken: thousands of spans were the rest of a chunk
    assert sum(1 for (n, *_), w in zip(cases, expected, strict=True) if w > n) > len(cases) // 20
    assert sum(1 for (n, *_), w in zip(cases, expected, strict=True) if w == n) > len(cases) // 10


def test_constants_agree(rule_lib: RuleLib) -> None:
    c = rule_lib.constants()
    assert c == {
        "claim_lease_ns": shimrule.CLAIM_LEASE_NS,
        "home_hash_multiplier": shimrule.HOME_HASH_MULTIPLIER,
        "layout_version": shimrule.LAYOUT_VERSION,
        "claim_tid_bits": shimrule.CLAIM_TID_BITS,
        "claim_expiry_bits": shimrule.CLAIM_EXPIRY_BITS,
        "budget_unlimited": shimrule.BUDGET_UNLIMITED,
        "max_vcpus": shimrule.MAX_VCPUS,
        "claims_offset": shm.CLAIMS_OFFSET,
        "regions_offset": shm.REGIONS_OFFSET,
        "facts_size": STEP.size - 24,
        "step_size": STEP.size,
    }
    assert shm.LAYOUT_VERSION == shimrule.LAYOUT_VERSION
    assert (shm.CLAIM_TID_BITS, shm.CLAIM_EXPIRY_BITS) == (shimrule.CLAIM_TID_BITS,
                                                           shimrule.CLAIM_EXPIRY_BITS)
    assert shm.MAX_VCPUS == shimrule.MAX_VCPUS
    assert shm.BUDGET_UNLIMITED == shimrule.BUDGET_UNLIMITED
    assert shm.mix64(0x1234_5678_9ABC_DEF0) == shimrule.mix64(0x1234_5678_9ABC_DEF0)
