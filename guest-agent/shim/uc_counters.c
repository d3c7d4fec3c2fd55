/* SPDX-License-Identifier: MIT */
/*
 * uc_counters.c - the shared per-chunk counters: reads, bytes per vCPU, reads per guest
 * node, the chunk's home node and its migrations this interval (its budget).
 */
#include "uc_shim.h"

/* The chunk's slot in the active region; `insert`: take a free one (else count a drop). */
struct uc_ctr_slot *uc_slot_at(const struct uc_ctr_view *cv, uint64_t file_id,
			       uint64_t chunk, int insert)
{
	struct uc_ctr_hdr *ch;
	uint32_t region, nslots, ssz;
	unsigned char *base;
	uint64_t key, idx;
	unsigned p;

	if (!cv)
		return NULL;
	ch = cv->hdr;
	if (__builtin_expect(__atomic_load_n(&ch->magic, __ATOMIC_ACQUIRE) != UC_CTR_MAGIC, 0)) {
		uc_retire();
		return NULL;
	}
	region = __atomic_load_n(&ch->active, __ATOMIC_ACQUIRE) & 1u;
	nslots = cv->nslots;
	ssz = cv->slot_size;
	base = (unsigned char *)ch + UC_CTR_REGIONS_OFF + (size_t)region * nslots * ssz;
	key = uc_slot_key(file_id, chunk);
	idx = key & (nslots - 1u);

	for (p = 0; p < UC_PROBES && p < nslots; p++, idx = (idx + 1) & (nslots - 1u)) {
		struct uc_ctr_slot *s = (void *)(base + idx * ssz);
		uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE), zero = 0;

		if (k == key)
			return s;
		if (k != 0)
			continue;
		if (!insert)
			return NULL;
		if (__atomic_compare_exchange_n(&s->key, &zero, key, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			__atomic_store_n(&s->file_id, file_id, __ATOMIC_RELAXED);
			__atomic_store_n(&s->chunk, chunk, __ATOMIC_RELEASE);
			/* once per chunk and harvest: the agent polls this word, not the region */
			__atomic_fetch_add(&ch->inserts, 1, __ATOMIC_RELEASE);
			return s;
		}
		if (zero == key)
			return s;
	}
	if (insert)
		__atomic_fetch_add(&ch->dropped[region], 1, __ATOMIC_RELAXED);
	return NULL;
}

static inline struct uc_ctr_slot *uc_slot(const struct uc_ctr_view *cv, uint64_t file_id,
					  uint64_t chunk)
{
	return uc_slot_at(cv, file_id, chunk, 1);
}

static inline uint64_t *uc_vcpu_bytes(struct uc_ctr_slot *s)
{
	return (uint64_t *)(void *)(s + 1);
}

/*
 * Count one completed call of `n` bytes at `off` (off < 0: offset unknown) on fd, in its
 * chunks (at most UC_MAX_SPLIT). Reads also count per guest node, and the first read of a
 * chunk in an interval records the node of the chunk's first page-cache page (its home,
 * NCC's primary copy).
 *
 * `reads` and the reads per node count runs: a read that continues this thread's previous
 * read of the file inside the same chunk (`cont`, and not at a chunk's start) is part of
 * that run and adds bytes only. So a chunk read in 128 KiB buffers counts as often as one
 * read whole: popularity (MFC's use counts) and the migrations a sequential reader makes
 * (once per chunk, uc_read_span) do not depend on the program's buffer size.
 */
void uc_count(int fd, uint64_t file_id, int64_t off, uint64_t cs, ssize_t n, int is_write,
	      int nt, int cont)
{
	const struct uc_ctr_view *cv = uc_ctr();
	uint64_t chunk, left, o;
	int cpu, i, node;

	if (off < 0 || cs == 0 || !cv)
		return;
	cpu = sched_getcpu();
	node = is_write ? -1 : uc_node_of(cpu);
	o = (uint64_t)off;
	left = n > 0 ? (uint64_t)n : 0;
	chunk = o / cs;
	for (i = 0; i < UC_MAX_SPLIT; i++, chunk++) {
		uint64_t part = cs - (o % cs);
		struct uc_ctr_slot *s;

		if (part > left || i == UC_MAX_SPLIT - 1)
			part = left;
		s = uc_slot(cv, file_id, chunk);
		if (s) {
			if (is_write) {
				__atomic_fetch_add(&s->writes, 1, __ATOMIC_RELAXED);
			} else {
				int run = !(i == 0 && cont && o % cs != 0);

				__atomic_fetch_add(&s->reads, (uint64_t)run, __ATOMIC_RELAXED);
				__atomic_fetch_add(&s->bytes, part, __ATOMIC_RELAXED);
				if (nt)
					__atomic_fetch_add(&s->nt_reads, 1, __ATOMIC_RELAXED);
				if (cpu >= 0 && (uint32_t)cpu < cv->max_vcpus && part)
					__atomic_fetch_add(&uc_vcpu_bytes(s)[cpu], part,
							   __ATOMIC_RELAXED);
				if (node >= 0 && (uint32_t)node < cv->nnodes)
					__atomic_fetch_add(&uc_vcpu_bytes(s)[cv->max_vcpus + node],
							   (uint64_t)run, __ATOMIC_RELAXED);
				/* one node: the agent knows the home without asking the kernel */
				if (fd >= 0 && n > 0 && cv->nnodes > 1) {
					uint64_t *home = &uc_vcpu_bytes(s)[cv->max_vcpus + cv->nnodes];
					uint64_t zero = 0;

					if (__atomic_load_n(home, __ATOMIC_RELAXED) == 0 &&
					    __atomic_compare_exchange_n(home, &zero, UC_HOME_BUSY, 0,
									__ATOMIC_RELAXED,
									__ATOMIC_RELAXED)) {
						int hn = uc_page_node(fd, chunk * cs);

						if (hn >= 0 && hn < (int)UC_MAX_NODES)
							__atomic_store_n(home, (uint64_t)hn + 1,
									 __ATOMIC_RELAXED);
					}
				}
			}
		}
		left -= part;
		o += part;
		if (!left)
			break;
	}
}

/* Spend one migration of the chunk's budget for this interval (MFC section 4.5). */
int uc_take_budget(uint64_t file_id, uint64_t chunk, uint32_t budget)
{
	struct uc_ctr_slot *s = uc_slot(uc_ctr(), file_id, chunk);
	uint64_t m;

	if (!s) /* no counters (or the region is full): only an unlimited budget migrates */
		return budget == UC_BUDGET_UNLIMITED;
	m = __atomic_load_n(&s->migrations, __ATOMIC_RELAXED);
	do {
		if (budget != UC_BUDGET_UNLIMITED && m >= budget)
			return 0;
	} while (!__atomic_compare_exchange_n(&s->migrations, &m, m + 1, 1, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return 1;
}
