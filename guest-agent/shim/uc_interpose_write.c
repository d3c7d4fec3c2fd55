/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_write.c - the interposed calls that change a file's bytes: write and pwrite
 * count (uc_post); they and writev, pwritev*, ftruncate* bump the file's generation before
 * and after the real call, so replicas in every process drop. Like every wrapper, they keep
 * the caller's errno across their own work.
 */
#include "uc_shim.h"

static ssize_t uc_do_pwrite(int fd, const void *buf, size_t n, int64_t off, int cur)
{
	struct uc_call c;
	ssize_t r;
	int saved, active, e0 = errno;

	active = uc_ready() && uc_fd_classify(fd, &c.file_id, &c.off);
	if (!cur && active)
		c.off = off;
	if (active)
		uc_gen_bump(c.file_id); /* before: a replica fill running now fails */
	errno = e0;
	r = cur ? UC_REAL(write)(fd, buf, n) : UC_REAL(pwrite64)(fd, buf, n, (off64_t)off);
	if (active) {
		struct uc_hit h;

		saved = errno;
		uc_gen_bump(c.file_id); /* after: no replica filled during the write survives */
		c.chunk_size = (c.off >= 0 && uc_lookup(c.file_id, (uint64_t)c.off, &h))
				       ? h.chunk_size
				       : 0;
		c.nt = 0;
		uc_post(fd, &c, r, cur, 1, 0);
		errno = saved;
	}
	return r;
}

UC_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	return uc_do_pwrite(fd, buf, n, -1, 1);
}

UC_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return uc_do_pwrite(fd, buf, n, (int64_t)off, 0);
}

UC_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	return uc_do_pwrite(fd, buf, n, (int64_t)off, 0);
}

/*
 * Other calls that change a file's bytes: they only bump the file's generation (before and
 * after), so replicas in every process drop at once (counting stays with write/pwrite).
 */
static inline void uc_bump_fd(int fd)
{
	uint64_t fid;
	int64_t pos;
	int e0 = errno;

	if (uc_ready() && uc_fd_classify(fd, &fid, &pos))
		uc_gen_bump(fid);
	errno = e0;
}

UC_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(writev)(fd, iov, cnt);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev)(fd, iov, cnt, off);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev64)(fd, iov, cnt, off);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev2)(fd, iov, cnt, off, flags);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev64v2)(fd, iov, cnt, off, flags);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT int ftruncate(int fd, off_t len)
{
	int r;

	uc_bump_fd(fd);
	r = UC_REAL(ftruncate)(fd, len);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT int ftruncate64(int fd, off64_t len)
{
	int r;

	uc_bump_fd(fd);
	r = UC_REAL(ftruncate64)(fd, len);
	uc_bump_fd(fd);
	return r;
}
