/* SPDX-License-Identifier: MIT */
/*
 * uc_migrate.c - migration: moves the reading thread to the vCPU the rule of uc_decide.h
 * picks (MFC section 4.2, 4.5), spending the chunk's budget, and settles the vCPU claims;
 * and gives a pinned thread its own CPUs back once the table sends no chunk to a vCPU.
 */
#include "uc_shim.h"

/* this thread's id for the vCPU claims, 0 until asked (reset in a fork child) */
static UC_TLS uint32_t uc_tid_cached;
/* the shim moved this thread: it is pinned to one vCPU (a fork child inherits both) */
UC_TLS int uc_pinned;
/* the size of file uc_size_file when this thread's stream of it began (uc_span) */
static UC_TLS uint64_t uc_size_file;
static UC_TLS uint64_t uc_size = UINT64_MAX;

void uc_tid_atfork_child(void)
{
	uc_tid_cached = 0; /* the child's thread has a tid of its own */
}

/* The vCPU claims' clock: precise, because a claim lasts only UC_CLAIM_LEASE_NS. */
static uint64_t uc_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
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
 * reader. The file's size matters only when the rest of the chunk could reach
 * min_read_size, and is asked once per stream (one fstat when a stream starts at offset
 * 0, or continues a file whose size this thread has not asked): a file that grows or
 * shrinks while one thread scans it only moves the estimate, never the bytes read.
 */
uint64_t uc_span(int fd, uint64_t file_id, uint64_t off, size_t n, const struct uc_hit *h)
{
	uint64_t prev = file_id == uc_seq_file ? uc_seq_end : UINT64_MAX;
	uint64_t span = uc_read_span(n, off, h->chunk_size, UINT64_MAX, prev);
	struct stat st;

	if (n >= h->min_read_size || span < h->min_read_size)
		return n;
	if (off == 0 || uc_size_file != file_id) {
		if (fstat(fd, &st) < 0)
			return n;
		uc_size_file = file_id;
		uc_size = (uint64_t)st.st_size;
	}
	return uc_read_span(n, off, h->chunk_size, uc_size, prev);
}

/*
 * Run the read on the vCPU the rule of uc_decide.h picks: stay, or move the thread to that
 * single CPU, spending one migration of the chunk's budget; then claim that vCPU.
 */
void uc_maybe_migrate(uint64_t file_id, uint64_t off, uint64_t n, const struct uc_hit *h)
{
	struct uc_read_facts f;
	struct uc_decision d;
	uint64_t *claims;
	uint32_t nclaims = 0;
	cpu_set_t want;

	/* step 1 of the rule, before any clock or counter is read: most reads end here */
	if (n < h->min_read_size)
		return;
	f.n = n;
	f.min_read_size = h->min_read_size;
	memcpy(f.mask, h->mask, sizeof(f.mask));
	memcpy(f.allowed, uc_orig_words, sizeof(f.allowed));
	f.file_id = file_id;
	f.chunk = off / h->chunk_size;
	f.budget = h->budget;
	f.spent = uc_spent(file_id, f.chunk, h->budget);
	f.now_ns = uc_mono_ns();
	f.cur = sched_getcpu();
	f.tid = uc_tid();
	f.pad = 0;
	claims = uc_claims(uc_ctr(), &nclaims);
	d = uc_decide(&f, claims, nclaims);
	if (d.action == UC_ACT_NONE)
		return;
	if (d.action == UC_ACT_MIGRATE) {
		/* MFC section 4.5 competitive rule: spend one; another thread may have been first */
		if (!uc_take_budget(file_id, f.chunk, h->budget))
			return;
		CPU_ZERO(&want);
		CPU_SET(d.vcpu, &want);
		/* not moved (a cpuset forbids it): then it does not hold the vCPU either */
		if (sched_setaffinity(0, sizeof(want), &want) < 0)
			return;
		uc_pinned = 1;
	}
	uc_claims_settle(claims, nclaims, d, f.tid, f.now_ns);
}

/* Give a thread the shim pinned the CPUs it had when the shim loaded (uc_call.c: a table
 * without home vCPUs). Tried once: a failure (no CPU of that set left in the thread's
 * cpuset) is not retried on every read. */
void uc_unpin(void)
{
	if (uc_orig_valid)
		(void)sched_setaffinity(0, sizeof(uc_orig_mask), &uc_orig_mask);
	uc_pinned = 0;
}
