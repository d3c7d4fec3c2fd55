/* SPDX-License-Identifier: MIT */
/*
 * uc_counters.c - counting: this thread's open run of counts, and the shared per-chunk
 * counters it goes to (bytes and runs per vCPU, writes, the chunk's home node and its
 * migrations this interval: its budget).
 *
 * A call adds to the thread's run (uc_shim.h, struct uc_run) while it stays on one file on
 * one vCPU, in one chunk or, for a sequential reader, in the chunks it enters one after
 * another; the run goes to the shared counters (per chunk, a slot lookup and one atomic
 * add of a packed cell, uc_layout.h) when the call moves elsewhere, after UC_RUN_CALLS
 * calls or UC_RUN_CHUNKS chunks, at its first call after the agent's next harvest that
 * does not continue it inside its chunk (the table header's `harvests`: a slow reader's
 * counts wait at most one harvest or the rest of its chunk, uc_in_run), when its
 * descriptor is closed, and when the thread or the process ends. So a sequential reader
 * pays for the shared counters once per chunk and without waiting on one miss after
 * another, and the counts are exact: what is still gathered when a process execs, calls
 * _exit or is killed (at most one run per thread) is all that is lost. A chunk reaches the agent's early look (the counters' `inserts`) when
 * its run is sent: a reader that keeps reading a fresh chunk sends it within UC_RUN_CALLS
 * calls.
 */
#include "uc_shim.h"


static pthread_key_t uc_run_key;
static int uc_run_key_ok;

/* The active region of counters view cv: its head, index and first slot. */
struct uc_region {
	struct uc_ctr_region *head;
	uint32_t *index;
	unsigned char *slots;
	uint32_t which;
};

static inline struct uc_region uc_region_of(const struct uc_ctr_view *cv)
{
	struct uc_ctr_hdr *ch = cv->hdr;
	uint32_t which = __atomic_load_n(&ch->active, __ATOMIC_ACQUIRE) & 1u;
	unsigned char *base = (unsigned char *)ch + UC_CTR_REGIONS_OFF + which * cv->region_len;

	return (struct uc_region){(void *)base, (void *)(base + sizeof(struct uc_ctr_region)),
				  base + sizeof(struct uc_ctr_region) + uc_index_len(cv->nslots),
				  which};
}

/* Take the region's next slot for (file_id, chunk) with `key`; NULL when it is full. */
static struct uc_ctr_slot *uc_slot_take(const struct uc_ctr_view *cv, const struct uc_region *g,
					uint64_t key, uint64_t file_id, uint64_t chunk,
					uint32_t *number)
{
	struct uc_ctr_slot *s;
	uint64_t n;

	/* a full region is read, not added to: its head line stays shared among readers */
	if (__atomic_load_n(&g->head->next, __ATOMIC_RELAXED) >= cv->nslots)
		return NULL;
	n = __atomic_fetch_add(&g->head->next, 1, __ATOMIC_RELAXED);
	if (n >= cv->nslots)
		return NULL;
	s = (void *)(g->slots + n * cv->slot_size);
	__atomic_store_n(&s->file_id, file_id, __ATOMIC_RELAXED);
	__atomic_store_n(&s->chunk, chunk, __ATOMIC_RELAXED);
	__atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
	*number = (uint32_t)n;
	return s;
}

/*
 * The chunk's slot in the active region, found through the region's index; `insert`:
 * take the next free slot and enter it in the index (else count a drop). Slots are taken
 * in order (uc_layout.h), so a process's new chunks are side by side. Two processes that
 * take a slot for one chunk at once: the one whose index entry lands keeps it, the other
 * gives its slot back as keyless (the agent skips it) and uses the winner's.
 */
