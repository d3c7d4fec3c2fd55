"""The guest shim's vCPU rule, mirrored from uc_decide.c for the simulated guest.

Which vCPU a read runs on: libunicache.so decides it with ``uc_decide`` and
``uc_claims_settle`` (``guest-agent/shim/uc_decide.c``); this module is the same rule, step
for step and bit for bit, so that the simulator's guest moves threads as the product does.
``tests/shim/test_decide_differential.py`` compares the two over random cases.

Exports :func:`decide` (pure), :func:`read_span` (what ``n`` a read counts as),
:class:`Decision` and :class:`Action` (its result), :class:`ClaimTable` (the per-vCPU claims
the decisions leave behind, the only state), and the helpers :func:`mix64`,
:func:`home_vcpu` and :func:`as_mask`.

The rule (numbered as in uc_decide.h):

1. ``n < min_read_size`` or the current CPU is unknown (``cur < 0``): NONE; ``n`` is the
   read's span (:func:`read_span`): a sequential reader counts the rest of the chunk;
2. ``cur`` is one of the chunk's vCPUs and its claim is free for the reader: STAY at ``cur``;
3. ``cand = mask & allowed``; empty: NONE;
4. ``home`` = the k-th vCPU of ``cand`` ascending, ``k = mix64(file_id * 0x9E3779B97F4A7C15
   + chunk) % |cand|`` (64-bit wrap-around);
5. ``target`` = the first vCPU of ``cand``, cyclically ascending from ``home``, whose claim
   is free for the reader (no holder, the reader itself, or expired); none free: STAY at
   ``cur`` if it is one of the chunk's vCPUs, else ``home``;
6. a limited budget already spent (``spent >= budget``): NONE; else MIGRATE to ``target``.

After STAY or MIGRATE the caller settles the claims (:meth:`ClaimTable.settle`); after a
MIGRATE it also spends one unit of the chunk's budget, as the shim does.

A thread the shim moved is pinned to one vCPU, so the guest's scheduler can no longer
spread it: when it reads a chunk the table does not place, the caller asks the rule with
the thread's allowed CPUs as the mask, an unlimited budget and no ``min_read_size`` (a move
for CPU, not for data), so two pinned readers never share a vCPU while a free one exists.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

_M64 = (1 << 64) - 1

#: ``UC_LAYOUT_VERSION`` of the shared layout whose claim words this module mirrors
LAYOUT_VERSION = 5
#: vCPUs a mask can name (``UC_MAX_VCPUS``)
MAX_VCPUS = 256
#: ``UC_BUDGET_UNLIMITED``: a budget that never runs out
BUDGET_UNLIMITED = 0xFFFFFFFF
#: ``UC_HOME_HASH_MUL``: 2**64 / golden ratio, spreads a file's chunks over a unit's vCPUs
HOME_HASH_MULTIPLIER = 0x9E3779B97F4A7C15
#: ``UC_CLAIM_LEASE_NS``: how long a claim lasts without a read renewing it. A thread that
#: stops reading (or whose process dies: claims need no destructor) frees its vCPU for
#: other readers within a scheduler-scale time; a thread that keeps reading renews it.
CLAIM_LEASE_NS = 10_000_000
#: claim word: bits 0..23 the holder's tid (0: free; Linux tids are below 2**22)
CLAIM_TID_BITS = 24
CLAIM_TID_MAX = (1 << CLAIM_TID_BITS) - 1
#: claim word: bits 24..63 the expiry, CLOCK_MONOTONIC milliseconds modulo 2**40, compared
#: as a serial number (expired when ``(now - expiry) mod 2**40 < 2**39``)
CLAIM_EXPIRY_BITS = 40
_EXPIRY_MASK = (1 << CLAIM_EXPIRY_BITS) - 1
_HALF_EXPIRY = 1 << (CLAIM_EXPIRY_BITS - 1)
_LEASE_MS = CLAIM_LEASE_NS // 1_000_000
_ALL_VCPUS = (1 << MAX_VCPUS) - 1

#: a set of vCPUs: a bit mask (bit v = vCPU v) or a set of indices
VcpuMaskT = int | AbstractSet[int]


class Action(enum.IntEnum):
    """What a read does; the values are ``enum uc_action``'s."""

    #: leave the thread where it is; the claims are untouched
    NONE = 0
    #: already on one of the chunk's vCPUs: read there
    STAY = 1
    #: move the thread to the single CPU :attr:`Decision.vcpu`, then read
    MIGRATE = 2


