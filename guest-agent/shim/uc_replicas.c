/* SPDX-License-Identifier: MIT */
/*
 * uc_replicas.c - serving reads from the agent's guest-wide replicas (NCC): this process's
 * read-only mappings of replica files (got from the agent, uc_repclient.c), and the checks
 * every serve makes (docs/replicas.md "Coherence"). The files' generations are in uc_shim.h.
 */
#include "uc_shim.h"

enum { UC_RM_EMPTY = 0, UC_RM_MAPPED = 1, UC_RM_REFUSED = 2, UC_RM_PENDING = 3 };

/* an answer not come within this is taken as lost: the replica is asked for again (a busy,
 * niced agent may take seconds; a late answer to an earlier request is still taken) */
#define UC_RM_LOST_NS 10000000000ll

/*
 * One mapping of this process. `lock`: >0 readers serving from it, -1 the one thread
 * replacing it, 0 free. Every lock is a try: a busy slot means the real call, never a wait.
 */
struct uc_rmap {
	_Atomic int lock;
	int state;                 /* UC_RM_* */
	int node;
	uint64_t file_id;
	uint64_t chunk;
	uint64_t cs;
	const unsigned char *map;  /* the replica file, PROT_READ, MAP_SHARED */
	size_t maplen;
	struct uc_rep_hdr hdr;     /* its header, checked when mapped */
	uint64_t ugen;             /* this user's generation of the file when asked for */
	uint64_t req_id;           /* UC_RM_PENDING: the request's id (its low bits: the slot) */
	long long retry_ns;        /* REFUSED, PENDING: ask the agent again from then on */
	long long used_ns;         /* last serve (victim choice) */
};

static struct uc_rmap uc_rmaps[UC_REPLICA_SLOTS];
static _Atomic uint64_t uc_rm_seq;
/* set before the first lock of any mapping is taken: until then the mappings' pages were
 * never written, and a fork child leaves them so (no page of them copied or zero-filled) */
static _Atomic int uc_rm_touched;

/* A child forked while another thread held a slot's lock would never get it back, nor the
 * answers to its parent's requests. */
void uc_rep_atfork_child(void)
{
	int i;

	uc_rc_atfork_child();
	if (!atomic_load(&uc_rm_touched))
		return;
	for (i = 0; i < (int)UC_REPLICA_SLOTS; i++) {
		atomic_store_explicit(&uc_rmaps[i].lock, 0, memory_order_relaxed);
		if (uc_rmaps[i].state == UC_RM_PENDING)
			uc_rmaps[i].state = UC_RM_EMPTY;
	}
}

static inline int uc_rd_try(_Atomic int *l)
{
	int v = atomic_load_explicit(l, memory_order_relaxed);

	while (v >= 0)
		if (atomic_compare_exchange_weak_explicit(l, &v, v + 1, memory_order_acquire,
							  memory_order_relaxed))
			return 1;
	return 0;
}

