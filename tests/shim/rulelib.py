"""The shim's vCPU rule run both ways: libuc_decide.so through ctypes, and shimrule.py.

A :class:`Step` is one read: the facts ``uc_decide`` looks at, the size of the claim table
and, when ``reset``, the claim words the table starts from (else the previous step's table
carries on, so one table evolves over a sequence of reads). Both runners answer, per step,
the decision and the nonzero claim words after the step's settle.
"""

from __future__ import annotations

import ctypes
import struct
from array import array
from pathlib import Path
from typing import NamedTuple

from unicache_sim.guest.shimrule import ClaimTable, decide

#: one step's result: ((action, vcpu), nonzero claim words by vCPU)
OutcomeT = tuple[tuple[int, int], dict[int, int]]

#: struct uc_read_facts followed by struct uc_test_step's own fields (uc_decide_batch.c)
STEP = struct.Struct("<QQ4Q4QQQQQiIIIIIQQ")
#: the order of uc_test_constants()
CONSTANT_NAMES = ("claim_lease_ns", "home_hash_multiplier", "layout_version", "claim_tid_bits",
                  "claim_expiry_bits", "budget_unlimited", "max_vcpus", "claims_offset",
                  "regions_offset", "facts_size", "step_size")
_M64 = (1 << 64) - 1
_BATCH = 2048


class Step(NamedTuple):
    """One read for the rule (the fields of ``struct uc_read_facts``, then the table).

    A named tuple, not a dataclass: the test builds 100,000 of them and construction time
    counts.
    """

    n: int
    min_read_size: int
    mask: int
    allowed: int
    file_id: int
    chunk: int
    spent: int
    now_ns: int
    cur: int
    budget: int
    tid: int
    #: claim words (0: no table, as without a counters file)
    nclaims: int
    #: start from ``init`` instead of the previous step's table
    reset: bool
    #: initial nonzero words, (vCPU, word) pairs
    init: tuple[tuple[int, int], ...] = ()

    def describe(self) -> str:
        """The step in one line, for a failure message."""
        return (f"n={self.n} min={self.min_read_size} cur={self.cur} mask={self.mask:#x} "
                f"allowed={self.allowed:#x} file_id={self.file_id:#x} chunk={self.chunk:#x} "
                f"budget={self.budget} spent={self.spent} tid={self.tid} now_ns={self.now_ns} "
                f"nclaims={self.nclaims} reset={self.reset} "
                f"init={{{', '.join(f'{v}: {w:#x}' for v, w in self.init)}}}")


def py_step(step: Step, claims: ClaimTable | None) -> OutcomeT:
    """Decide and settle one step in Python on ``claims`` (changed in place)."""
    d = decide(n=step.n, min_read_size=step.min_read_size, cur=step.cur, mask=step.mask,
               allowed=step.allowed, file_id=step.file_id, chunk=step.chunk,
               budget=step.budget, spent=step.spent, claims=claims, tid=step.tid,
               now_ns=step.now_ns)
    if claims is None:
        return (int(d.action), d.vcpu), {}
    claims.settle(d, step.tid, step.now_ns)
    return (int(d.action), d.vcpu), claims.snapshot()


def _words(mask: int) -> list[int]:
    return [mask >> (64 * i) & _M64 for i in range(4)]


class RuleLib:
    """libuc_decide.so: the rule of uc_decide.c, many steps per call.

    :param path: the built library.
    """

    def __init__(self, path: Path) -> None:
        self._lib = ctypes.CDLL(str(path))
        self._run = self._lib.uc_test_run_steps
        self._run.restype = ctypes.c_int64
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_uint64]
        self._spans = self._lib.uc_test_read_spans
        self._spans.restype = None
        self._spans.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p]
        self._constants = self._lib.uc_test_constants
        self._constants.restype = ctypes.c_uint32
        self._constants.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]

    def constants(self) -> dict[str, int]:
        """The constants the C side was built with, by name."""
        buf = (ctypes.c_uint64 * 32)()
        n = self._constants(buf, 32)
        assert n == len(CONSTANT_NAMES), n
        return dict(zip(CONSTANT_NAMES, buf[:n], strict=True))

    def read_spans(self, cases: list[tuple[int, int, int, int, int]]) -> list[int]:
        """``uc_read_span`` of every (n, off, chunk_size, file_size, prev_end) case, in C."""
        flat = array("Q", [v for case in cases for v in case])
        out = array("Q", bytes(8 * len(cases)))
        self._spans(flat.buffer_info()[0], len(cases), out.buffer_info()[0])
        return out.tolist()

    def run(self, steps: list[Step]) -> list[OutcomeT]:
        """Decide and settle every step in C, in order (batches share the C table)."""
        out: list[OutcomeT] = []
        for at in range(0, len(steps), _BATCH):
            out.extend(self._run_batch(steps[at:at + _BATCH]))
        return out

    def _run_batch(self, steps: list[Step]) -> list[OutcomeT]:
        n = len(steps)
        packed = bytearray(STEP.size * n)
        init = array("Q", [0, 0])
        for i, s in enumerate(steps):
            STEP.pack_into(packed, i * STEP.size, s.n, s.min_read_size, *_words(s.mask),
                           *_words(s.allowed), s.file_id, s.chunk, s.spent, s.now_ns, s.cur,
                           s.budget, s.tid, 0, s.nclaims, int(s.reset), len(init) // 2 - 1,
                           len(s.init))
            for v, w in s.init:
                init.extend((v, w))
        # init pairs are numbered from the dummy pair at 0: shift every step by one
        cap = sum(s.nclaims for s in steps) + 1
        decisions = array("i", bytes(8 * n))
        counts = array("I", bytes(4 * n))
        pairs = array("Q", bytes(16 * cap))
        steps_buf = (ctypes.c_char * len(packed)).from_buffer(packed)
        used = self._run(ctypes.addressof(steps_buf), n, init.buffer_info()[0] + 16,
                         decisions.buffer_info()[0], counts.buffer_info()[0],
                         pairs.buffer_info()[0], cap)
        assert used >= 0, f"uc_test_run_steps failed: {used}"
        flat = pairs[:2 * used].tolist()
        out: list[OutcomeT] = []
        at = 0
        for i in range(n):
            c = counts[i]
            table = dict(zip(flat[at:at + 2 * c:2], flat[at + 1:at + 2 * c:2], strict=True))
            out.append(((decisions[2 * i], decisions[2 * i + 1]), table))
            at += 2 * c
        return out
