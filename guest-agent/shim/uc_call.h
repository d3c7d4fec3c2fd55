/* SPDX-License-Identifier: MIT */
/*
 * uc_call.h - the mechanisms a named file's read may meet (migration, the fault guard, the
 * non-temporal path, colors, replicas and file generations) and the per-call logic that
 * runs them (uc_call.c). Included by uc_shim.h only, after uc_fd.h.
 */
#ifndef UC_CALL_H
#define UC_CALL_H

#pragma GCC visibility push(hidden)

/* --- migration (uc_migrate.c) --------------------------------------------------------- */

void uc_tid_atfork_child(void);
void uc_tid_set(pid_t pid);
uint64_t uc_span(struct uc_fd *e, uint64_t file_id, uint64_t off, size_t n,
		 const struct uc_hit *h);
/* the claim a read left the thread holding (uc_maybe_migrate): its vCPU (-1: none) and
 * until when (coarse ms) it needs no renewal */
struct uc_stay {
	int vcpu;
	uint64_t fresh_ms;
};

struct uc_stay uc_maybe_migrate(uint64_t file_id, uint64_t off, uint64_t n,
				const struct uc_hit *h);
void uc_unpin(void);

/* --- fault guard (uc_guard.c) --------------------------------------------------------- */

/* set around a copy from a mapping: a fault in it jumps to uc_jb */
extern UC_TLS int uc_in_copy;
extern UC_TLS sigjmp_buf uc_jb;

int uc_guard_ready(void);
int uc_guarded_load(const void *p, void *out, size_t n);

/* --- non-temporal path (uc_ntpath.c) -------------------------------------------------- */

int uc_nt_pread(int fd, void *buf, size_t n, int64_t off, uint64_t file_id, ssize_t *ret);

/* --- colors (uc_colors.c) ------------------------------------------------------------- */

