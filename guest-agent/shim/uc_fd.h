/* SPDX-License-Identifier: MIT */
/*
 * uc_fd.h - the shim's counts and descriptors: this thread's run of counts, the shared
 * per-chunk counters (uc_counters.c, uc_pending.c) and what the shim knows of each
 * descriptor (uc_fdcache.c). Included by uc_shim.h only, after the state and the table.
 */
#ifndef UC_FD_H
#define UC_FD_H

#pragma GCC visibility push(hidden)

/* --- counters (uc_counters.c) --------------------------------------------------------- */

/* The counters view, loaded once per call so a remap never mixes two layouts. */
static inline const struct uc_ctr_view *uc_ctr(void)
{
	return __atomic_load_n(&uc.ctr, __ATOMIC_ACQUIRE);
}

struct uc_ctr_slot *uc_slot_at(const struct uc_ctr_view *cv, uint64_t file_id,
			       uint64_t chunk, int insert);

/* The CPU this thread runs on: a load from its rseq area, where the kernel keeps it (glibc
 * 2.35 and later registers one: uc_state.c finds it), else sched_getcpu. */
static inline int uc_cpu(void)
{
	if (uc.rseq_cpu) {
		int32_t cpu = __atomic_load_n((const int32_t *)(const void *)(
						      (const char *)__builtin_thread_pointer() +
						      uc.rseq_cpu),
					      __ATOMIC_RELAXED);

		if (cpu >= 0)
			return cpu;
	}
	return sched_getcpu();
}

/* Count one completed call of `n` bytes at `off` (off < 0: unknown) into this thread's run,
 * the general way (uc_counters.c; a read inside the run takes uc_in_run and uc_run_add). */
struct uc_call;
void uc_count(int fd, const struct uc_call *c, ssize_t n, int is_write, int nt, int cont);
void uc_run_init(void);
void uc_run_flush(int may_identify);
void uc_run_send(const struct uc_run *r);
void uc_run_close(int fd);
void uc_run_atfork_child(void);
void uc_count_drop(void);

/* counts waiting for their descriptor's file (uc_pending.c) */
void uc_run_unknown(struct uc_run *r, int may_identify);
void uc_pend_known(int fd, uint64_t opened_id, uint64_t file_id);
void uc_pend_close(int fd);
void uc_pend_fini(void);
void uc_pend_atfork_child(void);
int uc_take_budget(uint64_t file_id, uint64_t chunk, uint32_t budget);

/* --- descriptors (uc_fdcache.c) ------------------------------------------------------- */

/*
 * One descriptor, one cache line: what a call on it needs, without a system call. Filled
 * when the shim sees the descriptor made (open*, fopen*, dup*, fds 0-2 at start); any other
 * descriptor is UNKNOWN and passes straight through. An open* makes it OPENED, with no
 * system call: its reads count under a stand-in id (opened_id) until its file is known,
 * from the program's own fstat (uc_interpose_stat.c) or the shim's at close
 * (uc_pending.c); then it is a FILE. fds 0-2 are UNKNOWN at start, like any descriptor
 * the shim did not see made, and pass until the program's fstat says what they are.
 */
struct uc_fd {
	_Atomic uint32_t state;   /* UC_FD_* */
	_Atomic uint32_t sample;  /* UC_FD_READ_ONLY, and the log2 its counts are scaled by
				   * (uc_fd_known: the table's open sample drew it) */
	_Atomic uint64_t file_id; /* FILE: 0 until computed (no salt yet); OPENED: opened_id */
	_Atomic int64_t pos;      /* predicted file offset for read/readv */
	_Atomic uint64_t dev, ino;
	_Atomic int64_t size;     /* st_size when known (-1 not): a sequential span's estimate */
	_Atomic uint64_t decision; /* (table gen << 8) | UC_FF_*: the file's entry, per gen */
	_Atomic uint64_t opened_id; /* the stand-in id its counts had before its file was known */
} __attribute__((aligned(64)));

/* FILE and OPENED are odd: uc_fd_file's one test takes both */
enum { UC_FD_UNKNOWN = 0, UC_FD_FILE = 1, UC_FD_PASS = 2, UC_FD_OPENED = 3 };

