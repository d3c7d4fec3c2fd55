"""Random reads for the differential test of the vCPU rule, with their Python outcomes.

Two kinds: single reads, each on a claim table of its own (edges on purpose: empty and full
masks, unknown and out-of-range CPUs, u64 extremes, the ms clock about to wrap, claims
live, expired, own, garbage), and sequences of reads by several threads that evolve one
shared table over time as a guest would (a migrated thread runs where it was sent,
budgets are spent and renewed, time advances by less and more than a lease).
"""

from __future__ import annotations

import random
from itertools import islice

from unicache_sim.guest.shimrule import (
    BUDGET_UNLIMITED,
    CLAIM_EXPIRY_BITS,
    CLAIM_TID_BITS,
    CLAIM_TID_MAX,
    MAX_VCPUS,
    Action,
    ClaimTable,
    home_vcpu,
    read_span,
    vcpus_from_home,
)

from tests.shim.rulelib import OutcomeT, Step, py_step

_M64 = (1 << 64) - 1
_EXP = (1 << CLAIM_EXPIRY_BITS) - 1
_HALF = 1 << (CLAIM_EXPIRY_BITS - 1)
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_NCLAIMS = (0, 1, 2, 3, 8, 64, 100, 255, 256, 300)


def _u64(rng: random.Random) -> int:
    kind = rng.getrandbits(3)
    if kind < 4:
        return rng.getrandbits(64)
    return (0, 1, _M64, 1 << 63)[kind - 4]


def _mask(rng: random.Random, span: int) -> int:
    """A vCPU mask: empty, full, one bit, dense below ``span``, sparse anywhere, high only."""
    kind = rng.getrandbits(3)
    if kind == 0:
        return 0 if rng.getrandbits(1) else (1 << MAX_VCPUS) - 1
    if kind == 1:
        return 1 << rng.getrandbits(8)
    if kind in (2, 3, 4):
        span = max(1, min(span, MAX_VCPUS))
        return rng.getrandbits(span) & rng.getrandbits(span) | 1 << (rng.getrandbits(8) % span)
    if kind == 5:
        return rng.getrandbits(MAX_VCPUS) & rng.getrandbits(MAX_VCPUS)
    if kind == 6:
        return rng.getrandbits(64) << 192
    return 1 << rng.getrandbits(8) | 1 << rng.getrandbits(8) | 1 << rng.getrandbits(8)


def _allowed(rng: random.Random, mask: int, span: int) -> int:
    kind = rng.getrandbits(3)
    if kind < 3:
        return (1 << MAX_VCPUS) - 1
    if kind == 3:
        return 0 if rng.getrandbits(1) else ~mask & ((1 << MAX_VCPUS) - 1)
    if kind == 4:
        return mask
    return _mask(rng, span) | (mask if kind == 5 else 0)


def _cur(rng: random.Random, mask: int) -> int:
    kind = rng.getrandbits(4)
    if kind == 0:
        return -1
    if kind == 1:
        return (_I32_MIN, -2, -(1 << 20), -1)[rng.getrandbits(2)]
    if kind < 6 and mask:
        return home_vcpu(mask, rng.getrandbits(64), 0)  # one of the mask's vCPUs
    if kind == 6:
        return (MAX_VCPUS, MAX_VCPUS + 1, 1023, _I32_MAX)[rng.getrandbits(2)]
    return rng.getrandbits(8)


def _sizes(rng: random.Random) -> tuple[int, int]:
    """(n, min_read_size) around the threshold and at the u64 extremes."""
    kind = rng.getrandbits(3)
    least = (0, 0, 1, 4096, 65536, 65536, rng.getrandbits(64), _M64)[kind]
    kind = rng.getrandbits(3)
    if kind < 3:
        n = least + kind  # at the threshold and just above
    elif kind == 3:
        n = least - 1  # just below
    else:
        n = (0, rng.getrandbits(64), _M64, rng.getrandbits(24))[kind - 4]
    return min(max(n, 0), _M64), least


def _budget(rng: random.Random) -> tuple[int, int]:
    """(budget, spent): unlimited, none, small, at and around the limit, extremes."""
    kind = rng.getrandbits(3)
    budget = (BUDGET_UNLIMITED, BUDGET_UNLIMITED, BUDGET_UNLIMITED, 0, 1, 5,
              BUDGET_UNLIMITED - 1, rng.getrandbits(32))[kind]
    kind = rng.getrandbits(3)
    spent = (0, 0, budget, budget - 1, budget + 1, rng.getrandbits(64), _M64,
             rng.getrandbits(2))[kind]
    return budget, min(max(spent, 0), _M64)


def _tid(rng: random.Random) -> int:
    if rng.getrandbits(4) == 0:
        return (0, CLAIM_TID_MAX, CLAIM_TID_MAX + 1, (1 << 32) - 1)[rng.getrandbits(2)]
    return 1 + rng.getrandbits(5)