struct uc_policy {
	int mode;
	unsigned long mask[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	int set;
};

int uc_color_enter(int node, struct uc_policy *old);
void uc_color_leave(const struct uc_policy *old);

/* --- replicas and file generations (uc_replicas.c, uc_repclient.c) ------------------- */

struct uc_rmap;

/* Bytes a replica can hand out for one call: held (locked) until uc_rep_put. */
struct uc_rep_span {
	struct uc_rmap *slot;
	const unsigned char *map;  /* the replica file's mapping (its header first) */
	const unsigned char *src;  /* the first byte the call asked for */
	size_t len;                /* bytes from src: the call's answer */
};

struct uc_call;

void uc_rep_atfork_child(void);
void uc_rc_atfork_child(void);
int uc_rc_send(int fd, const struct uc_rep_req *q);
int uc_rc_recv(struct uc_rep_rsp *a, int *rfd, int wait_ms);
int uc_rep_copyv(const struct iovec *iov, int cnt, const unsigned char *map,
		 const unsigned char *src, size_t n);
int uc_rep_get(int fd, const struct uc_call *c, int64_t off, size_t n, struct uc_rep_span *s);
void uc_rep_put(struct uc_rep_span *s, int bad);
/* serving each kind of call (uc_repserve.c); 1 and *ret when served, 0: the real call */
int uc_rep_at(int fd, const struct iovec *iov, int cnt, size_t n, int64_t off,
	      const struct uc_call *c, ssize_t *ret);
int uc_rep_at_pos(int fd, const struct iovec *iov, int cnt, size_t n, struct uc_call *c,
		  ssize_t *ret);
int uc_rep_sendfile(int out, int in, void *offp, int is64, size_t count, struct uc_call *c,
		    ssize_t *ret);

/* One more of a statistic in the generations header (uc_gen_hdr); none without counters. */
static inline void uc_stat_add(size_t field_off)
{
	struct uc_gen_hdr *g = __atomic_load_n(&uc.gens, __ATOMIC_ACQUIRE);

	if (g)
		__atomic_fetch_add((uint64_t *)(void *)((unsigned char *)g + field_off), 1,
				   __ATOMIC_RELAXED);
}
#define UC_STAT(field) uc_stat_add(offsetof(struct uc_gen_hdr, field))

/* The shared generation of a file id (0 without counters). */
static inline uint64_t *uc_gen_slot(uint64_t file_id)
{
	struct uc_gen_hdr *g = __atomic_load_n(&uc.gens, __ATOMIC_ACQUIRE);

	if (!g)
		return NULL;
	return (uint64_t *)(void *)(g + 1) + (uc_gen_hash(file_id) & (uc.ngens - 1u));
}

static inline uint64_t uc_gen_of(uint64_t file_id)
{
	uint64_t *p = uc_gen_slot(file_id);

	return p ? __atomic_load_n(p, __ATOMIC_ACQUIRE) : 0;
}

/* A write the shim sees: every replica of the file (in every process) is stale now. */
static inline void uc_gen_bump(uint64_t file_id)
{
	uint64_t *p = uc_gen_slot(file_id);

	if (p) {
		__atomic_fetch_add(p, 1, __ATOMIC_ACQ_REL);
		UC_STAT(gen_bumps);
	}
}

/* --- the per-call logic (uc_call.c) --------------------------------------------------- */

struct uc_call {
	uint64_t file_id;
	int64_t off;        /* offset the call reads at; -1 unknown */
	uint64_t chunk_size;
	int nt;             /* chunk is non-caching */
	int color;          /* guest node for the page cache this call brings in; -1 none */
	int rep_node;       /* serve from the replica on this node; -1 none */
	uint32_t fflags;    /* the file's UC_FF_* for this call's table generation */
	/* what the next calls in this chunk may skip (uc_in_run), when uc_count opens a run
	 * for this call: the file decision they may have (UC_RUN_SEALED: none), and for a
	 * placed chunk the vCPU whose claim keeps the thread there and until when */
	uint8_t run_ff;
	uint8_t pend;       /* the descriptor's file is not known yet: file_id is a stand-in */
	uint8_t scale;      /* log2 its counts are multiplied by (a sampled open's) */
	uint16_t run_home, run_fresh;
};

/* where this thread's last read of a file ended: uc_read_span's prev_end (sequential reads) */

/* uc_pre's `off` besides an offset: the file position, or known only after the call */
#define UC_OFF_POS (-1)
#define UC_OFF_LATER (-2)

void uc_pre_named(struct uc_fd *e, uint64_t gen, size_t n, struct uc_call *c);

/*
 * Everything before the real call on the classified file e. Returns 0 when the call passes
 * straight through (no table): then nothing is counted either. `off` is the offset,
 * UC_OFF_POS for the file position (read, readv, preadv2 with -1), or UC_OFF_LATER when the
 * caller learns it after the call. For a file the table does not name, this is a handful
 * of loads: no lookup, no system call, no atomic, errno untouched. For one it names, or a
 * thread the shim pinned, the chunk's entry decides (uc_pre_named, uc_call.c), keeping
 * errno across whatever system calls the mechanisms make.
 */
static inline int uc_pre(struct uc_fd *e, int64_t off, size_t n, struct uc_call *c)
{
	uint64_t gen = uc_table_gen();

	if (!gen)
		return 0;
#ifdef UC_MUTANT_FSTAT_ON_READ
	{ /* tests only (test_shim_seccomp.py): a read path that makes a system call */
		struct stat st;

		(void)fstat((int)(e - uc_fds), &st);
	}
#endif
	c->file_id = uc_fd_id(e);
	c->off = off >= 0	    ? off
		 : off == UC_OFF_POS ? atomic_load_explicit(&e->pos, memory_order_relaxed)
				     : -1;
	c->chunk_size = uc_t.tp.chunk_size;
	c->nt = 0;
	c->color = -1;
	c->rep_node = -1;
	c->fflags = uc_fd_flags(e, gen);
	c->run_ff = (uint8_t)c->fflags;
	c->scale = uc_ff_scale(c->fflags);
	c->pend = atomic_load_explicit(&e->state, memory_order_relaxed) == UC_FD_OPENED;
	c->run_home = c->run_fresh = UC_NO_HOME;
	if (__builtin_expect(!(c->fflags & UC_FF_NAMED) && !uc_t.pinned, 1) || c->off < 0 ||
	    c->pend)
		return 1;
	c->run_ff = UC_RUN_SEALED; /* unless the named path finds the chunk plain */
	uc_pre_named(e, gen, n, c);
	return 1;
}

/*
 * The run's own calls: a read of n bytes at `off` of the file e that stays inside this
 * thread's open run (in its current chunk, or a sequential reader entering the next one at
 * its start), under the same table generation and file decision that opened it, where the
 * rule has nothing to say or keeps the thread where it is (a claim it holds with half a
 * lease left). Such a call is counted into the run (uc_run_add) and reads nothing shared
 * but the table header's generation: no lookup, no counters, no clock but a placed
 * chunk's. New counters are seen when the run ends, at most UC_RUN_CALLS calls later or at
 * its first call after the agent's next harvest, on the path that opens the next one
 * (uc_pre, uc_count).
 */
/* Is a claim still fresh (coarse ms, low 16 bits, serial-number compared)? */
static inline __attribute__((always_inline)) int uc_fresh(uint16_t until_ms)
{
	struct timespec ts;
	uint16_t now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (uint16_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
	return (int16_t)(uint16_t)(until_ms - now) > 0;
}

static inline __attribute__((always_inline)) int uc_in_run(struct uc_fd *e, uint64_t off,
							    size_t n)
{
	const struct uc_thread *t = uc_me();
	const struct uc_table_hdr *th = __atomic_load_n(&uc.thdr, __ATOMIC_RELAXED);
	uint64_t cs = 1ull << t->run_shift, chunk = off >> t->run_shift;

	/* the table's generation and harvests share its header's line: a run the agent has
	 * harvested since it opened goes out now, so no count waits past one harvest */
	if (!t->run_chunks || t->run_file != atomic_load_explicit(&e->file_id, memory_order_relaxed) ||
	    atomic_load_explicit(&e->decision, memory_order_relaxed) != (t->gen << 8 | t->run_ff) ||
	    t->busy || t->run_calls + 1 >= UC_RUN_CALLS || uc_gen_of_table(th) != t->gen ||
	    (uint16_t)__atomic_load_n(&th->harvests, __ATOMIC_RELAXED) != t->run_harvest)
		return 0;
	/* still on the run's vCPU; in a placed chunk, the rule keeps the thread there while it
	 * holds its claim with half a lease left (uc_decide.h: STAY, no renewal); otherwise a
	 * pinned thread goes through the rule, an unpinned one has nothing to ask it */
	if (uc_cpu() != t->run_cpu ||
	    (t->run_fresh == UC_NO_HOME ? t->pinned : !uc_fresh(t->run_fresh)))
		return 0;
	if (chunk == t->run_hi)
		return uc_in_chunk(off, cs) + n <= cs;
	/* the next chunk, entered at its start by the same sequential stream; the chunk it
	 * leaves was read whole in one run, or is the run's first */
	return chunk == t->run_hi + 1 && uc_in_chunk(off, cs) == 0 && n <= cs &&
	       off == t->seq_end && t->seq_file == t->run_file && t->run_chunks < UC_RUN_CHUNKS &&
	       (t->run_chunks == 1 || (t->run_bytes == cs && t->run_runs == 1));
}

/*
 * A read of n bytes at `off` that continues this thread's run of a file the table does not
 * name inside the run's chunk: at the end of the thread's last read, not at the chunk's
 * start, under the decision the run opened with. It reads nothing but this thread's line
 * and the descriptor's: no table header, no CPU number. So it is counted on the vCPU the
 * run began on, and a new table or a harvest is seen at the run's next chunk or start,
 * within UC_RUN_CALLS calls (uc_in_run sees them for every other call of the run).
 */
static inline __attribute__((always_inline)) int uc_continues(struct uc_fd *e, uint64_t off,
							      size_t n)
{
	const struct uc_thread *t = uc_me();
	uint64_t in = uc_in_chunk(off, 1ull << t->run_shift);

	return t->run_chunks && !t->run_ff && off == t->seq_end && in != 0 &&
	       in + n <= 1ull << t->run_shift && off >> t->run_shift == t->run_hi &&
	       t->seq_file == t->run_file && !t->busy && !t->pinned &&
	       t->run_calls + 1 < UC_RUN_CALLS &&
	       atomic_load_explicit(&e->file_id, memory_order_relaxed) == t->run_file &&
	       atomic_load_explicit(&e->decision, memory_order_relaxed) == t->gen << 8;
}

/* After a call uc_continues let through: its r bytes (r >= 0) go to the run's chunk. */
static inline __attribute__((always_inline)) void uc_run_continue(uint64_t off, ssize_t r)
{
	struct uc_thread *t = uc_me();

	t->run_calls++;
	if (r > 0) {
		t->run_bytes += (uint64_t)r;
		t->seq_end = off + (uint64_t)r;
	}
}

/* After a call uc_in_run let through: its r bytes (r >= 0) at `off` go to the run. A read
 * starts a run unless it continues this thread's previous one inside the chunk. */
static inline __attribute__((always_inline)) void uc_run_add(uint64_t off, ssize_t r)
{
	struct uc_thread *t = uc_me();
	uint64_t chunk = off >> t->run_shift;

	t->run_calls++;
	if (chunk != t->run_hi) {
		if (t->run_chunks == 1) {
			t->run_lo_bytes = t->run_bytes;
			t->run_lo_runs = t->run_runs;
		}
		t->run_hi = chunk;
		t->run_chunks++;
		t->run_bytes = 0;
		t->run_runs = 0;
	}
	t->run_runs += !(t->run_file == t->seq_file && off == t->seq_end &&
			 uc_in_chunk(off, 1ull << t->run_shift) != 0);
	t->run_bytes += (uint64_t)r;
	if (r > 0) {
		t->seq_file = t->run_file;
		t->seq_end = off + (uint64_t)r;
	}
}

/* Everything after the real call; never touches errno (a send of counts that makes a
 * system call keeps it: uc_counters.c). `cur` = call used the file offset. */
static inline void uc_post(int fd, const struct uc_call *c, ssize_t r, int cur, int is_write,
			   int nt)
{
	if (c->off < 0)
		return;
	if (cur && r > 0)
		uc_fd_advance(fd, c->off + r);
	if (c->chunk_size && r >= 0)
		uc_count(is_write ? -1 : fd, c, r, is_write, nt,
			 c->file_id == uc_t.seq_file && (uint64_t)c->off == uc_t.seq_end);
	if (!is_write && r > 0) {
		uc_t.seq_file = c->file_id;
		uc_t.seq_end = (uint64_t)c->off + (uint64_t)r;
	}
}

#pragma GCC visibility pop

#endif /* UC_CALL_H */
