/* SPDX-License-Identifier: MIT */
/*
 * uc_migrate.c - migration: moves the reading thread to the vCPU the rule of uc_decide.h
 * picks (MFC section 4.2, 4.5), spending the chunk's budget, and settles the vCPU claims;
 * and gives a pinned thread its own CPUs back once the table sends no chunk to a vCPU.
 */
#include "uc_shim.h"

/* this thread's id for the vCPU claims, 0 until asked (reset in a fork child) */
static UC_TLS uint32_t uc_tid_cached;

/* The main thread's id is the process id, which the activation asks anyway (uc_activate):
 * its claims need no system call of their own. */
void uc_tid_set(pid_t pid)
{
	uc_tid_cached = pid > 0 && pid <= (long)UC_CLAIM_TID_MAX ? (uint32_t)pid : UINT32_MAX;
}

/* A fork child's only thread is its main one: its id is the child's pid. */
void uc_tid_atfork_child(void)
{
	uc_tid_set(getpid());
}

/* The vCPU claims' clock: CLOCK_MONOTONIC at the tick's resolution (a jiffy, 1-10 ms
 * against a lease of UC_CLAIM_LEASE_NS), read from the vDSO without the TSC: every
 * process of the guest reads the same clock, so claims compare alike everywhere. */
static uint64_t uc_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This thread's id (a system call once per thread); 0 if it does not fit a claim word. */
static uint32_t uc_tid(void)
{
	if (__builtin_expect(uc_tid_cached == 0, 0)) {
		long t = syscall(SYS_gettid);

		uc_tid_cached = t > 0 && t <= (long)UC_CLAIM_TID_MAX ? (uint32_t)t : UINT32_MAX;
	}
	return uc_tid_cached == UINT32_MAX ? 0 : uc_tid_cached;
}

/* The vCPU claims of the counters file and how many are used; NULL without counters. */
static uint64_t *uc_claims(const struct uc_ctr_view *cv, uint32_t *nclaims)
{
	if (!cv || __atomic_load_n(&cv->hdr->magic, __ATOMIC_ACQUIRE) != UC_CTR_MAGIC)
		return NULL;
	*nclaims = cv->max_vcpus; /* validated at map time: <= UC_MAX_VCPUS */
	return (uint64_t *)(void *)((unsigned char *)cv->hdr + UC_CTR_CLAIMS_OFF);
}

/*
 * Migrations already spent on a chunk this interval, looked up without taking a slot. Only
 * a limited budget asks; without counters it counts as spent, so that only an unlimited
 * budget migrates uncounted (a full region is caught by uc_take_budget).
 */
static uint64_t uc_spent(uint64_t file_id, uint64_t chunk, uint32_t budget)
{
	const struct uc_ctr_view *cv = uc_ctr();
	struct uc_ctr_slot *s;

	if (budget == UC_BUDGET_UNLIMITED)
		return 0;
	if (!cv)
		return UINT64_MAX;
	s = uc_slot_at(cv, file_id, chunk, 0);
	return s ? __atomic_load_n(&s->migrations, __ATOMIC_RELAXED) : 0;
}

/*
 * The read's span (uc_read_span, uc_decide.h): the rest of the chunk for a sequential
 * reader, clipped at the file's size as it was when the descriptor was opened (no fstat
 * here): a file that grows or shrinks while one thread scans it only moves the estimate,
 * never the bytes read.
 */
uint64_t uc_span(struct uc_fd *e, uint64_t file_id, uint64_t off, size_t n,
		 const struct uc_hit *h)
{
	uint64_t prev = file_id == uc_t.seq_file ? uc_t.seq_end : UINT64_MAX;
	int64_t size = atomic_load_explicit(&e->size, memory_order_relaxed);

	if (n >= h->min_read_size)
		return n;
	return uc_read_span(n, off, h->chunk_size, size >= 0 ? (uint64_t)size : UINT64_MAX,
			    prev);
}

/*
 * Steps 1-2 of the rule and the settle, for the common case, without the rule's walk: the
 * thread already holds the claim of the CPU it runs on, a vCPU of the chunk, with at least
 * half a lease left. uc_decide would say STAY (a claim the thread holds is free for it)
 * and uc_claims_settle would change nothing (the thread holds no other claim, and a fresh
 * one is not renewed), so this is the rule, not a shortcut around it.
 */
