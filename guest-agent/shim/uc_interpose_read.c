/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_read.c - the interposed reads: read, pread, readv, preadv, preadv2 (and their
 * *64 and fortified variants) and sendfile, through uc_pre and uc_post (uc_call.c).
 *
 * Every wrapper keeps the caller's errno (e0) across its own work: what the caller sees is
 * exactly the real call's errno, or the unchanged value after a call served here.
 */
#include "uc_shim.h"

/* Sum of iov lengths, and the vector copied into local[64], read without trusting the
 * caller's pointer (the kernel would say EFAULT, we must not crash). Returns 0 and passes
 * through when it cannot tell. */
static int uc_iov_total(const struct iovec *iov, int cnt, size_t *total, struct iovec *local)
{
	struct iovec self, remote;
	size_t sum = 0;
	int i;

	if (cnt <= 0 || cnt > 64 || !iov)
		return 0;
	self.iov_base = local;
	self.iov_len = sizeof(struct iovec) * (size_t)cnt;
	remote.iov_base = (void *)(uintptr_t)iov;
	remote.iov_len = self.iov_len;
	if (process_vm_readv(getpid(), &self, 1, &remote, 1, 0) != (ssize_t)self.iov_len)
		return 0;
	for (i = 0; i < cnt; i++) {
		if (local[i].iov_len > (size_t)SSIZE_MAX - sum)
			return 0;
		sum += local[i].iov_len;
	}
	*total = sum;
	return 1;
}

