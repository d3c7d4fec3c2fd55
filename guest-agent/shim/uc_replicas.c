/* SPDX-License-Identifier: MIT */
/*
 * uc_replicas.c - replicas: node-local copies of chunks (NCC), filled and served under
 * the coherence checks of docs/replicas.md; the files' generations are in uc_shim.h.
 */
#include "uc_shim.h"

/*
 * One replica buffer of this process. `lock`: >0 readers serving from it, -1 the one thread
 * filling it, 0 free. Every lock is a try: a busy replica means the real call, never a wait.
 */
struct uc_replica {
	_Atomic int lock;
	int valid;
	int node;
	uint64_t file_id;
	uint64_t chunk;
	uint64_t cs;         /* chunk size of the table it was filled under */
	uint64_t gen;        /* file generation the fill started under */
	unsigned char *buf;  /* mmap'd, mbind'ed to `node` */
	size_t cap;
	size_t len;          /* bytes of the chunk held (short at EOF) */
	dev_t dev;           /* fstat snapshot of the file at the fill */
	ino_t ino;
	off_t size;
	struct timespec mtim;
	struct timespec ctim;
	long long filled_ns; /* when it was filled (victim choice) */
};

static struct uc_replica uc_reps[UC_REPLICA_SLOTS];

/* A child forked while another thread held a replica lock would never get it back. */
void uc_rep_atfork_child(void)
{
	int i;

	for (i = 0; i < (int)UC_REPLICA_SLOTS; i++) {
		if (atomic_load_explicit(&uc_reps[i].lock, memory_order_relaxed) < 0)
			uc_reps[i].valid = 0; /* a fill was under way: its buffer is partial */
		atomic_store_explicit(&uc_reps[i].lock, 0, memory_order_relaxed);
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

static inline void uc_rd_done(_Atomic int *l)
{
	atomic_fetch_sub_explicit(l, 1, memory_order_release);
}

static inline int uc_wr_try(_Atomic int *l)
{
	int zero = 0;

	return atomic_compare_exchange_strong_explicit(l, &zero, -1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void uc_wr_done(_Atomic int *l)
{
	atomic_store_explicit(l, 0, memory_order_release);
}

static inline int uc_ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* The file is still what the replica was filled from (no change since the fill's fstat). */
static inline int uc_same_file(const struct uc_replica *r, const struct stat *st)
{
	return r->dev == st->st_dev && r->ino == st->st_ino && r->size == st->st_size &&
	       uc_ts_eq(&r->ctim, &st->st_ctim) && uc_ts_eq(&r->mtim, &st->st_mtim);
}

static inline long long uc_ts_ns(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

static size_t uc_rep_nslots(uint64_t cs)
{
	size_t n = cs ? uc.rep_bytes / cs : 0;

	return n > UC_REPLICA_SLOTS ? UC_REPLICA_SLOTS : n;
}

/*
 * tests only: a build with -DUC_MUTANT_NO_SERVE_CHECK serves a filled replica without
 * checking that the file is unchanged since the fill (docs/replicas.md "Coherence" step 1);
 * test_shim_coherence.py checks that its run fails against such a build.
 */
#ifdef UC_MUTANT_NO_SERVE_CHECK
#define UC_MUTANT_SERVE_CHECK(x) ((void)(x), 1)
#else
#define UC_MUTANT_SERVE_CHECK(x) (x)
#endif

/* The file changed too recently for a fill to be safe (see uc_rep_fill step 3). */
static int uc_rep_too_fresh(const struct stat *st)
{
	struct timespec now;
	long long margin = uc.rep_margin_ns;

	if (st->st_ctim.tv_nsec == 0) /* a file system with coarse (second) timestamps */
		margin += UC_COARSE_FS_MARGIN_NS;
	clock_gettime(CLOCK_REALTIME, &now);
	return uc_ts_ns(&now) - uc_ts_ns(&st->st_ctim) <= margin;
}

/* A buffer of cap bytes whose pages come from `node` only (mbind MPOL_BIND). */
static int uc_rep_buffer(struct uc_replica *r, int node, size_t cap)
{
	unsigned long mask[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	void *p;

	if (r->buf && r->cap == cap && r->node == node)
		return 1;
	if (r->buf)
		munmap(r->buf, r->cap);
	r->buf = NULL;
	r->cap = 0;
	p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	memset(mask, 0, sizeof(mask));
	mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
	if (syscall(SYS_mbind, p, cap, UC_MPOL_BIND, mask, (unsigned long)UC_POLICY_BITS,
		    (unsigned long)(UC_MPOL_MF_STRICT | UC_MPOL_MF_MOVE)) != 0) {
		munmap(p, cap);
		return 0;
	}
	r->buf = p;
	r->cap = cap;
	r->node = node;
	return 1;
}

/*
 * Fill replica r (write-locked by the caller) with chunk `chunk` of fd's file. Coherence
 * (docs/replicas.md "Coherence"), in this order:
 *   1. g0 = the file's generation, t0 = the real-time clock;
 *   2. on a descriptor of our own: lseek(SEEK_DATA) takes the inode lock shared (ext4,
 *      tmpfs), so a buffered write in flight (it holds the lock exclusively from its
 *      ctime update to the end of its copy) has finished before we go on;
 *   3. fstat: the file's ctime must be older than t0 - margin (margin > the kernel's
 *      timestamp granularity), so any write after this point sets another ctime;
 *   4. read the chunk; fstat again and the generation again: both unchanged, or no fill.
 */
static int uc_rep_fill(struct uc_replica *r, int fd, uint64_t file_id, uint64_t chunk,
		       uint64_t cs, int node)
{
	struct stat s1, s2;
	struct timespec t0;
	char path[64];
	uint64_t g0, start = chunk * cs;
	size_t len, got = 0;
	long long margin = uc.rep_margin_ns;
	int fd2, ok = 0;

	r->valid = 0;
	g0 = uc_gen_of(file_id);
	clock_gettime(CLOCK_REALTIME, &t0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd2 = UC_REAL(open)(path, O_RDONLY | O_CLOEXEC);
	if (fd2 < 0)
		return 0;
	(void)UC_REAL(lseek)(fd2, 0, SEEK_DATA);
	if (fstat(fd2, &s1) < 0 || !S_ISREG(s1.st_mode) ||
	    uc_file_id_of(uc.salt, (uint64_t)s1.st_dev, (uint64_t)s1.st_ino) != file_id ||
	    s1.st_size <= (off_t)start)
		goto out;
	if (s1.st_ctim.tv_nsec == 0) /* a file system with coarse (second) timestamps */
		margin += UC_COARSE_FS_MARGIN_NS;
	/* t0 was read before the barrier and this fstat: the margin counts from then */
	if (uc_ts_ns(&t0) - uc_ts_ns(&s1.st_ctim) <= margin)
		goto abort;
	len = (uint64_t)s1.st_size - start < cs ? (size_t)((uint64_t)s1.st_size - start)
						 : (size_t)cs;
	if (!uc_rep_buffer(r, node, (size_t)cs))
		goto out;
	while (got < len) {
		ssize_t k = UC_REAL(pread64)(fd2, r->buf + got, len - got, (off64_t)(start + got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			goto abort;
		got += (size_t)k;
	}
	if (fstat(fd2, &s2) < 0 || s2.st_size != s1.st_size ||
	    !uc_ts_eq(&s2.st_ctim, &s1.st_ctim) || !uc_ts_eq(&s2.st_mtim, &s1.st_mtim) ||
	    uc_gen_of(file_id) != g0)
		goto abort;
	r->file_id = file_id;
	r->chunk = chunk;
	r->cs = cs;
	r->gen = g0;
	r->len = len;
	r->dev = s1.st_dev;
	r->ino = s1.st_ino;
	r->size = s1.st_size;
	r->mtim = s1.st_mtim;
	r->ctim = s1.st_ctim;
	r->filled_ns = uc_ts_ns(&t0);
	r->valid = 1;
	ok = 1;
	UC_STAT(replica_fills);
	goto out;
abort:
	UC_STAT(fill_aborts);
out:
	UC_REAL(close)(fd2);
	return ok;
}

/* Copy from a replica into the caller's buffer under the fault guard; 1 when done. */
static int uc_rep_copy(void *dst, const unsigned char *src, size_t n)
{
	if (!uc_guard_ready())
		return 0;
	if (sigsetjmp(uc_jb, 1) == 0) {
		/* volatile: the stores around a builtin memcpy must not be optimised away */
		*(volatile int *)&uc_in_copy = 1;
		__asm__ volatile("" ::: "memory");
		memcpy(dst, src, n);
		__asm__ volatile("" ::: "memory");
		*(volatile int *)&uc_in_copy = 0;
		return 1;
	}
	uc_in_copy = 0; /* a bad caller buffer: the real call says EFAULT */
	return 0;
}

/*
 * Serve pread(fd, buf, n, off) from this process's replica of the chunk on `node`, filling
 * it first when needed. Every serve checks, after the caller's call began: the file's
 * generation and its fstat (size, ctime, mtime, inode) against the fill's snapshot. Returns
 * 1 and *ret when served; 0 when the caller must make the real call (range past the
 * chunk, at or past EOF, not readable, O_DIRECT, a busy or unfillable replica).
 */
int uc_rep_pread(int fd, void *buf, size_t n, int64_t off, uint64_t file_id, uint64_t cs,
		 int node, ssize_t *ret)
{
	struct uc_replica *r;
	struct stat st;
	uint64_t chunk, start, end;
	struct uc_replica *hit = NULL;
	size_t nslots = uc_rep_nslots(cs), len, set, ways, w;
	int fl, served = 0, saved = errno;

	if (uc.rep_off || n == 0 || n > (size_t)SSIZE_MAX || off < 0 || !nslots)
		return 0;
	chunk = (uint64_t)off / cs;
	start = chunk * cs;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || off >= st.st_size)
		goto out;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & (O_DIRECT | O_PATH)))
		goto out;
	end = (uint64_t)off + n < (uint64_t)st.st_size ? (uint64_t)off + n : (uint64_t)st.st_size;
	if (end > start + cs)
		goto out; /* spans chunks: the real call */
	len = (size_t)(end - (uint64_t)off);
	/* two ways per set: two hot chunks that hash alike do not evict each other */
	ways = nslots >= 2 ? 2 : 1;
	set = (size_t)(uc_mix64(uc_bucket_hash(file_id, chunk) + (uint64_t)node) %
		       (nslots / ways)) * ways;
	for (w = 0; w < ways; w++) {
		r = &uc_reps[set + w];
		if (!uc_rd_try(&r->lock))
			continue;
		if (r->valid && r->file_id == file_id && r->chunk == chunk && r->cs == cs &&
		    r->node == node) {
			if (UC_MUTANT_SERVE_CHECK(uc_same_file(r, &st) && uc_gen_of(file_id) == r->gen) &&
			    end - start <= r->len) {
				served = uc_rep_copy(buf, r->buf + (off - (int64_t)start), len);
				if (served)
					UC_STAT(replica_serves);
				uc_rd_done(&r->lock);
				goto out;
			}
			UC_STAT(replica_rejects);
			hit = r;
		}
		uc_rd_done(&r->lock);
		if (hit)
			break;
	}
	if (!hit) { /* the way to fill: an empty one, else the one filled longest ago */
		hit = &uc_reps[set];
		if (ways == 2 && hit->valid &&
		    (!uc_reps[set + 1].valid || uc_reps[set + 1].filled_ns < hit->filled_ns))
			hit = &uc_reps[set + 1];
	}
	r = hit;
	if (!uc_wr_try(&r->lock))
		goto out;
	if (r->file_id == file_id && r->chunk == chunk && r->cs == cs && r->node == node)
		r->valid = 0; /* not servable (checked above): dropped now, not rejected again */
	if (uc_rep_too_fresh(&st)) {
		UC_STAT(fill_aborts); /* cheaply: no descriptor opened while the file is written */
		uc_wr_done(&r->lock);
		goto out;
	}
	/* fill, then serve under the same lock with the same checks */
	if (uc_rep_fill(r, fd, file_id, chunk, cs, node) && fstat(fd, &st) == 0 &&
	    uc_same_file(r, &st) && uc_gen_of(file_id) == r->gen && end - start <= r->len) {
		served = uc_rep_copy(buf, r->buf + (off - (int64_t)start), len);
		if (served)
			UC_STAT(replica_serves);
	}
	uc_wr_done(&r->lock);
out:
	errno = saved;
	if (served)
		*ret = (ssize_t)len;
	return served;
}
