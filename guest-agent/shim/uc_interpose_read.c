/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_read.c - the interposed reads: read, pread, readv, preadv, preadv2 (and their
 * *64 and fortified variants) and sendfile, through uc_pre and uc_post (uc_call.c).
 *
 * Each exported function first asks the descriptor's cache line whether it is a file the
 * shim classified (uc_fd_file); anything else (a pipe, a socket, a descriptor the shim did
 * not see made, the shim off) goes straight to libc. A file's call is counted around the
 * real call, without touching errno: only when a mechanism acts (a replica, the mmap path,
 * a color) does the call take the *_acting path, which keeps the caller's errno (e0)
 * across its own work, so that what the caller sees is exactly the real call's errno, or
 * the unchanged value after a call served here. None reads memory the caller points to
 * before the call that the kernel has not just accepted, except under the fault guard
 * (uc_sendfile_off): a bad pointer gets the kernel's EFAULT, never a fault in the shim.
 */
#include "uc_shim.h"

/* Does a mechanism act on this call (beyond the migration uc_pre made)? */
static inline int uc_acts(const struct uc_call *c, int nt_applies)
{
	return __builtin_expect(c->rep_node >= 0 || (c->nt && nt_applies) || c->color >= 0, 0);
}

/* The non-temporal read under the chunk's color: its page faults bring the page cache in
 * under the thread's memory policy, like a read() would (SRM-buffer). */
static int uc_nt_pread_colored(int fd, void *buf, size_t n, int64_t off, const struct uc_call *c,
			       ssize_t *r)
{
	struct uc_policy pol;
	int served;

	pol.set = 0;
	if (c->color >= 0)
		uc_color_enter(c->color, &pol);
	served = uc_nt_pread(fd, buf, n, off, c->file_id, r);
	uc_color_leave(&pol);
	return served;
}

/* The real call under the chunk's color (SRM-buffer), if it has one (uc_color_enter and
 * uc_color_leave keep errno). */
#define UC_COLORED(c, call)                                                        \
	(__extension__({                                                           \
		struct uc_policy pol_;                                             \
		ssize_t r_;                                                        \
		pol_.set = 0;                                                      \
		if ((c)->color >= 0)                                               \
			uc_color_enter((c)->color, &pol_);                         \
		r_ = (call);                                                       \
		if (pol_.set)                                                      \
			uc_color_leave(&pol_);                                     \
		r_;                                                                \
	}))

/* read() where a mechanism acts: a replica at the file position, the opt-in mmap path, a
 * color. */
static ssize_t uc_read_acting(int fd, void *buf, size_t n, struct uc_call *c)
{
	ssize_t r;
	int saved, e0 = errno;

	if (c->rep_node >= 0) {
		struct iovec v = {buf, n};

		if (uc_rep_at_pos(fd, &v, 1, n, c, &r)) {
			saved = r < 0 ? errno : e0;
			uc_post(fd, c, r, 1, 0, 0);
			errno = saved;
			return r;
		}
	}
	if (c->nt && uc.nt_read) {
		/* opt-in: read() through the mmap path; see docs/agent.md for the limit */
		off_t cur = UC_REAL(lseek)(fd, 0, SEEK_CUR);

		if (cur >= 0 && uc_nt_pread_colored(fd, buf, n, cur, c, &r) &&
		    UC_REAL(lseek)(fd, cur + r, SEEK_SET) == cur + r) {
			c->off = cur;
			uc_post(fd, c, r, 1, 0, 1);
			errno = e0;
			return r;
		}
		if (cur >= 0)
			(void)UC_REAL(lseek)(fd, cur, SEEK_SET);
	}
	errno = e0; /* what a path that fell back left */
	r = UC_COLORED(c, UC_REAL(read)(fd, buf, n));
	uc_post(fd, c, r, 1, 0, 0);
	return r;
}

/* read() that opens a run or where something acts: out of line, so that a run's own calls
 * (uc_do_read) keep a small frame */
static __attribute__((noinline)) ssize_t uc_read_slow(struct uc_fd *e, int fd, void *buf,
						      size_t n)
{
	struct uc_call c;
	ssize_t r;

	if (!uc_pre(e, UC_OFF_POS, n, &c))
		return UC_REAL(read)(fd, buf, n);
	if (uc_acts(&c, uc.nt_read))
		return uc_read_acting(fd, buf, n, &c);
	r = UC_REAL(read)(fd, buf, n);
	uc_post(fd, &c, r, 1, 0, 0);
	return r;
}

