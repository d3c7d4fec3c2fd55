/* SPDX-License-Identifier: MIT */
/*
 * uc_fdcache.c - descriptors: each fd below UC_FD_CACHE is classified when the shim sees it
 * made (open*, fopen*, dup*, fds 0-2 at start: one fstat then, never on a read), and keeps
 * its file's decision for the current table generation (does the table name the file?),
 * so a read of a file nothing places costs no lookup. A descriptor the shim did not see
 * made (inherited, or made by a raw system call) is UNKNOWN and every call on it passes
 * straight through. The interposed calls that make, reuse or move fds keep it honest
 * (uc_interpose_fd.c).
 */
#include "uc_shim.h"

struct uc_fd uc_fds[UC_FD_CACHE];

/*
 * Classify a descriptor just made: a countable regular file (its device, inode, size and
 * offset; the file id once the salt is known) or one to pass through (pipes, sockets,
 * directories, O_DIRECT, O_PATH, anything fstat fails on). Keeps errno.
 */
void uc_fd_classify(int fd)
{
	struct uc_fd *e;
	struct stat st;
	int fl, saved = errno;
	off_t pos;

	if ((unsigned)fd >= UC_FD_CACHE)
		return;
	e = &uc_fds[fd];
	atomic_store_explicit(&e->state, UC_FD_UNKNOWN, memory_order_release);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (fl = fcntl(fd, F_GETFL)) < 0 ||
	    (fl & (O_DIRECT | O_PATH)) || (pos = UC_REAL(lseek)(fd, 0, SEEK_CUR)) < 0) {
		atomic_store_explicit(&e->state, UC_FD_PASS, memory_order_release);
		errno = saved;
		return;
	}
	atomic_store_explicit(&e->dev, (uint64_t)st.st_dev, memory_order_relaxed);
	atomic_store_explicit(&e->ino, (uint64_t)st.st_ino, memory_order_relaxed);
	atomic_store_explicit(&e->size, (int64_t)st.st_size, memory_order_relaxed);
	atomic_store_explicit(&e->pos, (int64_t)pos, memory_order_relaxed);
	atomic_store_explicit(&e->file_id, 0, memory_order_relaxed);
	atomic_store_explicit(&e->decision, 0, memory_order_relaxed);
	atomic_store_explicit(&e->state, UC_FD_FILE, memory_order_release);
	errno = saved;
}

/* At start, fds 0-2 of a fresh process (their entries zero, UNKNOWN): classified like an
 * open, but only a file's entry is written, so that stdio on a terminal or a pipe costs
 * no page of the cache. 1 when fd is a countable file. */
int uc_fd_classify_at_start(int fd)
{
	struct stat st;
	int saved = errno;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		errno = saved;
		return 0;
	}
	errno = saved;
	uc_fd_classify(fd);
	return uc_fd_file(fd) != NULL;
}

/* dup*: `to` now names what `from` names (the same open file description). */
void uc_fd_copy(int from, int to)
{
	struct uc_fd *a, *b;

	if ((unsigned)to >= UC_FD_CACHE)
		return;
	b = &uc_fds[to];
	atomic_store_explicit(&b->state, UC_FD_UNKNOWN, memory_order_release);
	if ((unsigned)from >= UC_FD_CACHE || from == to)
		return;
	a = &uc_fds[from];
	if (atomic_load_explicit(&a->state, memory_order_acquire) != UC_FD_FILE) {
		atomic_store_explicit(&b->state, atomic_load(&a->state), memory_order_release);
		return;
	}
	atomic_store_explicit(&b->dev, atomic_load(&a->dev), memory_order_relaxed);
	atomic_store_explicit(&b->ino, atomic_load(&a->ino), memory_order_relaxed);
	atomic_store_explicit(&b->size, atomic_load(&a->size), memory_order_relaxed);
	atomic_store_explicit(&b->pos, atomic_load(&a->pos), memory_order_relaxed);
	atomic_store_explicit(&b->file_id, atomic_load(&a->file_id), memory_order_relaxed);
	atomic_store_explicit(&b->decision, 0, memory_order_relaxed);
	atomic_store_explicit(&b->state, UC_FD_FILE, memory_order_release);
}

/*
 * The file's decision for table generation `gen`: its file entry's flags (UC_FF_*), or 0
 * when the table names none of its chunks. Stored with the generation in one word, so a
 * decision never passes for another generation's. (The buffer read is gen's or a newer
 * one: the agent flips the buffer before it bumps the generation.)
 */
uint32_t uc_fd_decide(struct uc_fd *e, uint64_t gen)
{
	uint32_t fl = uc_file_flags(uc_fd_id(e)), ff = 0;

	if (fl == UINT32_MAX)
		return 0; /* the table was being rewritten: decided again on the next call */
	if (fl & UC_ENTRY_USED) {
		ff = UC_FF_NAMED;
		if (fl & UC_ENTRY_HOMES)
			ff |= UC_FF_HOMES;
		if (fl & UC_ENTRY_COLOR)
			ff |= UC_FF_COLOR;
		if (fl & UC_ENTRY_REPLICA)
			ff |= UC_FF_REPLICA;
	}
	atomic_store_explicit(&e->decision, gen << 8 | ff, memory_order_release);
	return ff;
}

/* A table with another salt was mapped: every file id is computed again on next use. */
void uc_fd_forget_ids(void)
{
	unsigned fd;

	for (fd = 0; fd < UC_FD_CACHE; fd++)
		if (atomic_load_explicit(&uc_fds[fd].state, memory_order_relaxed) == UC_FD_FILE)
			atomic_store_explicit(&uc_fds[fd].file_id, 0, memory_order_relaxed);
}
