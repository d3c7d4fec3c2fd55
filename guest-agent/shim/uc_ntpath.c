/* SPDX-License-Identifier: MIT */
/*
 * uc_ntpath.c - the non-temporal path: pread served from an mmap of the file copied with
 * prefetchnta loads (MFC section 4.3, 5), for chunks the host marks non-caching.
 */
#include "uc_shim.h"

/*
 * Serve pread(fd, buf, n, off) from an mmap of the file with prefetchnta loads.
 * Returns 1 and *ret when it served the call; 0 when the caller must make the real
 * call (anything unusual: not readable, O_DIRECT, offset at or past EOF, mmap
 * failure, a fault during the copy).
 */
int uc_nt_pread(int fd, void *buf, size_t n, int64_t off, uint64_t file_id, ssize_t *ret)
{
	struct stat st;
	size_t len, maplen;
	int64_t aoff;
	unsigned char *m;
	int fl;

	if (!UC_HAVE_NT || uc.nt_off || n == 0 || n > (size_t)SSIZE_MAX || off < 0)
		return 0;
	if (uc_real_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    uc_file_id_of(uc.salt, (uint64_t)st.st_dev, (uint64_t)st.st_ino) != file_id)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & (O_DIRECT | O_PATH)))
		return 0;
	if (off >= (int64_t)st.st_size)
		return 0;
	len = (size_t)(st.st_size - off) < n ? (size_t)(st.st_size - off) : n;
	aoff = off & ~((int64_t)uc.pagesz - 1);
	maplen = len + (size_t)(off - aoff);
	if (!uc_guard_ready())
		return 0;
	m = mmap(NULL, maplen, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)aoff);
	if (m == MAP_FAILED)
		return 0;
	if (sigsetjmp(uc_jb, 1) == 0) {
		uc_in_copy = 1;
		/* -flto may inline uc_nt_copy here: the barriers keep the flag's stores around
		 * the copy, as the call into another file did */
		__asm__ volatile("" ::: "memory");
		uc_nt_copy(buf, m + (off - aoff), len);
		__asm__ volatile("" ::: "memory");
		uc_in_copy = 0;
		munmap(m, maplen);
		*ret = (ssize_t)len;
		return 1;
	}
	/* a fault in the copy (file truncated, bad buffer): the real call decides */
	uc_in_copy = 0;
	munmap(m, maplen);
	return 0;
}