/* read() of a file inside the thread's run is the real call and a few stores */
static __attribute__((noinline)) ssize_t uc_do_read_run(struct uc_fd *e, int fd, void *buf,
							size_t n, uint64_t at)
{
	ssize_t r;

	if (!uc_in_run(e, at, n))
		return uc_read_slow(e, fd, buf, n);
	r = uc.real_read(fd, buf, n);
	if (r >= 0) {
		if (r > 0)
			atomic_store_explicit(&e->pos, (int64_t)(at + (uint64_t)r),
					      memory_order_relaxed);
		uc_run_add(at, r);
	}
	return r;
}

/* read() of a file: a call that continues the thread's run is the real call and three
 * stores, in a frame of its own (the other paths' registers are not saved for it) */
static inline ssize_t uc_do_read(struct uc_fd *e, int fd, void *buf, size_t n)
{
	uint64_t at = (uint64_t)atomic_load_explicit(&e->pos, memory_order_relaxed);
	ssize_t r;

	if (!uc_continues(e, at, n))
		return uc_do_read_run(e, fd, buf, n, at);
	r = uc.real_read(fd, buf, n);
	if (r > 0)
		atomic_store_explicit(&e->pos, (int64_t)(at + (uint64_t)r), memory_order_relaxed);
	if (r >= 0)
		uc_run_continue(at, r);
	return r;
}

/* pread() where a mechanism acts: a replica, the mmap path, a color. */
static ssize_t uc_pread_acting(int fd, void *buf, size_t n, int64_t off, struct uc_call *c)
{
	ssize_t r;
	int e0 = errno;

	if (c->rep_node >= 0) {
		struct iovec v = {buf, n};

		if (uc_rep_at(fd, &v, 1, n, off, c, &r)) {
			uc_post(fd, c, r, 0, 0, 0);
			errno = e0;
			return r;
		}
	}
	if (c->nt && uc_nt_pread_colored(fd, buf, n, off, c, &r)) {
		uc_post(fd, c, r, 0, 0, 1);
		errno = e0;
		return r;
	}
	errno = e0; /* what a path that fell back left */
	r = UC_COLORED(c, UC_REAL(pread64)(fd, buf, n, (off64_t)off));
	uc_post(fd, c, r, 0, 0, 0);
	return r;
}

/* pread() that opens a run or where something acts: out of line (uc_read_slow's reason) */
static __attribute__((noinline)) ssize_t uc_pread_slow(struct uc_fd *e, int fd, void *buf,
						       size_t n, int64_t off)
{
	struct uc_call c;
	ssize_t r;

	if (off < 0 || !uc_pre(e, off, n, &c))
		return UC_REAL(pread64)(fd, buf, n, (off64_t)off);
	if (uc_acts(&c, 1))
		return uc_pread_acting(fd, buf, n, off, &c);
	r = UC_REAL(pread64)(fd, buf, n, (off64_t)off);
	uc_post(fd, &c, r, 0, 0, 0);
	return r;
}

/* pread() of a file inside the thread's run is the real call and a few stores */
static __attribute__((noinline)) ssize_t uc_do_pread_run(struct uc_fd *e, int fd, void *buf,
							 size_t n, int64_t off)
{
	ssize_t r;

	if (off < 0 || !uc_in_run(e, (uint64_t)off, n))
		return uc_pread_slow(e, fd, buf, n, off);
	r = uc.real_pread64(fd, buf, n, (off64_t)off);
	if (r >= 0)
		uc_run_add((uint64_t)off, r);
	return r;
}

/* pread() of a file: a call that continues the thread's run is the real call and two
 * stores, in a frame of its own */
static inline ssize_t uc_do_pread(struct uc_fd *e, int fd, void *buf, size_t n, int64_t off)
{
	ssize_t r;

	if (off < 0 || !uc_continues(e, (uint64_t)off, n))
		return uc_do_pread_run(e, fd, buf, n, off);
	r = uc.real_pread64(fd, buf, n, (off64_t)off);
	if (r >= 0)
		uc_run_continue((uint64_t)off, r);
	return r;
}