/* a file's decision: the table names it (a file entry), and the union of its chunks' */
#define UC_FF_NAMED 1u
#define UC_FF_HOMES 2u
#define UC_FF_COLOR 4u
#define UC_FF_REPLICA 8u
/* and above them the descriptor's count scale (uc_fd.sample's low bits): a run opened on
 * one scale is never joined by a call of another (uc_in_run compares the whole byte) */
#define UC_FF_SCALE_SHIFT 4u
#define UC_FF_SCALE_MASK 0xfu

/* uc_fd.sample: opened read-only (O_RDONLY), so its open may be sampled; the low bits
 * are the scale */
#define UC_FD_READ_ONLY 0x100u

/* log2 of what a call's counts are multiplied by, from its file decision's flags */
static inline uint8_t uc_ff_scale(uint32_t ff)
{
	return (uint8_t)(ff >> UC_FF_SCALE_SHIFT & UC_FF_SCALE_MASK);
}

extern struct uc_fd uc_fds[UC_FD_CACHE];

void uc_fd_opened(int fd, int flags);
int uc_fd_left_out(int fd, const struct stat *st);
void uc_fd_known(int fd, const struct stat *st);
int uc_fd_identify(int fd);
void uc_fd_copy(int from, int to);
uint32_t uc_fd_decide(struct uc_fd *e, uint64_t gen);
void uc_fd_forget_ids(void);
void uc_fd_reseed(void);

/* The descriptor's entry when it is a regular file, or one opened whose file is not known
 * yet (OPENED: counted under its stand-in id), else NULL (pass through).
 * While the shim is off no descriptor is ever classified (uc_interpose_fd.c), so this one
 * load also says whether it is on. */
static inline struct uc_fd *uc_fd_file(int fd)
{
	struct uc_fd *e;

	if (__builtin_expect((unsigned)fd >= UC_FD_CACHE, 0))
		return NULL;
	e = &uc_fds[fd];
	return atomic_load_explicit(&e->state, memory_order_acquire) & 1u ? e : NULL;
}

/* Would a stat of fd tell the shim its file? An OPENED descriptor's, and fds 0-2 while
 * UNKNOWN (a shell's `< file`: the shim did not see them made). */
static inline int uc_fd_unknown_file(int fd)
{
	uint32_t st;

	if ((unsigned)fd >= UC_FD_CACHE)
		return 0;
	st = atomic_load_explicit(&uc_fds[fd].state, memory_order_relaxed);
	return st == UC_FD_OPENED || (st == UC_FD_UNKNOWN && fd < 3);
}

/* The file's id under the table's salt (computed once the salt is known). */
static inline uint64_t uc_fd_id(struct uc_fd *e)
{
	uint64_t id = atomic_load_explicit(&e->file_id, memory_order_relaxed);

	if (__builtin_expect(id == 0, 0)) {
		id = uc_file_id_of(atomic_load_explicit(&uc.salt, memory_order_relaxed),
				   atomic_load_explicit(&e->dev, memory_order_relaxed),
				   atomic_load_explicit(&e->ino, memory_order_relaxed));
		atomic_store_explicit(&e->file_id, id, memory_order_relaxed);
	}
	return id;
}

/* The file's UC_FF_* flags for table generation gen (decided once per gen and fd). */
static inline uint32_t uc_fd_flags(struct uc_fd *e, uint64_t gen)
{
	uint64_t d = atomic_load_explicit(&e->decision, memory_order_acquire);

	if (__builtin_expect(d >> 8 == gen, 1))
		return (uint32_t)(d & 0xffu);
	return uc_fd_decide(e, gen);
}

static inline void uc_fd_forget(int fd)
{
	if ((unsigned)fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].state, UC_FD_UNKNOWN, memory_order_release);
}

static inline void uc_fd_advance(int fd, int64_t pos)
{
	if ((unsigned)fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].pos, pos, memory_order_relaxed);
}

#pragma GCC visibility pop

#endif /* UC_FD_H */
