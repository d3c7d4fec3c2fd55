/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_stat.c - the program's own stat of a descriptor (fstat, fstat64,
 * fstatat* and statx with AT_EMPTY_PATH and "", and the __fxstat* of programs built
 * against a glibc older than 2.33) tells the shim the file behind a descriptor it opened
 * without asking (OPENED, uc_fdcache.c), or behind fds 0-2: the real call's answer is read,
 * nothing is asked again. Most programs stat a file right after opening it (cat, grep, tar,
 * python's open, sqlite, a JVM's streams, Rust's fs::read), so for them knowing the file
 * costs nothing. Any other stat passes untouched; the caller's result and errno are the
 * real call's.
 */
#include "uc_shim.h"

/* glibc before 2.33 has no fstat function: its programs call __fxstat64 (version 1) */
#define UC_STAT_VER 1

/* The real fstat, whatever glibc this is. */
int uc_real_fstat(int fd, struct stat *st)
{
	uc_fstat_t f = UC_REAL(fstat);
	uc_fxstat_t fx;

	if (f)
		return f(fd, st);
	fx = UC_REAL_SYM(fxstat64, "__fxstat64");
	if (fx)
		return fx(UC_STAT_VER, fd, st);
	return (int)UC_REAL(syscall)(SYS_fstat, fd, (long)(uintptr_t)st, 0, 0, 0, 0);
}

/* after a stat of fd that returned r into st: the file, when the shim waits to know it
 * (unless the table's open sample leaves this open out: uc_fd_left_out) */
static inline int uc_stat_seen(int fd, int r, const struct stat *st)
{
	if (r == 0 && uc_fd_unknown_file(fd) && !uc_fd_left_out(fd, st))
		uc_fd_known(fd, st);
	return r;
}

/* a *at stat that names fd itself ("" with AT_EMPTY_PATH) */
static inline int uc_names_fd(const char *path, int flags)
{
	return (flags & AT_EMPTY_PATH) && path && !*path;
}

UC_EXPORT int fstat(int fd, struct stat *st)
{
	uc_fstat_t f = uc_real.fstat; /* glibc 2.33 and later: resolved, called directly */

	/* a descriptor the shim knows already (a program's second stat of its file), or one
	 * it never learns from a stat: libc's, by a tail call */
	if (__builtin_expect(f != NULL, 1) && !uc_fd_unknown_file(fd))
		return f(fd, st);
	return uc_stat_seen(fd, f ? f(fd, st) : uc_real_fstat(fd, st), st);
}

UC_EXPORT int fstat64(int fd, struct stat64 *st)
{
	uc_fstat_t f = UC_REAL_SYM(fstat64, "fstat64");
	/* x86_64 and the 64-bit ABIs: struct stat64 is struct stat */
	struct stat *s = (struct stat *)(void *)st;

	return uc_stat_seen(fd, f ? f(fd, s) : uc_real_fstat(fd, s), s);
}

/* fstatat of fd itself ("" with AT_EMPTY_PATH), in a frame of its own */
static __attribute__((noinline)) int uc_fstatat_learn(uc_fstatat_t f, int dirfd,
						       const char *path, struct stat *s, int flags)
{
	return uc_stat_seen(dirfd, f(dirfd, path, s, flags), s);
}

/* a path's stat (a program's lstat of each file it walks) is libc's, by a tail call */
#define UC_FSTATAT(name, type)                                                      \
	UC_EXPORT int name(int dirfd, const char *path, type *st, int flags)        \
	{                                                                           \
		struct stat *s = (struct stat *)(void *)st;                         \
		uc_fstatat_t f = UC_REAL_SYM(name, #name);                          \
		if (__builtin_expect(!f, 0)) {                                      \
			errno = ENOSYS;                                             \
			return -1;                                                  \
		}                                                                   \
		if (!uc_names_fd(path, flags))                                      \
			return f(dirfd, path, s, flags);                            \
		return uc_fstatat_learn(f, dirfd, path, s, flags);                  \
	}
UC_FSTATAT(fstatat, struct stat)
UC_FSTATAT(fstatat64, struct stat64)

#if defined(__x86_64__)
/* programs built against glibc before 2.33: __fxstat* (a compat symbol since) */
#define UC_FXSTAT(name, field, type)                                                \
	UC_EXPORT int name(int ver, int fd, type *st)                               \
	{                                                                           \
		struct stat *s = (struct stat *)(void *)st;                         \
		uc_fxstat_t f = UC_REAL_SYM(field, #name);                          \
		if (!f)                                                             \
			f = uc_real.field = (uc_fxstat_t)dlvsym(RTLD_NEXT, #name,   \
								"GLIBC_2.2.5");     \
		if (!f) {                                                           \
			errno = ENOSYS;                                             \
			return -1;                                                  \
		}                                                                   \
		return uc_stat_seen(fd, f(ver, fd, s), s);                          \
	}
UC_FXSTAT(__fxstat, fxstat, struct stat)
UC_FXSTAT(__fxstat64, fxstat64, struct stat64)
#endif

#ifdef STATX_INO
/* statx of fd itself: the file when the answer has its type and inode */
UC_EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask,
		    struct statx *stx)
{
	uc_statx_t f = UC_REAL(statx);
	struct stat st;
	int r;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	r = f(dirfd, path, flags, mask, stx);
	if (r != 0 || !uc_names_fd(path, flags) || !uc_fd_unknown_file(dirfd) ||
	    (stx->stx_mask & (STATX_TYPE | STATX_INO)) != (STATX_TYPE | STATX_INO))
		return r;
	memset(&st, 0, sizeof(st));
	st.st_mode = stx->stx_mode;
	st.st_dev = makedev(stx->stx_dev_major, stx->stx_dev_minor);
	st.st_ino = stx->stx_ino;
	st.st_size = stx->stx_mask & STATX_SIZE ? (off_t)stx->stx_size : -1;
	uc_fd_known(dirfd, &st);
	return r;
}
#endif
