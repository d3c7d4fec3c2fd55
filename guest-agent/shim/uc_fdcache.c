/* SPDX-License-Identifier: MIT */
/*
 * uc_fdcache.c - the fd cache: for each fd below UC_FD_CACHE, whether it is a countable
 * regular file, its file id and its predicted offset, so a read asks fstat only once.
 * The interposed calls that make, reuse or move fds keep it honest (uc_interpose_fd.c).
 */
#include "uc_shim.h"

struct uc_fd uc_fds[UC_FD_CACHE];

/*
 * Classify fd: returns 1 and the file id for a countable regular file, 0 to pass
 * through (pipes, sockets, O_DIRECT, O_PATH, anything fstat fails on).
 */
int uc_fd_classify(int fd, uint64_t *file_id, int64_t *pos)
{
	struct stat st;
	int fl;
	struct uc_fd *c = (fd >= 0 && fd < UC_FD_CACHE) ? &uc_fds[fd] : NULL;

	if (c) {
		uint32_t s = atomic_load_explicit(&c->state, memory_order_acquire);

		if (s == UC_FD_FILE) {
			*file_id = atomic_load_explicit(&c->file_id, memory_order_relaxed);
			*pos = atomic_load_explicit(&c->pos, memory_order_relaxed);
			return 1;
		}
		if (s == UC_FD_PASS)
			return 0;
	}
	if (fd < 0 || fstat(fd, &st) < 0)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (!S_ISREG(st.st_mode) || fl < 0 || (fl & O_DIRECT) || (fl & O_PATH)) {
		if (c)
			atomic_store_explicit(&c->state, UC_FD_PASS, memory_order_release);
		return 0;
	}
	*file_id = uc_file_id_of(uc.salt, (uint64_t)st.st_dev, (uint64_t)st.st_ino);
	*pos = (int64_t)UC_REAL(lseek)(fd, 0, SEEK_CUR);
	if (c) {
		atomic_store_explicit(&c->file_id, *file_id, memory_order_relaxed);
		atomic_store_explicit(&c->pos, *pos, memory_order_relaxed);
		atomic_store_explicit(&c->state, UC_FD_FILE, memory_order_release);
	}
	return 1;
}