struct uc_ctr_slot *uc_slot_at(const struct uc_ctr_view *cv, uint64_t file_id,
			       uint64_t chunk, int insert)
{
	const uint64_t nidx = 2ull * (cv ? cv->nslots : 0), imask = nidx - 1u;
	struct uc_ctr_slot *mine = NULL;
	struct uc_region g;
	uint64_t key, pos;
	uint32_t number = 0;
	unsigned p;

	if (!cv)
		return NULL;
	if (__builtin_expect(__atomic_load_n(&cv->hdr->magic, __ATOMIC_ACQUIRE) != UC_CTR_MAGIC,
			     0)) {
		uc_retire();
		return NULL;
	}
	g = uc_region_of(cv);
	key = uc_slot_key(file_id, chunk);
	pos = uc_index_pos(file_id, chunk, nidx);
	for (p = 0; p < UC_PROBES; p++, pos = (pos + 1) & imask) {
		uint32_t v = __atomic_load_n(&g.index[pos], __ATOMIC_ACQUIRE);
		struct uc_ctr_slot *s;

		if (v == 0) {
			if (!insert)
				return NULL;
			if (!mine && !(mine = uc_slot_take(cv, &g, key, file_id, chunk, &number)))
				break; /* full */
			if (__atomic_compare_exchange_n(&g.index[pos], &v, number + 1, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				/* once per chunk and harvest: the agent polls this word */
				__atomic_fetch_add(&cv->hdr->inserts, 1, __ATOMIC_RELEASE);
				return mine;
			}
			/* another process entered a slot here first: v is its number + 1 */
		}
		if (v - 1u >= cv->nslots)
			continue; /* not a slot (this user's file was written over): not ours */
		s = (void *)(g.slots + (uint64_t)(v - 1u) * cv->slot_size);
		if (__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) == key) {
			if (mine) /* lost the race for this chunk: the slot taken goes keyless */
				__atomic_store_n(&mine->key, 0, __ATOMIC_RELEASE);
			return s;
		}
	}
	if (mine)
		__atomic_store_n(&mine->key, 0, __ATOMIC_RELEASE);
	if (insert)
		__atomic_fetch_add(&cv->hdr->dropped[g.which], 1, __ATOMIC_RELAXED);
	return NULL;
}

/*
 * NCC: where a chunk's first page-cache page lives, once per chunk and interval, in tables
 * where NCC runs (UC_TABLE_NUMA) and processes whose mechanisms may make system calls
 * (the page-node lookup keeps errno). The descriptor must still name the run's file.
 */
