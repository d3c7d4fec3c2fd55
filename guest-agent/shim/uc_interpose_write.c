/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_write.c - the interposed calls that change a file's bytes: write and pwrite
 * count (uc_post); they and writev, pwritev*, ftruncate* bump the generation of a file the
 * table gives a replica, before and after the real call, so replicas in every process drop.
 * Like every wrapper, they keep the caller's errno across their own work.
 *
 * Why only such files: a process serves a replica only of a chunk its table lookup marks
 * replicated, and the agent fills one only for such a chunk, so a replica is filled only
 * after the table that names it is published. A write during which the table changed
 * bumps after it whenever the new table gives the file a replica (a fill may have run
 * during the write). The generation is a fast hint besides: every serve also checks the
 * file's fstat against the fill's (docs/replicas.md "Coherence").
 */
#include "uc_shim.h"

/* Before a write: the file's entry (NULL: pass through), the table generation and
 * whether the file has a replica (its generation is then bumped now). No errno is
 * touched: a bump is an atomic add. */
static inline struct uc_fd *uc_write_enter(int fd, uint64_t *gen, int *bumped)
{
	struct uc_fd *e;

	*bumped = 0;
	if (!(e = uc_fd_file(fd)) || !(*gen = uc_table_gen()))
		return NULL;
	/* a file that may have replicas (the guest's table is NCC's) is asked before the
	 * shim writes under a stand-in id: its replicas must drop */
	if (__builtin_expect(atomic_load_explicit(&e->state, memory_order_relaxed) == UC_FD_OPENED,
			     0) && (uc_t.tp.flags & UC_TABLE_NUMA))
		(void)uc_fd_identify(fd);
	if (uc_fd_flags(e, *gen) & UC_FF_REPLICA) {
		uc_gen_bump(uc_fd_id(e)); /* before: a replica fill running now fails */
		*bumped = 1;
	}
	return e;
}

/* After it: bump again when the file had a replica before, or has one in a newer table. */
static inline void uc_write_leave(struct uc_fd *e, uint64_t gen, int bumped)
{
	uint64_t now = uc_table_gen();

	if (bumped || (now && now != gen && (uc_fd_flags(e, now) & UC_FF_REPLICA)))
		uc_gen_bump(uc_fd_id(e)); /* after: no replica filled during the write survives */
}

static ssize_t uc_do_pwrite(int fd, const void *buf, size_t n, int64_t off, int cur)
{
	struct uc_call c;
	struct uc_fd *e;
	uint64_t gen = 0;
	ssize_t r;
	int bumped;

	e = uc_write_enter(fd, &gen, &bumped);
	if (!e)
		return cur ? UC_REAL(write)(fd, buf, n) : UC_REAL(pwrite64)(fd, buf, n, (off64_t)off);
	c.off = cur ? atomic_load_explicit(&e->pos, memory_order_relaxed) : off;
	r = cur ? UC_REAL(write)(fd, buf, n) : UC_REAL(pwrite64)(fd, buf, n, (off64_t)off);
	uc_write_leave(e, gen, bumped);
	c.file_id = uc_fd_id(e);
	c.chunk_size = uc_t.tp.chunk_size;
	c.nt = 0;
	c.scale = 0; /* writes are never sampled: their descriptors are not read-only */
	c.run_ff = UC_RUN_SEALED; /* a write's run takes no read on the fast path */
	c.run_home = c.run_fresh = UC_NO_HOME;
	uc_post(fd, &c, r, cur, 1, 0);
	return r;
}

UC_COLD_PASS(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))
UC_COLD_PASS(ssize_t, pwrite, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
UC_COLD_PASS(ssize_t, pwrite64, (int fd, const void *buf, size_t n, off64_t off),
	     (fd, buf, n, off))

UC_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (!uc_fd_file(fd))
		return UC_PASS(write, (fd, buf, n));
	return uc_do_pwrite(fd, buf, n, -1, 1);
}

UC_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (!uc_fd_file(fd))
		return UC_PASS(pwrite, (fd, buf, n, off));
	return uc_do_pwrite(fd, buf, n, (int64_t)off, 0);
}

UC_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	if (!uc_fd_file(fd))
		return UC_PASS(pwrite64, (fd, buf, n, off));
	return uc_do_pwrite(fd, buf, n, (int64_t)off, 0);
}

/*
 * UC_BUMP_WRAP(type, name, params, args) defines the exported `type name params`: the real
 * call between uc_write_enter and uc_write_leave (writev, pwritev*, ftruncate*: they only
 * bump; counting stays with write and pwrite).
 */
#define UC_BUMP_WRAP(type, name, params, args)                                      \
	UC_EXPORT type name params                                                  \
	{                                                                           \
		uint64_t gen = 0;                                                   \
		int bumped;                                                         \
		struct uc_fd *e = uc_write_enter(fd, &gen, &bumped);                \
		type r = UC_REAL(name) args;                                        \
		if (e)                                                              \
			uc_write_leave(e, gen, bumped);                             \
		return r;                                                           \
	}

UC_BUMP_WRAP(ssize_t, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt))
UC_BUMP_WRAP(ssize_t, pwritev, (int fd, const struct iovec *iov, int cnt, off_t off),
	     (fd, iov, cnt, off))
UC_BUMP_WRAP(ssize_t, pwritev64, (int fd, const struct iovec *iov, int cnt, off64_t off),
	     (fd, iov, cnt, off))
UC_BUMP_WRAP(ssize_t, pwritev2,
	     (int fd, const struct iovec *iov, int cnt, off_t off, int flags),
	     (fd, iov, cnt, off, flags))
UC_BUMP_WRAP(ssize_t, pwritev64v2,
	     (int fd, const struct iovec *iov, int cnt, off64_t off, int flags),
	     (fd, iov, cnt, off, flags))
UC_BUMP_WRAP(int, ftruncate, (int fd, off_t len), (fd, len))
UC_BUMP_WRAP(int, ftruncate64, (int fd, off64_t len), (fd, len))
