/* SPDX-License-Identifier: MIT */
/*
 * uc_decide.h - which vCPU a read runs on: the shim's migration rule (MFC section 4.2, 4.5).
 *
 * One rule for the product and the simulator: libunicache.so calls it for every placed
 * read, tools/sim/python/unicache_sim/guest/shimrule.py mirrors it line for line for the
 * simulated guest, and tests/shim/test_decide_differential.py holds the two together.
 *
 * uc_decide() is pure: it reads the claims and writes nothing. The steps:
 *   1. n < min_read_size, or the current CPU is unknown (cur < 0): NONE; n is the read's
 *      span (uc_read_span): a sequential reader counts the rest of the chunk;
 *   2. cur is one of the chunk's vCPUs (mask) and its claim is free for this thread: STAY;
 *   3. cand = mask & allowed (the CPUs the thread could use when the shim loaded); empty: NONE;
 *   4. home = the k-th vCPU of cand ascending, k = uc_mix64(file_id * UC_HOME_HASH_MUL +
 *      chunk) % |cand|: a chunk always prefers the same vCPU of its unit, and the chunks of
 *      a unit spread over its vCPUs;
 *   5. target = the first vCPU of cand, cyclically ascending from home, whose claim is free
 *      for this thread (free: no holder, the thread itself, or expired); none free: STAY at
 *      cur if it is one of the chunk's vCPUs, else home;
 *   6. a limited budget already spent (spent >= budget): NONE; else MIGRATE to target.
 * After STAY or MIGRATE at v the caller settles the claims (uc_claims_settle): it drops
 * its claims on other vCPUs and claims v, unless another live thread holds v; a claim on v
 * it already holds with at least half a lease left is left as it is.
 *
 * A thread the shim moved is pinned to one vCPU, which the guest's scheduler can no longer
 * change: when it reads a chunk the table does not place, the shim asks the rule with the
 * thread's allowed CPUs as the mask, an unlimited budget and no min_read_size (the move is
 * about CPU, not data: a read of any size), so two pinned readers never share a vCPU while
 * a free one exists.
 */
#ifndef UC_DECIDE_H
#define UC_DECIDE_H

#include <stdint.h>

#include "uc_layout.h"

/*
 * How long a claim lasts without a read refreshing it. A thread that stops reading (or
 * whose process dies: claims need no destructor) frees its vCPU for other readers within
 * a scheduler-scale time; a thread that keeps reading renews it on every read.
 */
#define UC_CLAIM_LEASE_NS 10000000ull
#define UC_CLAIM_LEASE_MS (UC_CLAIM_LEASE_NS / 1000000ull)
/* 2^64 / golden ratio: spreads consecutive chunks of one file over a unit's vCPUs */
#define UC_HOME_HASH_MUL 0x9e3779b97f4a7c15ull

enum uc_action {
	UC_ACT_NONE = 0,    /* leave the thread where it is, claims untouched */
	UC_ACT_STAY = 1,    /* already on one of the chunk's vCPUs: vcpu = cur */
	UC_ACT_MIGRATE = 2, /* move the thread to the single CPU vcpu */
};

struct uc_decision {
	int32_t action; /* enum uc_action */
	int32_t vcpu;   /* STAY, MIGRATE: the vCPU; NONE: -1 */
};

/* Everything the rule looks at, but the claims. Layout shared with the differential test. */
struct uc_read_facts {
	uint64_t n;                        /* bytes of this read */
	uint64_t min_read_size;            /* table header: shorter reads never migrate */
	uint64_t mask[UC_MASK_WORDS];      /* the entry's vCPUs */
	uint64_t allowed[UC_MASK_WORDS];   /* the thread's affinity when the shim loaded */
	uint64_t file_id;
	uint64_t chunk;                    /* chunk index */
	uint64_t spent;                    /* migrations spent on the chunk this interval */
	uint64_t now_ns;                   /* CLOCK_MONOTONIC_COARSE: the claims' clock */
	int32_t cur;                       /* sched_getcpu(): -1 unknown */
	uint32_t budget;                   /* UC_BUDGET_UNLIMITED: no limit */
	uint32_t tid;                      /* the reader; 0 or > UC_CLAIM_TID_MAX never claims */
	uint32_t pad;
};

/*
 * The vCPU a read runs on. `claims` holds `nclaims` claim words (uc_layout.h), read with
 * relaxed atomic loads; vCPUs at or above nclaims, and all of them when claims is NULL
 * (no counters file), are free and never claimed.
 */
struct uc_decision uc_decide(const struct uc_read_facts *f, const uint64_t *claims,
			     uint32_t nclaims);

/*
 * The bytes a read of n bytes at file offset `off` is expected to bring from its chunk:
 * what uc_decide compares with min_read_size. MFC section 4.5 compares the read's own
 * size; where the policy keeps a file's consecutive chunks together (an extent, larger
 * than programs' read buffers: 2.25 MiB on Rome against coreutils' 128 KiB), that would
 * never migrate a program that reads the file in buffers. So, as the kernel's readahead
 * does (mm/readahead.c: a read at offset 0, or where the previous one ended, starts or
 * continues a sequential stream), a sequential read counts the rest of its chunk up to
 * the end of the file, and any other read counts its own n.
 *
 * prev_end: where this thread's previous read of the same file ended (UINT64_MAX: none);
 * file_size: UINT64_MAX when unknown (the span then runs to the chunk's end); chunk_size
 * 0: the read's own n.
 */
uint64_t uc_read_span(uint64_t n, uint64_t off, uint64_t chunk_size, uint64_t file_size,
		      uint64_t prev_end);

/*
 * After STAY or MIGRATE at d.vcpu: release `tid`'s claims on every other vCPU (compare-
 * and-swap: only while it still holds them) and claim d.vcpu until now + the lease if its
 * claim is free for `tid` (never overwriting another live thread's claim) and `tid` does
 * not already hold it with at least half a lease left. NONE, a NULL table or a tid that
 * does not fit the word (0 or > UC_CLAIM_TID_MAX) change nothing.
 */
void uc_claims_settle(uint64_t *claims, uint32_t nclaims, struct uc_decision d, uint32_t tid,
		      uint64_t now_ns);

/* Is a claim word free for `tid` at now_ns: no holder, tid itself, or expired? */
int uc_claim_is_free(uint64_t word, uint32_t tid, uint64_t now_ns);

/* Does `tid` hold this claim with at least half a lease (and at most one) left at now_ns? */
int uc_claim_held_fresh(uint64_t word, uint32_t tid, uint64_t now_ns);

/* The claim word `tid` writes at now_ns: expiring one lease later. */
uint64_t uc_claim_word(uint32_t tid, uint64_t now_ns);

#endif /* UC_DECIDE_H */
