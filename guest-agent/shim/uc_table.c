/* SPDX-License-Identifier: MIT */
/*
 * uc_table.c - table lookup: a chunk's entry in the placement table the agent
 * publishes in shared memory (lock-free, a seqlock over a double buffer).
 */
#include "uc_shim.h"

/*
 * Look (file_id, chunk) up in the active buffer. chunk_size and min_read_size are
 * always filled when the table is valid; returns 0 when no valid table exists.
 * Readers never block: a reader that sees the writer inside its buffer retries.
 */
int uc_lookup(uint64_t file_id, uint64_t off, struct uc_hit *h)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	const struct uc_table_hdr *th = tv->hdr;
	const unsigned char *tbase = (const void *)th;
	const size_t buf_len = sizeof(struct uc_table_buf) + (size_t)tv->nbuckets * 64u;
	const uint64_t bmask = tv->nbuckets - 1;
	int tries;

	if (__builtin_expect(__atomic_load_n(&th->magic, __ATOMIC_ACQUIRE) != UC_TABLE_MAGIC, 0)) {
		uc_retire();
		return 0;
	}
	for (tries = 0; tries < UC_SEQ_RETRIES; tries++) {
		uint32_t active = __atomic_load_n(&th->active, __ATOMIC_ACQUIRE) & 1u;
		const struct uc_table_buf *b =
			(const void *)(tbase + sizeof(*th) + active * buf_len);
		const struct uc_entry *e = (const void *)(b + 1);
		uint64_t s1 = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE), i, slot, chunk, cs;

		if (s1 & 1u)
			continue;
		cs = __atomic_load_n(&b->chunk_size, __ATOMIC_RELAXED);
		if (!(__atomic_load_n(&b->flags, __ATOMIC_RELAXED) & 1u) || cs == 0 ||
		    (cs & (cs - 1)))
			return 0;
		h->chunk_size = cs;
		h->min_read_size = __atomic_load_n(&b->min_read_size, __ATOMIC_RELAXED);
		h->found = 0;
		h->homes = !!(__atomic_load_n(&b->flags, __ATOMIC_RELAXED) & UC_TABLE_HOMES);
		chunk = off / cs;
		slot = uc_bucket_hash(file_id, chunk) & bmask;
		for (i = 0; i <= bmask; i++, slot = (slot + 1) & bmask) {
			const struct uc_entry *x = &e[slot];
			uint32_t fl = __atomic_load_n(&x->flags, __ATOMIC_RELAXED);
			unsigned w;

			if (!(fl & UC_ENTRY_USED))
				break;
			if (__atomic_load_n(&x->file_id, __ATOMIC_RELAXED) != file_id ||
			    __atomic_load_n(&x->chunk, __ATOMIC_RELAXED) != chunk)
				continue;
			h->flags = fl;
			h->budget = __atomic_load_n(&x->migration_budget, __ATOMIC_RELAXED);
			h->color_node = __atomic_load_n(&x->color_node, __ATOMIC_RELAXED);
			h->replica_nodes = __atomic_load_n(&x->replica_nodes, __ATOMIC_RELAXED);
			for (w = 0; w < UC_MASK_WORDS; w++)
				h->mask[w] = __atomic_load_n(&x->mask[w], __ATOMIC_RELAXED);
			h->found = 1;
			break;
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) == s1 &&
		    (__atomic_load_n(&th->active, __ATOMIC_RELAXED) & 1u) == active)
			return 1;
	}
	return 0;
}