/*
 * Vectored reads: migration and counting, and a color, never the mmap path nor a replica.
 * The iovec array is not read: the call's size is unknown before it (a sequential
 * reader's span is the rest of its chunk all the same), and what it read is its return
 * value.
 */
static ssize_t uc_do_preadv(struct uc_fd *e, int fd, const struct iovec *iov, int cnt,
			    int64_t off, int flags, int which)
{
	struct uc_call c;
	ssize_t r;

	if (!uc_pre(e, off >= 0 ? off : UC_OFF_POS, 0, &c))
		c.chunk_size = 0, c.color = -1; /* pass through, uncounted */
	switch (which) {
	case 0:
		r = UC_COLORED(&c, UC_REAL(readv)(fd, iov, cnt));
		break;
	case 1:
		r = UC_COLORED(&c, UC_REAL(preadv64)(fd, iov, cnt, (off64_t)off));
		break;
	default:
		r = UC_COLORED(&c, UC_REAL(preadv64v2)(fd, iov, cnt, (off64_t)off, flags));
		break;
	}
	if (c.chunk_size)
		uc_post(fd, &c, r, off < 0, 0, 0);
	return r;
}

/* the offset pointer this thread's last sendfile passed and the kernel accepted (it read
 * and wrote it): stack memory that was valid then is valid now */
static UC_TLS const void *uc_sf_offp;

/*
 * sendfile's offset before the call, for a file the table names in a process where the
 * mechanisms act; UC_OFF_LATER otherwise. A pointer the kernel accepted in this thread's
 * last sendfile that lies on this thread's stack just above the shim's frame (a server's
 * loop over one local offset) is read as is; any other under the fault guard (uc_guard.c:
 * a few system calls, paid only by a named file's call at a new pointer), so a bad pointer
 * is always the kernel's EFAULT and an offset that moves with its caller's frame is read
 * on the first call too (an interpreter's calls do not all run at one stack depth).
 */
static int64_t uc_sendfile_off(struct uc_fd *e, const void *offp, int is64)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0), p = (uintptr_t)offp;
	uint64_t gen;
	off64_t o64 = -1;
	off_t o32 = -1;
	int64_t off;

	if (!(gen = uc_table_gen()) || !(uc_fd_flags(e, gen) & UC_FF_NAMED) || !uc_may_act())
		return UC_OFF_LATER;
	if (offp == uc_sf_offp && p >= sp && p - sp <= (1u << 20))
		off = is64 ? (int64_t) * (const off64_t *)offp : (int64_t) * (const off_t *)offp;
	else if (is64 ? uc_guarded_load(offp, &o64, sizeof(o64))
		      : uc_guarded_load(offp, &o32, sizeof(o32)))
		off = is64 ? (int64_t)o64 : (int64_t)o32;
	else
		return UC_OFF_LATER;
	return off >= 0 ? off : UC_OFF_LATER;
}

/*
 * sendfile from a regular file (a web server serving static files, MFC section 4.1):
 * migration and counting as for read, then the replica or the real call. With an offset
 * pointer and a file nothing places, the offset is learnt after the call from what the
 * kernel wrote back.
 */
static ssize_t uc_do_sendfile(struct uc_fd *e, int out, int in, void *offp, size_t count,
			      int is64)
{
	struct uc_call c;
	ssize_t r;
	int saved, e0 = errno;

	if (!uc_pre(e, offp ? uc_sendfile_off(e, offp, is64) : UC_OFF_POS, count, &c))
		return is64 ? UC_REAL(sendfile64)(out, in, offp, count)
			    : UC_REAL(sendfile)(out, in, offp, count);
	if (c.rep_node >= 0 && c.off >= 0) {
		if (uc_rep_sendfile(out, in, offp, is64, count, &c, &r)) {
			saved = r < 0 ? errno : e0;
			uc_post(in, &c, r, !offp, 0, 0);
			errno = saved;
			return r;
		}
		errno = e0; /* what the replica's path left */
	}
	r = UC_COLORED(&c, is64 ? UC_REAL(sendfile64)(out, in, offp, count)
				: UC_REAL(sendfile)(out, in, offp, count));
	if (offp && r >= 0) /* the kernel read and wrote *offp: it is valid memory */
		uc_sf_offp = offp;
	if (offp && c.off < 0 && r > 0)
		c.off = (is64 ? (int64_t) * (off64_t *)offp : (int64_t) * (off_t *)offp) - r;
	uc_post(in, &c, r, !offp, 0, 0);
	return r;
}