@dataclass(frozen=True)
class Decision:
    """The rule's answer for one read (``struct uc_decision``).

    :param action: what the read does.
    :param vcpu: the vCPU it runs on (STAY, MIGRATE); -1 for NONE.
    """

    action: Action
    vcpu: int = -1


#: the answer that changes nothing
NO_MOVE = Decision(Action.NONE, -1)


def mix64(x: int) -> int:
    """The splitmix64 finalizer (``uc_mix64``).

    :param x: input, taken modulo 2**64.
    :returns: the mixed unsigned 64-bit value.
    """
    x &= _M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    x ^= x >> 31
    return x


def as_mask(vcpus: VcpuMaskT) -> int:
    """A vCPU set as the rule's bit mask; vCPUs outside 0..MAX_VCPUS-1 are dropped.

    :param vcpus: a bit mask or a set of vCPU indices.
    :returns: the bit mask.
    """
    if isinstance(vcpus, int):
        return vcpus & _ALL_VCPUS
    mask = 0
    for v in vcpus:
        if 0 <= v < MAX_VCPUS:
            mask |= 1 << v
    return mask


def _nth_bit(mask: int, k: int) -> int:
    """The k-th (from 0) set bit of ``mask``, ascending; ``mask`` has more than k bits."""
    for _ in range(k):
        mask &= mask - 1  # drop the lowest bit
    return (mask & -mask).bit_length() - 1


def vcpus_from_home(cand: int, home: int) -> Iterator[int]:
    """The vCPUs of a mask cyclically ascending from one of them (step 5's order).

    :param cand: the candidates, a bit mask.
    :param home: where to start (a vCPU of ``cand``).
    :returns: an iterator over the vCPUs.
    """
    upper = cand >> home << home
    for part in (upper, cand ^ upper):
        while part:
            low = part & -part
            yield low.bit_length() - 1
            part ^= low


def home_vcpu(cand: VcpuMaskT, file_id: int, chunk: int) -> int:
    """The chunk's own vCPU among ``cand`` (step 4).

    :param cand: the candidate vCPUs (the entry's mask and the thread's allowed CPUs).
    :param file_id: opaque file id (modulo 2**64).
    :param chunk: chunk index (modulo 2**64).
    :returns: the vCPU, or -1 when ``cand`` is empty.
    """
    bits = as_mask(cand)
    count = bits.bit_count()
    if count == 0:
        return -1
    k = mix64(((file_id & _M64) * HOME_HASH_MULTIPLIER + (chunk & _M64)) & _M64) % count
    return _nth_bit(bits, k)


