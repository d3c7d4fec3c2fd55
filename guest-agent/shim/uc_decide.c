/* SPDX-License-Identifier: MIT */
/*
 * uc_decide.c - which vCPU a read runs on (the rule of uc_decide.h), and the vCPU claims
 * it leaves behind. No system calls, no clock: the caller passes what it knows.
 */
#include "uc_decide.h"

static inline int uc_bit(const uint64_t m[UC_MASK_WORDS], int64_t v)
{
	return v >= 0 && v < (int64_t)UC_MAX_VCPUS && ((m[v / 64] >> (v % 64)) & 1u);
}

/* Lowest set bit of m at or above `from`, or -1. */
static int uc_next_bit(const uint64_t m[UC_MASK_WORDS], unsigned from)
{
	unsigned w;

	for (w = from / 64; w < UC_MASK_WORDS; w++) {
		uint64_t x = m[w];

		if (w == from / 64)
			x &= ~0ull << (from % 64);
		if (x)
			return (int)(w * 64 + (unsigned)__builtin_ctzll(x));
	}
	return -1;
}

/* The k-th (from 0) set bit of m, ascending; m has more than k bits. */
static int uc_nth_bit(const uint64_t m[UC_MASK_WORDS], uint64_t k)
{
	unsigned w;

	for (w = 0; w < UC_MASK_WORDS; w++) {
		uint64_t x = m[w], c = (uint64_t)__builtin_popcountll(x);

		if (k >= c) {
			k -= c;
			continue;
		}
		while (k--)
			x &= x - 1; /* drop the lowest bit */
		return (int)(w * 64 + (unsigned)__builtin_ctzll(x));
	}
	return -1;
}

static inline uint64_t uc_now_ms(uint64_t now_ns)
{
	return (now_ns / 1000000ull) & UC_CLAIM_EXPIRY_MASK;
}

int uc_claim_is_free(uint64_t word, uint32_t tid, uint64_t now_ns)
{
	uint64_t holder = word & UC_CLAIM_TID_MAX, expiry = word >> UC_CLAIM_TID_BITS;

	if (holder == 0 || holder == tid)
		return 1;
	/* serial-number comparison: the ms clock of the word wraps every 2^40 ms */
	return ((uc_now_ms(now_ns) - expiry) & UC_CLAIM_EXPIRY_MASK) <
	       (1ull << (UC_CLAIM_EXPIRY_BITS - 1));
}

int uc_claim_held_fresh(uint64_t word, uint32_t tid, uint64_t now_ns)
{
	uint64_t left = ((word >> UC_CLAIM_TID_BITS) - uc_now_ms(now_ns)) & UC_CLAIM_EXPIRY_MASK;

	return tid != 0 && (word & UC_CLAIM_TID_MAX) == tid && left >= UC_CLAIM_LEASE_MS / 2 &&
	       left <= UC_CLAIM_LEASE_MS;
}

uint64_t uc_claim_word(uint32_t tid, uint64_t now_ns)
{
	uint64_t expiry = (uc_now_ms(now_ns) + UC_CLAIM_LEASE_MS) & UC_CLAIM_EXPIRY_MASK;

	return expiry << UC_CLAIM_TID_BITS | (tid & UC_CLAIM_TID_MAX);
}

static inline int uc_vcpu_free(const uint64_t *claims, uint32_t nclaims, int v, uint32_t tid,
			       uint64_t now_ns)
{
	if (!claims || (uint32_t)v >= nclaims)
		return 1;
	return uc_claim_is_free(__atomic_load_n(&claims[v], __ATOMIC_RELAXED), tid, now_ns);
}

uint64_t uc_read_span(uint64_t n, uint64_t off, uint64_t chunk_size, uint64_t file_size,
		      uint64_t prev_end)
{
	uint64_t end;

	if (!chunk_size || (off != 0 && off != prev_end))
		return n;
	/* the chunk's end, saturating near 2^64 */
	end = off - off % chunk_size;
	end = end > UINT64_MAX - chunk_size ? UINT64_MAX : end + chunk_size;
	if (end > file_size)
		end = file_size;
	return end > off && end - off > n ? end - off : n;
}

