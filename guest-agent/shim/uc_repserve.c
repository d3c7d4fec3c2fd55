/* SPDX-License-Identifier: MIT */
/*
 * uc_repserve.c - each kind of read served from a replica (uc_replicas.c): at an offset
 * (pread, preadv), at the file position (read, readv, preadv2 at -1) and to another
 * descriptor (sendfile), with exactly the real call's bytes, return value, errno and file
 * offset.
 */
#include "uc_shim.h"

/* n bytes at `off` into iov (a trusted copy of the caller's vector) from the replica. */
int uc_rep_at(int fd, const struct iovec *iov, int cnt, size_t n, int64_t off,
	      const struct uc_call *c, ssize_t *ret)
{
	struct uc_rep_span s;
	int ok;

	if (!uc_rep_get(fd, c, off, n, &s))
		return 0;
	ok = uc_rep_copyv(iov, cnt, s.map, s.src, s.len);
	uc_rep_put(&s, !ok);
	if (ok) {
		UC_STAT(replica_serves);
		*ret = (ssize_t)s.len;
	}
	return ok;
}

/*
 * n bytes at the file position. The position the shim predicts (c->off) picks the replica;
 * one lseek(SEEK_CUR) then claims the bytes, atomically against every other reader of the
 * open file description (the kernel moves the position under the same lock a read takes).
 * When the claim shows another position (the description moved behind the shim's back),
 * or the copy fails after the claim, the bytes are read for real at the claimed position
 * and the position set to where that read would have left it. c->off becomes the position
 * read at.
 */
int uc_rep_at_pos(int fd, const struct iovec *iov, int cnt, size_t n, struct uc_call *c,
		  ssize_t *ret)
{
	struct uc_rep_span s;
	off_t now;
	int64_t at;
	ssize_t r;
	int ok, saved;

	if (c->off < 0 || !uc_rep_get(fd, c, c->off, n, &s))
		return 0;
	now = UC_REAL(lseek)(fd, (off_t)s.len, SEEK_CUR);
	if (now < 0) {
		uc_rep_put(&s, 0);
		return 0;
	}
	at = (int64_t)now - (int64_t)s.len;
	ok = at == c->off && uc_rep_copyv(iov, cnt, s.map, s.src, s.len);
	uc_rep_put(&s, at == c->off && !ok);
	c->off = at;
	if (ok) {
		UC_STAT(replica_serves);
		*ret = (ssize_t)s.len;
		return 1;
	}
	r = UC_REAL(preadv64)(fd, iov, cnt, (off64_t)at);
	saved = errno;
	if (r != (ssize_t)s.len)
		(void)UC_REAL(lseek)(fd, (off_t)(at + (r > 0 ? r : 0)), SEEK_SET);
	errno = saved;
	*ret = r;
	return 1;
}

/* Write an offset back to the caller's pointer: one the kernel accepted in this thread's
 * last sendfile (uc_sendfile_off), so valid memory. 1 when written. */
static int uc_poke(void *p, const void *src, size_t n)
{
	if (!p)
		return 0;
	memcpy(p, src, n);
	return 1;
}

/*
 * sendfile(out, in, offp, count) to a pipe or socket, from the replica: one write of the
 * replica's bytes (a replica truncated under it makes the write fail with EFAULT or come
 * up short, never a signal), then in's position or *offp advanced by what was written.
 * The position is read and set around the write, as the kernel's sendfile does it.
 */
int uc_rep_sendfile(int out, int in, void *offp, int is64, size_t count, struct uc_call *c,
		    ssize_t *ret)
{
	struct uc_rep_span s;
	struct stat ost;
	int64_t off = c->off;
	off_t o32;
	off64_t o64;
	ssize_t w;
	int saved;

	if (uc_real_fstat(out, &ost) < 0 || !(S_ISSOCK(ost.st_mode) || S_ISFIFO(ost.st_mode)))
		return 0;
	o32 = (off_t)off;
	o64 = (off64_t)off;
	if (offp ? !uc_poke(offp, is64 ? (void *)&o64 : (void *)&o32, is64 ? sizeof(o64)
									  : sizeof(o32))
		 : (off = (int64_t)UC_REAL(lseek)(in, 0, SEEK_CUR)) < 0)
		return 0; /* *offp not writable: the real call says EFAULT */
	c->off = off;
	if (!uc_rep_get(in, c, off, count, &s))
		return 0;
	if (!uc_rep_copyv(NULL, 0, s.map, s.src, 0)) { /* dropped, or truncated */
		uc_rep_put(&s, 1);
		return 0;
	}
	w = UC_REAL(write)(out, s.src, s.len);
	saved = errno;
	uc_rep_put(&s, w < 0 && saved == EFAULT);
	if (w < 0 && saved == EFAULT)
		return 0; /* nothing written: the real call */
	if (w > 0) {
		UC_STAT(replica_serves);
		o32 = (off_t)(off + w);
		o64 = (off64_t)(off + w);
		if (offp)
			(void)uc_poke(offp, is64 ? (void *)&o64 : (void *)&o32,
				      is64 ? sizeof(o64) : sizeof(o32));
		else
			(void)UC_REAL(lseek)(in, (off_t)(off + w), SEEK_SET);
	}
	errno = saved;
	*ret = w;
	return 1;
}