def _now_ms(now_ns: int) -> int:
    return ((now_ns & _M64) // 1_000_000) & _EXPIRY_MASK


def claim_is_free(word: int, tid: int, now_ns: int) -> bool:
    """Is a claim word free for ``tid`` at ``now_ns`` (``uc_claim_is_free``)?

    :param word: the claim word.
    :param tid: the reader.
    :param now_ns: CLOCK_MONOTONIC nanoseconds.
    :returns: no holder, ``tid`` itself, or expired.
    """
    holder = word & CLAIM_TID_MAX
    if holder == 0 or holder == tid:
        return True
    return (_now_ms(now_ns) - (word >> CLAIM_TID_BITS)) & _EXPIRY_MASK < _HALF_EXPIRY


def claim_held_fresh(word: int, tid: int, now_ns: int) -> bool:
    """Does ``tid`` hold this claim with at least half a lease (and at most one) left at
    ``now_ns`` (``uc_claim_held_fresh``)? Such a claim is not renewed: a reader writes its
    claim about twice a lease, not on every read.

    :param word: the claim word.
    :param tid: the reader.
    :param now_ns: the claims' clock, nanoseconds.
    :returns: whether the word is the reader's and fresh.
    """
    left = ((word >> CLAIM_TID_BITS) - _now_ms(now_ns)) & _EXPIRY_MASK
    return tid != 0 and word & CLAIM_TID_MAX == tid and _LEASE_MS // 2 <= left <= _LEASE_MS


def claim_word(tid: int, now_ns: int) -> int:
    """The claim word ``tid`` writes at ``now_ns``: expiring one lease later.

    :param tid: the reader, 1..CLAIM_TID_MAX.
    :param now_ns: CLOCK_MONOTONIC nanoseconds.
    :returns: the word.
    """
    expiry = (_now_ms(now_ns) + _LEASE_MS) & _EXPIRY_MASK
    return expiry << CLAIM_TID_BITS | (tid & CLAIM_TID_MAX)


class ClaimTable:
    """The per-vCPU claims all readers of a guest share (the counters file's claim words).

    A claim says which reading thread runs on a vCPU, until when. Words of vCPUs at or
    above :attr:`nvcpus` do not exist: those vCPUs are always free and never claimed.

    :param nvcpus: claim words (the counters file's ``max_vcpus``).
    :param words: initial nonzero words by vCPU (each vCPU < ``nvcpus``, word < 2**64).
    :raises ValueError: on a vCPU outside the table.
    """

    def __init__(self, nvcpus: int = MAX_VCPUS, words: dict[int, int] | None = None) -> None:
        if nvcpus < 0:
            raise ValueError(f"nvcpus must be >= 0, not {nvcpus}")
        #: number of claim words
        self.nvcpus = nvcpus
        self._words: dict[int, int] = {}
        #: tid -> vCPUs whose word names it, so that settling does not scan every vCPU
        self._held: dict[int, set[int]] = {}
        for v, w in (words or {}).items():
            if not 0 <= v < nvcpus:
                raise ValueError(f"vCPU {v} outside a table of {nvcpus} claims")
            self._store(v, w & _M64)

    def _store(self, v: int, word: int) -> None:
        old = self._words.pop(v, 0)
        if old:
            held = self._held[old & CLAIM_TID_MAX]
            held.discard(v)
            if not held:
                del self._held[old & CLAIM_TID_MAX]
        if word:
            self._words[v] = word
            self._held.setdefault(word & CLAIM_TID_MAX, set()).add(v)

    def word(self, vcpu: int) -> int:
        """The claim word of a vCPU (0: free, or no such word)."""
        return self._words.get(vcpu, 0)

    def holder(self, vcpu: int) -> int:
        """The tid named by a vCPU's claim (0: none), expired or not."""
        return self.word(vcpu) & CLAIM_TID_MAX

    def snapshot(self) -> dict[int, int]:
        """The nonzero claim words by vCPU, ascending."""
        return dict(sorted(self._words.items()))

    def is_free(self, vcpu: int, tid: int, now_ns: int) -> bool:
        """May ``tid`` run on ``vcpu`` at ``now_ns`` without displacing another reader?"""
        if vcpu >= self.nvcpus:
            return True
        return claim_is_free(self._words.get(vcpu, 0), tid, now_ns)

    def settle(self, decision: Decision, tid: int, now_ns: int) -> None:
        """Leave the claims as the shim does after a read (``uc_claims_settle``).

        After STAY or MIGRATE at v: ``tid``'s claims on other vCPUs are released and v is
        claimed until ``now_ns`` + :data:`CLAIM_LEASE_NS` if free for ``tid`` (another
        live reader's claim is never overwritten) and not already held by ``tid`` with
        half a lease or more left (:func:`claim_held_fresh`). NONE, and a tid that does not
        fit the word (0 or above :data:`CLAIM_TID_MAX`), change nothing.

        :param decision: what :func:`decide` answered for this read.
        :param tid: the reader.
        :param now_ns: CLOCK_MONOTONIC nanoseconds, as given to :func:`decide`.
        """
        if decision.action is Action.NONE or not 0 < tid <= CLAIM_TID_MAX:
            return
        v = decision.vcpu
        for other in [w for w in self._held.get(tid, ()) if w != v]:
            self._store(other, 0)
        if (0 <= v < self.nvcpus and not claim_held_fresh(self.word(v), tid, now_ns)
                and self.is_free(v, tid, now_ns)):
            self._store(v, claim_word(tid, now_ns))

    def copy(self) -> ClaimTable:
        """An independent table with the same words."""
        return ClaimTable(self.nvcpus, self._words)


#: ``read_span``'s ``prev_end`` when the thread has not read the file before (UINT64_MAX)
NO_PREVIOUS_END = _M64


def read_span(n: int, off: int, chunk_size: int, file_size: int = _M64,
              prev_end: int = NO_PREVIOUS_END) -> int:
    """The bytes a read is expected to bring from its chunk (``uc_read_span``).

    A sequential read — at offset 0, or where the thread's previous read of the file
    ended (the kernel's readahead rule) — counts the rest of its chunk up to the end of the
    file; any other read counts its own ``n``. Where the policy keeps a file's consecutive
    chunks together (an extent, larger than programs' read buffers), a program reading the
    file in buffers migrates once per extent instead of never.

    :param n: bytes of this read.
    :param off: its file offset (modulo 2**64).
    :param chunk_size: the table's chunk size (0: the read's own ``n``).
    :param file_size: the file's size (2**64 - 1: unknown).
    :param prev_end: where this thread's previous read of the file ended (2**64 - 1: none).
    """
    off &= _M64
    if not chunk_size or (off != 0 and off != prev_end & _M64):
        return n
    end = min(off - off % chunk_size + chunk_size, _M64, file_size & _M64)
    return end - off if end > off and end - off > n else n


def decide(*, n: int, min_read_size: int, cur: int, mask: VcpuMaskT, allowed: VcpuMaskT,
           file_id: int, chunk: int, budget: int, spent: int, claims: ClaimTable | None,
           tid: int, now_ns: int) -> Decision:
    """The vCPU a read runs on (``uc_decide``); reads ``claims``, changes nothing.

    :param n: the read's span (:func:`read_span`).
    :param min_read_size: the table's threshold: shorter reads never migrate.
    :param cur: the vCPU the thread runs on now (-1 unknown).
    :param mask: the chunk's vCPUs (the table entry).
    :param allowed: the CPUs the thread could use when the shim loaded.
    :param file_id: opaque file id (modulo 2**64).
    :param chunk: chunk index (modulo 2**64).
    :param budget: migrations per interval for the chunk, 0..2**32-1
        (:data:`BUDGET_UNLIMITED`: no limit).
    :param spent: migrations already spent on the chunk this interval.
    :param claims: the guest's claims; ``None`` (no counters file): every vCPU is free.
    :param tid: the reader (1..CLAIM_TID_MAX; the simulator's thread 0 must be shifted).
    :param now_ns: CLOCK_MONOTONIC nanoseconds (modulo 2**64).
    :returns: the decision.
    """
    # 1. MFC §4.5: short reads never migrate; an unknown CPU cannot be compared
    if n < min_read_size or cur < 0:
        return NO_MOVE
    bits = as_mask(mask)
    # 2. already home, and no other live reader holds this vCPU
    at_home = cur < MAX_VCPUS and bits >> cur & 1 == 1
    if at_home and (claims is None or claims.is_free(cur, tid, now_ns)):
        return Decision(Action.STAY, cur)
    # 3. only CPUs the thread was allowed on
    cand = bits & as_mask(allowed)
    if not cand:
        return NO_MOVE
    # 4. the chunk's home inside the unit
    home = home_vcpu(cand, file_id, chunk)
    # 5. the first vCPU from home on that no other live reader holds; all held: stay home
    # (cur, when it is one of the chunk's) or go to the chunk's own
    target = -1
    if claims is not None:
        target = next((v for v in vcpus_from_home(cand, home) if claims.is_free(v, tid, now_ns)),
                      -1)
    if target < 0:
        if at_home:
            return Decision(Action.STAY, cur)
        target = home
    # 6. MFC §4.5 competitive rule: the host's per-chunk budget of migrations
    if budget != BUDGET_UNLIMITED and spent >= budget:
        return NO_MOVE
    return Decision(Action.MIGRATE, target)