struct uc_decision uc_decide(const struct uc_read_facts *f, const uint64_t *claims,
			     uint32_t nclaims)
{
	const struct uc_decision none = {UC_ACT_NONE, -1};
	uint64_t cand[UC_MASK_WORDS], count = 0, k, i;
	int home, v, x, at_home;
	unsigned w;

	/* 1. MFC section 4.5: short reads never migrate; an unknown CPU cannot be compared */
	if (f->n < f->min_read_size || f->cur < 0)
		return none;
	/* 2. already home, and no other live reader holds this vCPU */
	at_home = uc_bit(f->mask, f->cur);
	if (at_home && uc_vcpu_free(claims, nclaims, f->cur, f->tid, f->now_ns))
		return (struct uc_decision){UC_ACT_STAY, f->cur};
	/* 3. only CPUs the thread was allowed on */
	for (w = 0; w < UC_MASK_WORDS; w++) {
		cand[w] = f->mask[w] & f->allowed[w];
		count += (uint64_t)__builtin_popcountll(cand[w]);
	}
	if (!count)
		return none;
	/* 4. the chunk's home inside the unit */
	k = uc_mix64(f->file_id * UC_HOME_HASH_MUL + f->chunk) % count;
	home = uc_nth_bit(cand, k);
	/*
	 * 5. the first vCPU from home on that no other live reader holds; all held: stay
	 * (cur, when it is one of the chunk's) or go to the chunk's own
	 */
	v = -1;
	for (i = 0, x = home; i < count; i++) {
		if (uc_vcpu_free(claims, nclaims, x, f->tid, f->now_ns)) {
			v = x;
			break;
		}
		x = uc_next_bit(cand, (unsigned)x + 1);
		if (x < 0)
			x = uc_next_bit(cand, 0); /* wrap around to the lowest */
	}
	if (v < 0) {
		if (at_home)
			return (struct uc_decision){UC_ACT_STAY, f->cur};
		v = home;
	}
	/* 6. MFC section 4.5 competitive rule: the host's per-chunk budget of migrations */
	if (f->budget != UC_BUDGET_UNLIMITED && f->spent >= f->budget)
		return none;
	return (struct uc_decision){UC_ACT_MIGRATE, v};
}

void uc_claims_settle(uint64_t *claims, uint32_t nclaims, struct uc_decision d, uint32_t tid,
		      uint64_t now_ns)
{
	uint32_t w;

	if (d.action == UC_ACT_NONE || !claims || tid == 0 || tid > UC_CLAIM_TID_MAX)
		return;
	for (w = 0; w < nclaims; w++) {
		uint64_t old = __atomic_load_n(&claims[w], __ATOMIC_RELAXED);

		/* a failed swap means another thread took the expired claim since: not ours */
		if ((int64_t)w != d.vcpu && (old & UC_CLAIM_TID_MAX) == tid)
			(void)__atomic_compare_exchange_n(&claims[w], &old, 0, 0, __ATOMIC_RELAXED,
							  __ATOMIC_RELAXED);
	}
	if (d.vcpu >= 0 && (uint32_t)d.vcpu < nclaims) {
		uint64_t old = __atomic_load_n(&claims[d.vcpu], __ATOMIC_RELAXED);
		uint64_t want = uc_claim_word(tid, now_ns);

		/* held with half a lease or more left: no store, no cache line bouncing (a reader
		 * renews its claim about twice a lease, not on every read) */
		if (!uc_claim_held_fresh(old, tid, now_ns) && uc_claim_is_free(old, tid, now_ns))
			(void)__atomic_compare_exchange_n(&claims[d.vcpu], &old, want, 0,
							  __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
}
