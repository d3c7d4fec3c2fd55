/* SPDX-License-Identifier: MIT */
/*
 * uc_table.c - the placement table the agent publishes in shared memory (lock-free, a
 * seqlock over a double buffer): this thread's copy of its parameters per generation, a
 * chunk's entry (the last one kept per thread) and a file's entry.
 */
#include "uc_shim.h"

/* this thread's last chunk entry: a sequential reader looks up once per chunk */
static UC_TLS struct {
	uint64_t gen, file_id, chunk;
	struct uc_hit hit;
} uc_last;

/*
 * Run `body` over the active buffer under its seqlock: b and e name the buffer and its
 * entries; `body` returns through `done` with a consistent read. Gives up (the table is
 * being rewritten without pause, or its magic went) after UC_SEQ_RETRIES tries.
 */
#define UC_WITH_BUFFER(tv, b, e, body)                                                     \
	do {                                                                               \
		const struct uc_table_hdr *th_ = (tv)->hdr;                                \
		const unsigned char *tbase_ = (const void *)th_;                           \
		const size_t blen_ = uc_buf_len((tv)->nbuckets);                           \
		int tries_;                                                                \
		for (tries_ = 0; tries_ < UC_SEQ_RETRIES; tries_++) {                      \
			uint32_t act_ = __atomic_load_n(&th_->active, __ATOMIC_ACQUIRE) & 1u; \
			const struct uc_table_buf *b =                                     \
				(const void *)(tbase_ + UC_TABLE_BUFS_OFF + act_ * blen_); \
			const struct uc_entry *e =                                         \
				(const void *)((const unsigned char *)b + UC_BUF_HEAD_LEN); \
			uint64_t s1_ = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);         \
			if (s1_ & 1u)                                                      \
				continue;                                                  \
			body;                                                              \
			__atomic_thread_fence(__ATOMIC_ACQUIRE);                           \
			if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) == s1_ &&           \
			    (__atomic_load_n(&th_->active, __ATOMIC_RELAXED) & 1u) == act_) \
				goto done;                                                 \
		}                                                                          \
	} while (0)

/* The entry of (file_id, chunk) in buffer entries e, or NULL. */
static const struct uc_entry *uc_probe(const struct uc_entry *e, uint32_t nbuckets,
				       uint64_t file_id, uint64_t chunk)
{
	const uint64_t bmask = nbuckets - 1u;
	uint64_t i, slot = uc_bucket_hash(file_id, chunk) & bmask;

	for (i = 0; i <= bmask; i++, slot = (slot + 1) & bmask) {
		const struct uc_entry *x = &e[slot];

		if (!(__atomic_load_n(&x->flags, __ATOMIC_RELAXED) & UC_ENTRY_USED))
			return NULL;
		if (__atomic_load_n(&x->file_id, __ATOMIC_RELAXED) == file_id &&
		    __atomic_load_n(&x->chunk, __ATOMIC_RELAXED) == chunk)
			return x;
	}
	return NULL;
}

/*
 * Bring this thread's parameters to generation `gen`: chunk size, min_read_size, flags and
 * the open sample of the active buffer (chunk_size 0 when it holds no valid table). 0 when they could not
 * be read consistently (retried on the next call).
 */
int uc_params_refresh(uint64_t gen)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	struct uc_params p = {0, 0, 0, 0, 0, 0};

	UC_WITH_BUFFER(tv, b, e, {
		uint64_t cs = __atomic_load_n(&b->chunk_size, __ATOMIC_RELAXED);

		(void)e;
		p.flags = __atomic_load_n(&b->flags, __ATOMIC_RELAXED);
		p.chunk_size = (p.flags & UC_TABLE_VALID) && cs && !(cs & (cs - 1)) ? cs : 0;
		p.min_read_size = __atomic_load_n(&b->min_read_size, __ATOMIC_RELAXED);
		p.sample_bytes = __atomic_load_n(&b->sample_bytes, __ATOMIC_RELAXED);
		p.sample_shift = __atomic_load_n(&b->sample_shift, __ATOMIC_RELAXED);
		p.names_files = __atomic_load_n(&b->nentries, __ATOMIC_RELAXED) != 0;
	});
	if (p.sample_shift > UC_SAMPLE_SHIFT_MAX) /* not the agent's: count every open */
		p.sample_shift = 0;
	return 0;
done:
	uc_t.tp = p;
	uc_t.gen = gen;
	return 1;
}

/*
 * Look (file_id, chunk) up in the active buffer. chunk_size and min_read_size are
 * always filled when the table is valid; returns 0 when no valid table exists.
 * Readers never block: a reader that sees the writer inside its buffer retries.
 */