static inline int uc_wr_try(_Atomic int *l)
{
	int zero = 0;

	return atomic_compare_exchange_strong_explicit(l, &zero, -1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline long long uc_ts_ns(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

/*
 * tests only: a build with -DUC_MUTANT_NO_SERVE_CHECK serves a mapped replica without
 * checking that the file is unchanged since the agent filled it (docs/replicas.md
 * "Coherence" step 1); test_shim_coherence.py checks that its run fails against such a build.
 */
#ifdef UC_MUTANT_NO_SERVE_CHECK
#define UC_MUTANT_SERVE_CHECK(x) ((void)(x), 1)
#else
#define UC_MUTANT_SERVE_CHECK(x) (x)
#endif

/* The source file is still what the agent read (fstat at the serve against the header). */
static inline int uc_same_source(const struct uc_rep_hdr *h, const struct stat *st)
{
	return h->dev == (uint64_t)st->st_dev && h->ino == (uint64_t)st->st_ino &&
	       h->size == (int64_t)st->st_size && h->mtime_sec == (int64_t)st->st_mtim.tv_sec &&
	       h->mtime_nsec == (int64_t)st->st_mtim.tv_nsec &&
	       h->ctime_sec == (int64_t)st->st_ctim.tv_sec &&
	       h->ctime_nsec == (int64_t)st->st_ctim.tv_nsec;
}

/*
 * Copy n bytes from a replica mapping into the vector iov (cnt entries, a trusted copy of
 * the caller's; cnt 0: copy nothing) under the fault guard, after checking that the agent
 * has not dropped the replica (its state word, read under the same guard: a file truncated
 * under the mapping raises SIGBUS here, never in the program). 1 when done.
 */
int uc_rep_copyv(const struct iovec *iov, int cnt, const unsigned char *map,
		 const unsigned char *src, size_t n)
{
	if (!uc_guard_ready())
		return 0;
	if (sigsetjmp(uc_jb, 1) == 0) {
		int ok, i;

		/* volatile: the stores around a builtin memcpy must not be optimised away */
		*(volatile int *)&uc_in_copy = 1;
		__asm__ volatile("" ::: "memory");
		ok = __atomic_load_n(&((const struct uc_rep_hdr *)(const void *)map)->state,
				     __ATOMIC_ACQUIRE) == UC_REP_VALID;
		for (i = 0; ok && i < cnt && n; i++) {
			size_t k = iov[i].iov_len < n ? iov[i].iov_len : n;

			memcpy(iov[i].iov_base, src, k);
			src += k;
			n -= k;
		}
		__asm__ volatile("" ::: "memory");
		*(volatile int *)&uc_in_copy = 0;
		return ok;
	}
	uc_in_copy = 0; /* a truncated replica or a bad caller buffer: the real call decides */
	return 0;
}

static void uc_rm_unmap(struct uc_rmap *r)
{
	if (r->state == UC_RM_MAPPED)
		munmap((void *)(uintptr_t)r->map, r->maplen);
	r->state = UC_RM_EMPTY;
	r->map = NULL;
}

/* Map the replica file rfd for r's key; 1 when its header names exactly that key (r is
 * MAPPED then), else 0 with r unchanged. */
static int uc_rm_map(struct uc_rmap *r, int rfd)
{
	struct uc_rep_hdr h;
	struct stat st;
	struct iovec hv = {&h, sizeof(h)};
	void *p;

	if (uc_real_fstat(rfd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 022) ||
	    st.st_size <= (off_t)UC_REP_DATA_OFF ||
	    (uint64_t)st.st_size > UC_REP_DATA_OFF + r->cs)
		return 0;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, rfd, 0);
	if (p == MAP_FAILED)
		return 0;
	if (!uc_rep_copyv(&hv, 1, p, p, sizeof(h)) || h.magic != UC_REP_MAGIC ||
	    h.layout != UC_REP_LAYOUT || h.file_id != r->file_id || h.chunk != r->chunk ||
	    h.chunk_size != r->cs || h.node != (uint32_t)r->node || h.len == 0 ||
	    h.len > r->cs || h.len != (uint64_t)st.st_size - UC_REP_DATA_OFF || h.size < 0 ||
	    (uint64_t)h.size < r->chunk * r->cs + h.len) {
		munmap(p, (size_t)st.st_size);
		return 0;
	}
	r->hdr = h;
	r->map = p;
	r->maplen = (size_t)st.st_size;
	r->state = UC_RM_MAPPED;
	return 1;
}

/* Can r serve [off, end) of the file whose fstat is st, now? (It is read- or write-locked.) */
static int uc_rm_valid(const struct uc_rmap *r, const struct stat *st, uint64_t end)
{
	return r->state == UC_RM_MAPPED &&
	       UC_MUTANT_SERVE_CHECK(uc_same_source(&r->hdr, st) &&
				     uc_gen_of(r->file_id) == r->ugen) &&
	       end <= r->chunk * r->cs + r->hdr.len;
}

/* The file changed too recently for the agent to fill a replica (uc_rep_fill's margin). */
static int uc_rep_too_fresh(const struct stat *st)
{
	struct timespec now;
	long long margin = uc.rep_margin_ns;

	if (st->st_ctim.tv_nsec == 0) /* a file system with coarse (second) timestamps */
		margin += UC_COARSE_FS_MARGIN_NS;
	clock_gettime(CLOCK_REALTIME, &now);
	return uc_ts_ns(&now) - uc_ts_ns(&st->st_ctim) <= margin;
}

/*
 * Ask the agent for the replica of `chunk` on `node` in the write-locked r, without waiting
 * for the answer (uc_rep_collect installs it). r is then PENDING, or REFUSED until retry_ns
 * when the file changed too recently or the agent cannot be asked now.
 */
static void uc_rm_ask(struct uc_rmap *r, int fd, const struct stat *st, uint64_t file_id,
		      uint64_t chunk, uint64_t cs, int node)
{
	struct uc_rep_req q;
	long long now = uc_now_ns();

	uc_rm_unmap(r);
	r->file_id = file_id;
	r->chunk = chunk;
	r->cs = cs;
	r->node = node;
	r->state = UC_RM_REFUSED;
	r->retry_ns = now + uc.rep_margin_ns;
	if (uc_rep_too_fresh(st)) { /* the agent would say EAGAIN: do not ask */
		UC_STAT(fill_aborts);
		return;
	}
	r->ugen = uc_gen_of(file_id); /* before the agent reads: a write after it moves it */
	q.magic = UC_REQ_MAGIC;
	q.node = (uint32_t)node;
	q.id = (atomic_fetch_add(&uc_rm_seq, 1) + 1) << 8 | (uint64_t)(r - uc_rmaps);
	q.chunk = chunk;
	q.chunk_size = cs;
	if (!uc_rc_send(fd, &q)) {
		r->retry_ns = now + UC_REP_RETRY_NS;
		return;
	}
	r->req_id = q.id;
	r->state = UC_RM_PENDING;
	UC_STAT(replica_asks);
	r->retry_ns = now + UC_RM_LOST_NS;
}

/*
 * Install the answers the agent has sent (waiting at most wait_ms for the first): each
 * names its slot in its id's low bits. A slot still waiting takes a replica even from an
 * answer to an earlier request of its (its header must name the slot's key: uc_rm_map), a
 * refusal only from the answer to its last request; a slot no longer waiting (replaced,
 * busy) lets the answer go.
 */
static void uc_rep_collect(int wait_ms)
{
	struct uc_rep_rsp a;
	int rfd;

	while (uc_rc_recv(&a, &rfd, wait_ms) > 0) {
		struct uc_rmap *r = &uc_rmaps[(a.id & 0xffu) % UC_REPLICA_SLOTS];
		long long now = uc_now_ns();

		wait_ms = 0;
		if (uc_wr_try(&r->lock)) {
			if (r->state == UC_RM_PENDING && a.status == 0 && rfd >= 0 &&
			    uc_rm_map(r, rfd)) {
				UC_STAT(replica_fills);
				r->used_ns = now;
			} else if (r->state == UC_RM_PENDING && r->req_id == a.id) {
				UC_STAT(fill_aborts);
				/* too fresh: after the margin; no room, not replicated: later */
				r->state = UC_RM_REFUSED;
				r->retry_ns = now + (a.status == EAGAIN ? uc.rep_margin_ns
									: UC_REP_RETRY_NS);
			}
			atomic_store_explicit(&r->lock, 0, memory_order_release);
		}
		if (rfd >= 0)
			UC_REAL(close)(rfd);
	}
}

/* The way of set `set` holding a usable mapping of the key, read-locked; NULL if none.
 * *match: the way that holds the key in another state (read-unlocked). */
static struct uc_rmap *uc_rm_find(size_t set, uint64_t file_id, uint64_t chunk, uint64_t cs,
				  int node, const struct stat *st, uint64_t end,
				  struct uc_rmap **match)
{
	size_t w;

	*match = NULL;
	for (w = 0; w < 2; w++) {
		struct uc_rmap *r = &uc_rmaps[set + w];

		if (!uc_rd_try(&r->lock))
			continue;
		if (r->state != UC_RM_EMPTY && r->file_id == file_id && r->chunk == chunk &&
		    r->cs == cs && r->node == node) {
			if (uc_rm_valid(r, st, end))
				return r;
			if (r->state == UC_RM_MAPPED && end <= r->chunk * r->cs + r->hdr.len)
				UC_STAT(replica_rejects); /* the file changed since the fill */
			*match = r;
		}
		atomic_fetch_sub_explicit(&r->lock, 1, memory_order_release);
		if (*match)
			break;
	}
	return NULL;
}

/*
 * Find a replica that can serve n bytes at `off` of fd's file (clipped at its EOF) for this
 * call, checking after the call began: the file's fstat against the header the agent wrote,
 * this user's generation of the file against the one when mapped, the agent's state word.
 * Returns 1 with *s locked (release with uc_rep_put) and s->src, s->len the bytes to hand
 * out; 0 when the caller must make the real call (range past the chunk, at or past EOF, fd
 * not readable, O_DIRECT, a busy slot, no replica). A replica that fails a check is dropped.
 */
int uc_rep_get(int fd, const struct uc_call *c, int64_t off, size_t n, struct uc_rep_span *s)
{
	struct stat st;
	struct uc_rmap *r, *match;
	uint64_t chunk, cs = c->chunk_size, end;
	long long now;
	size_t set;
	int fl, tries;

	if (uc.rep_off || c->rep_node < 0 || n == 0 || n > (size_t)SSIZE_MAX || off < 0 || !cs)
		return 0;
	chunk = (uint64_t)off / cs;
	if (uc_real_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || off >= st.st_size)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & (O_DIRECT | O_PATH)))
		return 0;
	end = (uint64_t)off + n < (uint64_t)st.st_size ? (uint64_t)off + n : (uint64_t)st.st_size;
	if (end > (chunk + 1) * cs)
		return 0; /* spans chunks: the real call */
	s->len = (size_t)(end - (uint64_t)off);
	if (!atomic_load_explicit(&uc_rm_touched, memory_order_relaxed))
		atomic_store(&uc_rm_touched, 1); /* before any lock (uc_rep_atfork_child) */
	/* two ways per set: two hot chunks that hash alike do not evict each other */
	set = (size_t)(uc_mix64(uc_bucket_hash(c->file_id, chunk) + (uint64_t)c->rep_node) %
		       (UC_REPLICA_SLOTS / 2)) * 2;
	for (tries = 0; tries < 2; tries++) {
		r = uc_rm_find(set, c->file_id, chunk, cs, c->rep_node, &st, end, &match);
		if (r)
			goto serve;
		if (tries == 0 && match && match->state == UC_RM_PENDING)
			uc_rep_collect(0); /* its answer may be in: look again */
		else
			break;
	}
	now = uc_now_ns();
	if (match && match->state != UC_RM_MAPPED && now < match->retry_ns) {
		if (match->state == UC_RM_PENDING) /* the agent has not answered yet */
			UC_STAT(replica_waits);
		return 0; /* asked, or refused, recently */
	}
	if (!match) { /* the way to replace: an empty one, else the one served longest ago */
		match = &uc_rmaps[set];
		if (match->state != UC_RM_EMPTY &&
		    (uc_rmaps[set + 1].state == UC_RM_EMPTY ||
		     uc_rmaps[set + 1].used_ns < match->used_ns))
			match = &uc_rmaps[set + 1];
	}
	if (!uc_wr_try(&match->lock))
		return 0;
	uc_rm_ask(match, fd, &st, c->file_id, chunk, cs, c->rep_node);
	atomic_store_explicit(&match->lock, 0, memory_order_release);
	if (match->state != UC_RM_PENDING)
		return 0;
	uc_rep_collect((int)(uc.rep_wait_ns / 1000000ll)); /* a quick agent serves this call */
	r = uc_rm_find(set, c->file_id, chunk, cs, c->rep_node, &st, end, &match);
	if (!r) {
		if (match && match->state == UC_RM_PENDING)
			UC_STAT(replica_waits); /* no answer within the wait */
		return 0;
	}
serve:
	s->slot = r;
	s->map = r->map;
	s->src = r->map + UC_REP_DATA_OFF + ((uint64_t)off - chunk * cs);
	r->used_ns = uc_now_ns();
	return 1; /* read-locked */
}

/* Release a span from uc_rep_get; `bad`: its copy faulted or found it dropped, so unmap it. */
void uc_rep_put(struct uc_rep_span *s, int bad)
{
	struct uc_rmap *r = s->slot;

	atomic_fetch_sub_explicit(&r->lock, 1, memory_order_release);
	if (bad && uc_wr_try(&r->lock)) { /* dropped by the agent: let its memory go */
		if (r->state == UC_RM_MAPPED && r->map == s->map) /* not refilled meanwhile */
			uc_rm_unmap(r);
		atomic_store_explicit(&r->lock, 0, memory_order_release);
	}
}