/* Read a small object of the caller's without trusting the pointer (0: cannot). */
static int uc_peek(const void *p, void *dst, size_t n)
{
	struct iovec self = {dst, n}, remote = {(void *)(uintptr_t)p, n};

	return p && process_vm_readv(getpid(), &self, 1, &remote, 1, 0) == (ssize_t)n;
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

static ssize_t uc_do_read(int fd, void *buf, size_t n)
{
	struct uc_call c;
	ssize_t r;
	int saved, e0 = errno;

	if (!uc_pre(fd, -1, n, &c)) {
		errno = e0;
		return UC_REAL(read)(fd, buf, n);
	}
	if (c.rep_node >= 0) {
		struct iovec v = {buf, n};

		if (uc_rep_at_pos(fd, &v, 1, n, &c, &r)) {
			saved = r < 0 ? errno : e0;
			uc_post(fd, &c, r, 1, 0, 0);
			errno = saved;
			return r;
		}
	}
	if (c.nt && uc.nt_read) {
		/* opt-in: read() through the mmap path; see docs/agent.md for the limit */
		off_t cur = UC_REAL(lseek)(fd, 0, SEEK_CUR);

		if (cur >= 0 && uc_nt_pread_colored(fd, buf, n, cur, &c, &r) &&
		    UC_REAL(lseek)(fd, cur + r, SEEK_SET) == cur + r) {
			c.off = cur;
			uc_post(fd, &c, r, 1, 0, 1);
			errno = e0;
			return r;
		}
		if (cur >= 0)
			(void)UC_REAL(lseek)(fd, cur, SEEK_SET);
	}
	if (__builtin_expect(c.color >= 0, 0)) {
		struct uc_policy pol;

		uc_color_enter(c.color, &pol);
		errno = e0;
		r = UC_REAL(read)(fd, buf, n);
		uc_color_leave(&pol);
	} else {
		errno = e0;
		r = UC_REAL(read)(fd, buf, n);
	}
	saved = errno;
	uc_post(fd, &c, r, 1, 0, 0);
	errno = saved;
	return r;
}

static ssize_t uc_do_pread(int fd, void *buf, size_t n, int64_t off)
{
	struct uc_call c;
	ssize_t r;
	int saved, e0 = errno;

	if (off < 0 || !uc_pre(fd, off, n, &c)) {
		errno = e0;
		return UC_REAL(pread64)(fd, buf, n, (off64_t)off);
	}
	if (c.rep_node >= 0) {
		struct iovec v = {buf, n};

		if (uc_rep_at(fd, &v, 1, n, off, &c, &r)) {
			uc_post(fd, &c, r, 0, 0, 0);
			errno = e0;
			return r;
		}
	}
	if (c.nt && uc_nt_pread_colored(fd, buf, n, off, &c, &r)) {
		uc_post(fd, &c, r, 0, 0, 1);
		errno = e0;
		return r;
	}
	if (__builtin_expect(c.color >= 0, 0)) {
		struct uc_policy pol;

		uc_color_enter(c.color, &pol);
		errno = e0;
		r = UC_REAL(pread64)(fd, buf, n, (off64_t)off);
		uc_color_leave(&pol);
	} else {
		errno = e0;
		r = UC_REAL(pread64)(fd, buf, n, (off64_t)off);
	}
	saved = errno;
	uc_post(fd, &c, r, 0, 0, 0);
	errno = saved;
	return r;
}

/* vectored reads: migration, counting and replicas, never the mmap path */
static ssize_t uc_do_preadv(int fd, const struct iovec *iov, int cnt, int64_t off, int flags,
			    int which)
{
	struct uc_call c;
	struct iovec local[64];
	size_t total = 0;
	ssize_t r;
	int saved, active, e0 = errno;

	/* classify first: pipes and sockets never pay for reading the iovec array */
	struct uc_policy pol;

	pol.set = 0;

	active = (fd >= 0 && uc_ready() && uc_fd_classify(fd, &c.file_id, &c.off) &&
		  uc_iov_total(iov, cnt, &total, local) && uc_pre(fd, off, total, &c));
	if (active && c.rep_node >= 0 && flags == 0 &&
	    (off >= 0 ? uc_rep_at(fd, local, cnt, total, off, &c, &r)
		      : uc_rep_at_pos(fd, local, cnt, total, &c, &r))) {
		saved = r < 0 ? errno : e0;
		uc_post(fd, &c, r, off < 0, 0, 0);
		errno = saved;
		return r;
	}
	if (active && c.color >= 0)
		uc_color_enter(c.color, &pol);
	errno = e0;
	switch (which) {
	case 0:
		r = UC_REAL(readv)(fd, iov, cnt);
		break;
	case 1:
		r = UC_REAL(preadv64)(fd, iov, cnt, (off64_t)off);
		break;
	default:
		r = UC_REAL(preadv64v2)(fd, iov, cnt, (off64_t)off, flags);
		break;
	}
	uc_color_leave(&pol);
	if (active) {
		saved = errno;
		uc_post(fd, &c, r, off < 0, 0, 0);
		errno = saved;
	}
	return r;
}

/*
 * sendfile from a regular file (a web server serving static files, MFC section 4.1):
 * migration and counting as for read, then the replica or the real call.
 */
static ssize_t uc_do_sendfile(int out, int in, void *offp, size_t count, int is64)
{
	struct uc_call c;
	int64_t off = -1;
	ssize_t r;
	int saved, active, e0 = errno;
	off_t o32 = 0;
	off64_t o64 = 0;

	if (offp && (is64 ? uc_peek(offp, &o64, sizeof(o64)) : uc_peek(offp, &o32, sizeof(o32))))
		off = is64 ? (int64_t)o64 : (int64_t)o32;
	struct uc_policy pol;

	pol.set = 0;

	active = in >= 0 && uc_ready() && uc_fd_classify(in, &c.file_id, &c.off) &&
		 (!offp || off >= 0) && uc_pre(in, offp ? off : -1, count, &c);
	if (active && c.rep_node >= 0 && uc_rep_sendfile(out, in, offp, is64, count, &c, &r)) {
		saved = r < 0 ? errno : e0;
		uc_post(in, &c, r, !offp, 0, 0);
		errno = saved;
		return r;
	}
	if (active && c.color >= 0)
		uc_color_enter(c.color, &pol);
	errno = e0;
	if (is64)
		r = UC_REAL(sendfile64)(out, in, offp, count);
	else
		r = UC_REAL(sendfile)(out, in, offp, count);
	uc_color_leave(&pol);
	if (active) {
		saved = errno;
		uc_post(in, &c, r, !offp, 0, 0);
		errno = saved;
	}
	return r;
}

UC_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	return uc_do_read(fd, buf, n);
}

UC_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		return UC_REAL_SYM(read_chk, "__read_chk")(fd, buf, n, buflen);
	return uc_do_read(fd, buf, n);
}

UC_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	if (n > buflen)
		return UC_REAL_SYM(pread_chk, "__pread_chk")(fd, buf, n, off, buflen);
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
	if (n > buflen)
		return UC_REAL_SYM(pread64_chk, "__pread64_chk")(fd, buf, n, off, buflen);
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	return uc_do_preadv(fd, iov, cnt, -1, 0, 0);
}

UC_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (off < 0)
		return UC_REAL(preadv)(fd, iov, cnt, off);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, 0, 1);
}

UC_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	if (off < 0)
		return UC_REAL(preadv64)(fd, iov, cnt, off);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, 0, 1);
}

UC_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (off < -1)
		return UC_REAL(preadv2)(fd, iov, cnt, off, flags);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, flags, 2);
}

UC_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags)
{
	if (off < -1)
		return UC_REAL(preadv64v2)(fd, iov, cnt, off, flags);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, flags, 2);
}

UC_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	return uc_do_sendfile(out, in, offset, count, 0);
}

UC_EXPORT ssize_t sendfile64(int out, int in, off64_t *offset, size_t count)
{
	return uc_do_sendfile(out, in, offset, count, 1);
}