static int uc_still_home(const struct uc_hit *h, const uint64_t *claims, uint32_t nclaims,
			 int cur)
{
	uint32_t tid = uc_tid_cached;

	if (cur < 0 || (uint32_t)cur >= nclaims || !tid || tid == UINT32_MAX ||
	    !(h->mask[cur / 64] >> (cur % 64) & 1u))
		return 0;
	return uc_claim_held_fresh(__atomic_load_n(&claims[cur], __ATOMIC_RELAXED), tid,
				   uc_mono_ns());
}

/* The claim this thread holds on v now, as a stay (vCPU -1 when it holds none). */
static struct uc_stay uc_stay_on(const uint64_t *claims, uint32_t nclaims, int v)
{
	struct uc_stay none = {-1, 0};
	uint64_t word;

	if (!claims || v < 0 || (uint32_t)v >= nclaims || !uc_tid_cached ||
	    uc_tid_cached == UINT32_MAX)
		return none;
	word = __atomic_load_n(&claims[v], __ATOMIC_RELAXED);
	if ((word & UC_CLAIM_TID_MAX) != uc_tid_cached)
		return none;
	return (struct uc_stay){v, (word >> UC_CLAIM_TID_BITS) - UC_CLAIM_LEASE_MS / 2};
}

/*
 * Run the read on the vCPU the rule of uc_decide.h picks: stay, or move the thread to that
 * single CPU, spending one migration of the chunk's budget; then claim that vCPU. Returns
 * the claim the thread holds afterwards (uc_in_run's stay), vCPU -1 when the rule said
 * nothing or took no claim.
 */
struct uc_stay uc_maybe_migrate(uint64_t file_id, uint64_t off, uint64_t n,
				const struct uc_hit *h)
{
	struct uc_stay none = {-1, 0};
	struct uc_read_facts f;
	struct uc_decision d;
	uint64_t *claims;
	uint32_t nclaims = 0;
	cpu_set_t want;

	/* step 1 of the rule, before any clock or counter is read: most reads end here */
	if (n < h->min_read_size)
		return none;
	f.cur = uc_cpu();
	claims = uc_claims(uc_ctr(), &nclaims);
	if (claims && uc_still_home(h, claims, nclaims, f.cur))
		return uc_stay_on(claims, nclaims, f.cur);
	f.n = n;
	f.min_read_size = h->min_read_size;
	memcpy(f.mask, h->mask, sizeof(f.mask));
	memcpy(f.allowed, uc.orig.words, sizeof(f.allowed));
	f.file_id = file_id;
	f.chunk = uc_chunk_of(off, h->chunk_size);
	f.budget = h->budget;
	f.spent = uc_spent(file_id, f.chunk, h->budget);
	f.now_ns = uc_mono_ns();
	f.tid = uc_tid();
	f.pad = 0;
	d = uc_decide(&f, claims, nclaims);
	if (d.action == UC_ACT_NONE)
		return none;
	if (d.action == UC_ACT_MIGRATE) {
		/* MFC section 4.5 competitive rule: spend one; another thread may have been first */
		if (!uc_take_budget(file_id, f.chunk, h->budget))
			return none;
		CPU_ZERO(&want);
		CPU_SET(d.vcpu, &want);
		/* not moved (a cpuset forbids it): then it does not hold the vCPU either */
		if (sched_setaffinity(0, sizeof(want), &want) < 0)
			return none;
		uc_t.pinned = 1;
	}
	uc_claims_settle(claims, nclaims, d, f.tid, f.now_ns);
	return uc_stay_on(claims, nclaims, d.vcpu);
}

/* Give a thread the shim pinned the CPUs it had when the shim loaded (uc_call.c: a table
 * without home vCPUs). Tried once: a failure (no CPU of that set left in the thread's
 * cpuset) is not retried on every read. */
void uc_unpin(void)
{
	if (uc.orig.valid)
		(void)sched_setaffinity(0, sizeof(uc.orig.mask), &uc.orig.mask);
	uc_t.pinned = 0;
}