/*
 * UC_READ_WRAP(type, name, params, real_args, file_call) defines the exported
 * `type name params`: the real call (uc_real.name, with real_args) unless fd is a file
 * the shim classified, else file_call (which sees the file's entry as e).
 */
#define UC_READ_WRAP(type, name, params, real_args, file_call)                     \
	UC_COLD_PASS(type, name, params, real_args)                                \
	UC_EXPORT type name params                                                 \
	{                                                                          \
		struct uc_fd *e = uc_fd_file(fd);                                  \
		if (!e)                                                            \
			return UC_PASS(name, real_args);                           \
		return file_call;                                                  \
	}

UC_READ_WRAP(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n),
	     uc_do_read(e, fd, buf, n))
UC_READ_WRAP(ssize_t, pread, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off),
	     uc_do_pread(e, fd, buf, n, (int64_t)off))
UC_READ_WRAP(ssize_t, pread64, (int fd, void *buf, size_t n, off64_t off), (fd, buf, n, off),
	     uc_do_pread(e, fd, buf, n, (int64_t)off))
UC_READ_WRAP(ssize_t, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
	     uc_do_preadv(e, fd, iov, cnt, -1, 0, 0))
UC_READ_WRAP(ssize_t, preadv, (int fd, const struct iovec *iov, int cnt, off_t off),
	     (fd, iov, cnt, off),
	     off < 0 ? UC_REAL(preadv)(fd, iov, cnt, off)
		     : uc_do_preadv(e, fd, iov, cnt, (int64_t)off, 0, 1))
UC_READ_WRAP(ssize_t, preadv64, (int fd, const struct iovec *iov, int cnt, off64_t off),
	     (fd, iov, cnt, off),
	     off < 0 ? UC_REAL(preadv64)(fd, iov, cnt, off)
		     : uc_do_preadv(e, fd, iov, cnt, (int64_t)off, 0, 1))
UC_READ_WRAP(ssize_t, preadv2, (int fd, const struct iovec *iov, int cnt, off_t off, int flags),
	     (fd, iov, cnt, off, flags),
	     off < -1 ? UC_REAL(preadv2)(fd, iov, cnt, off, flags)
		      : uc_do_preadv(e, fd, iov, cnt, (int64_t)off, flags, 2))
UC_READ_WRAP(ssize_t, preadv64v2,
	     (int fd, const struct iovec *iov, int cnt, off64_t off, int flags),
	     (fd, iov, cnt, off, flags),
	     off < -1 ? UC_REAL(preadv64v2)(fd, iov, cnt, off, flags)
		      : uc_do_preadv(e, fd, iov, cnt, (int64_t)off, flags, 2))

/* the fortified reads: the libc check first (n larger than the buffer aborts there) */
UC_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	struct uc_fd *e = uc_fd_file(fd);

	if (!e || n > buflen)
		return UC_REAL_SYM(read_chk, "__read_chk")(fd, buf, n, buflen);
	return uc_do_read(e, fd, buf, n);
}

UC_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	struct uc_fd *e = uc_fd_file(fd);

	if (!e || n > buflen)
		return UC_REAL_SYM(pread_chk, "__pread_chk")(fd, buf, n, off, buflen);
	return uc_do_pread(e, fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
	struct uc_fd *e = uc_fd_file(fd);

	if (!e || n > buflen)
		return UC_REAL_SYM(pread64_chk, "__pread64_chk")(fd, buf, n, off, buflen);
	return uc_do_pread(e, fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	struct uc_fd *e = uc_fd_file(in);

	if (!e)
		return UC_REAL(sendfile)(out, in, offset, count);
	return uc_do_sendfile(e, out, in, offset, count, 0);
}

UC_EXPORT ssize_t sendfile64(int out, int in, off64_t *offset, size_t count)
{
	struct uc_fd *e = uc_fd_file(in);

	if (!e)
		return UC_REAL(sendfile64)(out, in, offset, count);
	return uc_do_sendfile(e, out, in, offset, count, 1);
}