def _now(rng: random.Random) -> int:
    """CLOCK_MONOTONIC ns: anywhere, small, the top of u64, or the ms clock about to wrap."""
    kind = rng.getrandbits(2)
    if kind == 0:
        return rng.getrandbits(64)
    if kind == 1:
        return rng.getrandbits(27) if rng.getrandbits(1) else _M64 - rng.getrandbits(26)
    ms = ((rng.getrandbits(4) + 1) << CLAIM_EXPIRY_BITS) + rng.getrandbits(6) - 32
    return ms * 1_000_000 + rng.getrandbits(20) % 1_000_000


def _word(rng: random.Random, tid: int, now_ns: int) -> int:
    """A claim word: live or expired (boundaries included), own, ownerless, garbage."""
    now_ms = (now_ns // 1_000_000) & _EXP
    other = rng.getrandbits(CLAIM_TID_BITS) or 1
    if other == tid:
        other = other % CLAIM_TID_MAX + 1
    kind = rng.getrandbits(3)
    if kind < 2:  # live: expiry ahead by up to half the wrap, 2**39 included
        ahead = (1, 2, 10, _HALF - 1, _HALF, 1 + rng.getrandbits(20), 5, 3)[rng.getrandbits(3)]
        return ((now_ms + ahead) & _EXP) << CLAIM_TID_BITS | other
    if kind < 4:  # expired: expiry now or behind by less than half the wrap
        behind = (0, 1, 10, _HALF - 1, rng.getrandbits(30), 0, 2, 9)[rng.getrandbits(3)]
        return ((now_ms - behind) & _EXP) << CLAIM_TID_BITS | other
    if kind == 4:  # the reader's own (if its tid fits the word)
        return rng.getrandbits(CLAIM_EXPIRY_BITS) << CLAIM_TID_BITS | (tid & CLAIM_TID_MAX)
    if kind == 5:  # no holder, leftover expiry bits
        return rng.getrandbits(CLAIM_EXPIRY_BITS) << CLAIM_TID_BITS
    return rng.getrandbits(64)


def _init(rng: random.Random, nclaims: int, cand: int, home: int, cur: int, tid: int,
          now_ns: int) -> tuple[tuple[int, int], ...]:
    """Initial claims where the rule looks: on the candidates from home on (all of them, at
    times, when there are few), on cur, and on a few others."""
    if nclaims == 0:
        return ()
    picked: set[int] = set()
    if cand:
        order = list(islice(vcpus_from_home(cand, home), 10))
        many = len(order) if rng.getrandbits(2) == 0 else rng.getrandbits(4) % (len(order) + 1)
        picked.update(v for v in order[:many] if v < nclaims)
    if 0 <= cur < nclaims:
        picked.add(cur)
    picked.update(rng.getrandbits(9) % nclaims for _ in range(rng.getrandbits(2)))
    words = ((v, _word(rng, tid, now_ns)) for v in sorted(picked))
    return tuple((v, w) for v, w in words if w)


def single_reads(seed: int, count: int) -> tuple[list[Step], list[OutcomeT]]:
    """``count`` independent reads, each on a fresh table, and their Python outcomes."""
    rng = random.Random(seed)
    steps: list[Step] = []
    expected: list[OutcomeT] = []
    for _ in range(count):
        nclaims = rng.choice(_NCLAIMS)
        span = rng.choice((2, 8, nclaims or 4, MAX_VCPUS))
        mask = _mask(rng, span)
        cur = _cur(rng, mask)
        n, least = _sizes(rng)
        budget, spent = _budget(rng)
        tid = _tid(rng)
        now_ns = _now(rng)
        allowed = _allowed(rng, mask, span)
        file_id, chunk = _u64(rng), _u64(rng)
        cand = mask & allowed
        init = _init(rng, nclaims, cand, home_vcpu(cand, file_id, chunk), cur, tid, now_ns)
        step = Step(n, least, mask, allowed, file_id, chunk, spent, now_ns, cur, budget, tid,
                    nclaims, True, init)
        # no counters file: C passes NULL; Python may say None or an empty table
        table = (None if nclaims == 0 and rng.random() < 0.5
                 else ClaimTable(nclaims, dict(step.init)))
        steps.append(step)
        expected.append(py_step(step, table))
    return steps, expected


def _units(rng: random.Random, nvcpus: int) -> list[int]:
    """The guest's vCPUs cut into contiguous units (cache units, as the host places them)."""
    units, start = [], 0
    while start < nvcpus:
        size = min(nvcpus - start, 1 << rng.getrandbits(2))
        units.append(((1 << size) - 1) << start)
        start += size
    return units


def _advance(rng: random.Random) -> int:
    """Time between two reads: none, within a lease, beyond it, long idle, half the wrap."""
    kind = rng.getrandbits(4)
    if kind == 0:
        return 0
    if kind < 10:
        return rng.getrandbits(21)  # up to 2 ms
    if kind < 14:
        return rng.getrandbits(25)  # up to 33 ms
    if kind == 14:
        return rng.getrandbits(40)
    return (_HALF + rng.getrandbits(1) - 1) * 1_000_000


def read_sequences(seed: int, count: int, length: int) -> tuple[list[Step], list[OutcomeT]]:
    """``count`` sequences of ``length`` reads by several threads sharing one table."""
    rng = random.Random(seed)
    steps: list[Step] = []
    expected: list[OutcomeT] = []
    for _ in range(count):
        nclaims = rng.choice((2, 4, 8, 16, 64, 256))
        nvcpus = rng.choice((nclaims, nclaims, min(nclaims + 4, MAX_VCPUS), 2))
        every = (1 << nvcpus) - 1
        tids = rng.sample(range(1, 60), rng.randint(1, 12))
        if rng.random() < 0.2:
            tids.append(rng.choice((0, CLAIM_TID_MAX + 1)))  # a reader that cannot claim
        allowed = {t: every if rng.random() < 0.7 else _mask(rng, nvcpus) | 1 for t in tids}
        cur = {t: rng.randrange(nvcpus) for t in tids}
        units = _units(rng, nvcpus)
        # a unit per chunk, mostly; now and then the whole guest, a random set or nothing
        chunks = [(rng.getrandbits(64), rng.randrange(64),
                   rng.choice((*units, *units, every, _mask(rng, nvcpus) & every)),
                   rng.choice((BUDGET_UNLIMITED, BUDGET_UNLIMITED, BUDGET_UNLIMITED, 1, 3, 0)))
                  for _ in range(rng.randint(2, 8))]
        spent = [0] * len(chunks)
        least = rng.choice((0, 4096, 65536))
        now_ns = _now(rng)
        init = _init(rng, nclaims, every, 0, -1, tids[0], now_ns)
        table = ClaimTable(nclaims, dict(init))
        for i in range(length):
            now_ns = (now_ns + _advance(rng)) & _M64
            if rng.getrandbits(5) == 0:
                spent = [0] * len(chunks)  # the agent harvested: a new interval
            t = rng.choice(tids)
            if rng.getrandbits(3) == 0:  # the scheduler, or the thread's own affinity call
                cur[t] = rng.randrange(nvcpus)
            k = rng.randrange(len(chunks))
            file_id, chunk, mask, budget = chunks[k]
            n = least + rng.choice((0, 1, 4096, -1 if least else 0, 0))
            where = -1 if rng.getrandbits(5) == 0 else cur[t]  # sched_getcpu failed once
            step = Step(n, least, mask, allowed[t], file_id, chunk, spent[k], now_ns, where,
                        budget, t, nclaims, i == 0, init if i == 0 else ())
            outcome = py_step(step, table)
            (action, vcpu), _ = outcome
            if action == Action.MIGRATE:
                cur[t] = vcpu
                spent[k] += 1
            steps.append(step)
            expected.append(outcome)
    return steps, expected


#: one uc_read_span case: (n, off, chunk_size, file_size, prev_end)
SpanCaseT = tuple[int, int, int, int, int]


def span_cases(seed: int, count: int) -> tuple[list[SpanCaseT], list[int]]:
    """Random reads for ``uc_read_span`` with their Python spans: sequential (at 0, at the
    previous end) and not, chunk sizes from 0 to u64 extremes, offsets at and around chunk
    ends, files ending before, inside and after the chunk, unknown sizes."""
    rng = random.Random(seed)
    cases: list[SpanCaseT] = []
    for _ in range(count):
        chunk = (0, 1, 4096, 256 << 10, 2304 << 10, rng.getrandbits(24) + 1, _M64,
                 _u64(rng))[rng.getrandbits(3)]
        kind = rng.getrandbits(2)
        if kind == 0 or not chunk:
            off = _u64(rng)
        else:
            at = rng.getrandbits(20) * chunk  # a chunk's start (wraps: u64 arithmetic)
            off = (at + (0, 1, chunk - 1, chunk, rng.randrange(chunk))[rng.randrange(5)]) & _M64
        n = (0, 1, 4096, 128 << 10, rng.getrandbits(24), _M64)[rng.randrange(6)]
        kind = rng.getrandbits(2)
        prev = (off, _M64, (off + 1) & _M64, _u64(rng))[kind]
        kind = rng.getrandbits(2)
        size = (_M64, (off + rng.getrandbits(22)) & _M64, off - rng.randrange(off + 1) if off
                else 0, _u64(rng))[kind]
        cases.append((n, off, chunk, size, prev))
    return cases, [read_span(*c) for c in cases]