int uc_lookup(uint64_t file_id, uint64_t off, struct uc_hit *h)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	int valid = 0;

	if (!tv || __atomic_load_n(&tv->hdr->magic, __ATOMIC_ACQUIRE) != UC_TABLE_MAGIC)
		return 0;
	UC_WITH_BUFFER(tv, b, e, {
		uint64_t cs = __atomic_load_n(&b->chunk_size, __ATOMIC_RELAXED);
		uint32_t bf = __atomic_load_n(&b->flags, __ATOMIC_RELAXED);
		const struct uc_entry *x;
		unsigned w;

		valid = (bf & UC_TABLE_VALID) && cs && !(cs & (cs - 1));
		if (valid) {
			h->chunk_size = cs;
			h->min_read_size = __atomic_load_n(&b->min_read_size, __ATOMIC_RELAXED);
			h->homes = !!(bf & UC_TABLE_HOMES);
			x = uc_probe(e, tv->nbuckets, file_id, uc_chunk_of(off, cs));
			h->found = x != NULL;
			if (x) {
				h->flags = __atomic_load_n(&x->flags, __ATOMIC_RELAXED);
				h->budget = __atomic_load_n(&x->migration_budget, __ATOMIC_RELAXED);
				h->color_node = __atomic_load_n(&x->color_node, __ATOMIC_RELAXED);
				h->replica_nodes = __atomic_load_n(&x->replica_nodes,
								   __ATOMIC_RELAXED);
				for (w = 0; w < UC_MASK_WORDS; w++)
					h->mask[w] = __atomic_load_n(&x->mask[w], __ATOMIC_RELAXED);
			}
		}
	});
	return 0;
done:
	return valid;
}

/* uc_lookup through this thread's last entry: the same answer while the generation holds. */
int uc_lookup_cached(uint64_t gen, uint64_t file_id, uint64_t off, struct uc_hit *h)
{
	uint64_t chunk = uc_chunk_of(off, uc_t.tp.chunk_size);

	if (uc_last.gen == gen && uc_last.file_id == file_id && uc_last.chunk == chunk) {
		*h = uc_last.hit;
		return 1;
	}
	if (!uc_lookup(file_id, off, h))
		return 0;
	/* kept only when the table read is the generation asked for */
	if (uc_gen_of_table(uc.thdr) == gen &&
	    h->chunk_size == uc_t.tp.chunk_size) {
		uc_last.gen = gen;
		uc_last.file_id = file_id;
		uc_last.chunk = chunk;
		uc_last.hit = *h;
	}
	return 1;
}

/* Whether buffer b's file filter may hold file_id (0: the file has no entry). */
static int uc_filter_may_hold(const struct uc_table_buf *b, uint64_t file_id)
{
	const unsigned char *f = (const unsigned char *)(b + 1);
	uint32_t b1, b2;

	uc_filter_bits(file_id, &b1, &b2);
	return (__atomic_load_n(&f[b1 / 8], __ATOMIC_RELAXED) >> (b1 % 8) & 1) &&
	       (__atomic_load_n(&f[b2 / 8], __ATOMIC_RELAXED) >> (b2 % 8) & 1);
}

/* The flags of the file's entry (UC_ENTRY_USED set when there is one; 0 when none);
 * UINT32_MAX when the table could not be read consistently. The buffer's file filter is
 * asked first: a file it does not hold costs no probe of the entries. */
uint32_t uc_file_flags(uint64_t file_id)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	uint32_t fl = 0;

	if (!tv)
		return UINT32_MAX;
	UC_WITH_BUFFER(tv, b, e, {
		const struct uc_entry *x = uc_filter_may_hold(b, file_id) ?
			uc_probe(e, tv->nbuckets, file_id, UC_FILE_CHUNK) : NULL;

		fl = x ? __atomic_load_n(&x->flags, __ATOMIC_RELAXED) : 0;
	});
	return UINT32_MAX;
done:
	return fl;
}

/* Does the table surely not name the file? Its buffer's file filter alone (no probe of the
 * entries): 1 when the filter does not hold it, 0 when it may (or the table could not be
 * read consistently). For the open sample's skip (uc_fdcache.c), which costs one open of a
 * file the filter clears nothing but the filter's two bits. */
int uc_file_unnamed(uint64_t file_id)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	int clear = 0;

	if (!tv)
		return 0;
	UC_WITH_BUFFER(tv, b, e, {
		(void)e;
		clear = !uc_filter_may_hold(b, file_id);
	});
	return 0;
done:
	return clear;
}