static void uc_run_home(struct uc_ctr_slot *s, const struct uc_run *r, uint64_t chunk)
{
	uint64_t zero = 0;
	int hn;

	if (!(uc_t.tp.flags & UC_TABLE_NUMA) || r->fd < 0 ||
	    __atomic_load_n(&s->home, __ATOMIC_RELAXED) != 0 || !uc_may_act())
		return;
	if ((unsigned)r->fd >= UC_FD_CACHE ||
	    atomic_load_explicit(&uc_fds[r->fd].state, memory_order_acquire) != UC_FD_FILE ||
	    atomic_load_explicit(&uc_fds[r->fd].file_id, memory_order_relaxed) != r->file_id)
		return;
	if (!__atomic_compare_exchange_n(&s->home, &zero, UC_HOME_BUSY, 0, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	hn = uc_page_node(r->fd, chunk * r->chunk_size);
	if (hn >= 0 && hn < (int)UC_MAX_NODES)
		__atomic_store_n(&s->home, (uint64_t)hn + 1, __ATOMIC_RELAXED);
}

/* A chunk's bytes and runs in run r (uc_run: between lo and hi, read whole in one run). */
static inline void uc_run_chunk(const struct uc_run *r, uint64_t chunk, uint64_t *bytes,
				uint32_t *runs)
{
	if (chunk == r->hi) {
		*bytes = r->cur_bytes;
		*runs = r->cur_runs;
	} else if (chunk == r->lo) {
		*bytes = r->lo_bytes;
		*runs = r->lo_runs;
	} else {
		*bytes = r->chunk_size;
		*runs = 1;
	}
}

/*
 * Send run r to the shared counters: each of its chunks' slot (looked up, or taken) and
 * one atomic add of its cell on the run's vCPU. A run's chunks share one line of the
 * index (uc_index_pos), and a sequential reader's new chunks take slots side by side.
 */
void uc_run_send(const struct uc_run *r)
{
	const struct uc_ctr_view *cv = r->cv;
	struct uc_ctr_hdr *ch = cv->hdr;
	uint32_t region = __atomic_load_n(&ch->active, __ATOMIC_ACQUIRE) & 1u;
	uint64_t c;

	for (c = r->lo; c <= r->hi; c++) {
		struct uc_ctr_slot *s = uc_slot_at(cv, r->file_id, c, 1);
		uint64_t bytes;
		uint32_t runs;

		if (!s)
			continue;
		uc_run_chunk(r, c, &bytes, &runs);
		/* a sampled open stands for 2^scale opens of its kind (uc_fd_known) */
		bytes <<= r->scale;
		runs <<= r->scale;
		if (c == r->lo && r->writes)
			__atomic_fetch_add(&s->writes, r->writes, __ATOMIC_RELAXED);
		if (c == r->lo && r->nt)
			__atomic_fetch_add(&s->nt_reads, r->nt, __ATOMIC_RELAXED);
		if ((runs || bytes) && r->cpu >= 0 && (uint32_t)r->cpu < cv->max_vcpus)
			__atomic_fetch_add((uint64_t *)(void *)(s + 1) + r->cpu,
					   uc_cell(runs, bytes), __ATOMIC_RELAXED);
		else if (runs || bytes) /* a CPU the layout has no cell for: said, not lost */
			__atomic_fetch_add(&ch->dropped[region], 1, __ATOMIC_RELAXED);
		if (bytes)
			uc_run_home(s, r, c);
	}
}

/* A count that could not be kept (no slot, no cell, its file never known): said in the
 * active region's `dropped`. */
void uc_count_drop(void)
{
	const struct uc_ctr_view *cv = uc_ctr();
	uint32_t region;

	if (!cv)
		return;
	region = __atomic_load_n(&cv->hdr->active, __ATOMIC_ACQUIRE) & 1u;
	__atomic_fetch_add(&cv->hdr->dropped[region], 1, __ATOMIC_RELAXED);
}

/* Send this thread's open run and close it. A run under a stand-in id (its descriptor's
 * file not known yet) goes by uc_run_unknown: `may_identify` when this is no read's path
 * (a close, the thread's or the process's end), so the shim may ask the file. */
void uc_run_flush(int may_identify)
{
	struct uc_thread *t = &uc_t;
	struct uc_run r;

	if (!t->run_chunks)
		return;
	r = (struct uc_run){
		.cv = t->run_cv,
		.file_id = t->run_file,
		.chunk_size = 1ull << t->run_shift,
		.lo = t->run_hi - (t->run_chunks - 1),
		.hi = t->run_hi,
		.lo_bytes = t->run_lo_bytes,
		.cur_bytes = t->run_bytes,
		.lo_runs = t->run_lo_runs,
		.cur_runs = t->run_runs,
		.calls = t->run_calls,
		.writes = t->run_writes,
		.nt = t->run_nt,
		.fd = t->run_fd,
		.cpu = t->run_cpu,
		.scale = t->run_scale,
	};
	t->run_chunks = 0;
	/* counters replaced since: their region is gone, and so are its counts */
	if (!r.calls || r.cv != uc_ctr())
		return;
	if (t->run_pend)
		uc_run_unknown(&r, may_identify);
	else
		uc_run_send(&r);
}

static void uc_run_thread_exit(void *unused)
{
	(void)unused;
	uc_run_flush(1);
}

/* At load: the key whose destructor sends a thread's open run when the thread ends. Only a
 * key glibc keeps in the thread's own block (below 32) is used: a higher one could allocate
 * memory in pthread_setspecific, which a read in a signal handler must not. */
void uc_run_init(void)
{
	uc_run_key_ok = pthread_key_create(&uc_run_key, uc_run_thread_exit) == 0 &&
			uc_run_key < 32;
}

/* A descriptor is being closed: a run of this thread on it goes out now. */
void uc_run_close(int fd)
{
	if (uc_t.run_chunks && uc_t.run_fd == fd && !uc_t.busy)
		uc_run_flush(1);
}

/* A fork child starts without its parent's open run (the parent sends it). */
void uc_run_atfork_child(void)
{
	uc_t.run_chunks = 0;
	uc_t.busy = 0;
	uc_t.registered = 0;
}

/*
 * Count one completed call of `n` bytes at `off` (off < 0: offset unknown) on fd, in its
 * chunks (at most UC_MAX_SPLIT), into this thread's run: a call in the run's current chunk
 * on its vCPU joins it, any other sends the run and opens another (a read inside the run
 * usually never gets here: uc_in_run, uc_run_add).
 *
 * Runs count reads that start somewhere new: a read that continues this thread's previous
 * read of the file inside the same chunk (`cont`, and not at a chunk's start) adds bytes
 * only. So a chunk read in 128 KiB buffers counts as often as one read whole: popularity
 * (MFC's use counts) and the migrations a sequential reader makes (once per chunk,
 * uc_read_span) do not depend on the program's buffer size.
 */
void uc_count(int fd, const struct uc_call *c, ssize_t n, int is_write, int nt, int cont)
{
	const struct uc_ctr_view *cv = uc_ctr();
	uint64_t file_id = c->file_id, cs = c->chunk_size;
	int64_t off = c->off;
	struct uc_thread *t = &uc_t;
	uint64_t chunk, left, o;
	uint16_t harvests;
	int cpu, i;

	if (off < 0 || cs == 0 || !cv || t->busy)
		return;
	cpu = uc_cpu();
	harvests = uc_harvests();
	o = (uint64_t)off;
	t->busy = 1;
	if (__builtin_expect(!t->registered, 0)) {
		if (uc_run_key_ok)
			(void)pthread_setspecific(uc_run_key, t);
		t->registered = 1;
	}
	left = n > 0 ? (uint64_t)n : 0;
	chunk = uc_chunk_of(o, cs);
	for (i = 0; i < UC_MAX_SPLIT; i++, chunk++) {
		uint64_t part = cs - uc_in_chunk(o, cs);

		if (part > left || i == UC_MAX_SPLIT - 1)
			part = left;
		if (t->run_chunks != 1 || t->run_cv != cv || t->run_hi != chunk ||
		    t->run_file != file_id || t->run_cpu != (uint16_t)cpu ||
		    1ull << t->run_shift != cs || t->run_harvest != harvests ||
		    t->run_scale != c->scale) {
			uc_run_flush(0);
			t->run_cv = cv;
			t->run_file = file_id;
			t->run_shift = (uint8_t)__builtin_ctzll(cs);
			t->run_hi = chunk;
			t->run_chunks = 1;
			t->run_harvest = harvests;
			t->run_bytes = t->run_lo_bytes = 0;
			t->run_calls = t->run_runs = 0;
			t->run_lo_runs = t->run_writes = t->run_nt = 0;
			/* what its next calls may skip: only the call that opens it knows (of a
			 * chunk the call begins in, or of any chunk of a file the table does not
			 * name: a file's decision holds for all its chunks), and a claim that keeps
			 * the thread on another vCPU than it runs on keeps nothing */
			t->run_ff = (i == 0 || (!(c->run_ff & UC_FF_NAMED) &&
						 c->run_home == UC_NO_HOME)) &&
					    cpu >= 0 && cpu < (int)UC_NO_HOME &&
					    (c->run_home == UC_NO_HOME || c->run_home == cpu)
				    ? c->run_ff
				    : UC_RUN_SEALED;
			t->run_fresh = c->run_home == UC_NO_HOME ? UC_NO_HOME : c->run_fresh;
			t->run_fd = fd;
			t->run_pend = c->pend;
			t->run_scale = c->scale;
			t->run_cpu = (uint16_t)cpu;
		}
		t->run_calls++;
		if (is_write) {
			t->run_writes++;
			t->run_ff = UC_RUN_SEALED;
		} else {
			t->run_runs += !(i == 0 && cont && uc_in_chunk(o, cs) != 0);
			t->run_bytes += part;
			if (nt) {
				t->run_nt++;
				t->run_ff = UC_RUN_SEALED;
			}
			if (fd >= 0)
				t->run_fd = fd;
		}
		left -= part;
		o += part;
		if (!left)
			break;
	}
	if (t->run_chunks && t->run_calls >= UC_RUN_CALLS)
		uc_run_flush(0);
	t->busy = 0;
}

/* Spend one migration of the chunk's budget for this interval (MFC section 4.5). */
int uc_take_budget(uint64_t file_id, uint64_t chunk, uint32_t budget)
{
	struct uc_ctr_slot *s = uc_slot_at(uc_ctr(), file_id, chunk, 1);
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
