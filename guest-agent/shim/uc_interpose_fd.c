/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_fd.c - the interposed calls that move an fd's offset or make or reuse an fd
 * (lseek, close, dup*, open*, creat*, fopen*, pipe*, socket*, accept*): they keep the fd
 * cache (uc_fdcache.c) honest. A file opened through them is OPENED here, with no system
 * call: a read never makes one of the shim's to learn what its fd is.
 *
 * Every one is the real call plus one step on the fd cache, so they are all made by one
 * generator, UC_FD_WRAP, through the four families below; each line of the list at the
 * end is one exported function.
 */
#include "uc_shim.h"

/*
 * UC_FD_WRAP(type, name, field, params, args, before, after) defines the exported
 *
 *	type name params { before; type r = <real name> args; after; return r; }
 *
 * where <real name> is uc_real.field, looked up as the symbol "name" on first use
 * (UC_REAL_SYM). `before` and `after` are statements (or nothing); `after` sees the
 * result as r and the parameters by their names.
 */
#define UC_FD_WRAP(type, name, field, params, args, before, after)                 \
	UC_EXPORT type name params                                                 \
	{                                                                          \
		before;                                                            \
		type r = UC_REAL_SYM(field, #name) args;                           \
		after;                                                             \
		return r;                                                          \
	}

/* A descriptor that is not a file (pipe*, socket*, accept*): every call on it passes. */
static inline void uc_fd_pass(int fd)
{
	if ((unsigned)fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].state, UC_FD_PASS, memory_order_release);
}

/* fds[0] and fds[1] are new when the call succeeded (pipe*, socketpair) */
static inline void uc_fd_pass_pair(int r, const int fds[2])
{
	if (r == 0) {
		uc_fd_pass(fds[0]);
		uc_fd_pass(fds[1]);
	}
}

/* A file descriptor just made with open `flags`: OPENED (no system call: its file is
 * learnt later, uc_fdcache.c) only while the shim is on; else the entry is cleared, so a
 * stale one never describes the number's new file. */
static inline void uc_fd_made(int fd, int flags)
{
	if (atomic_load_explicit(&uc.on, memory_order_relaxed) != UC_ON && !uc_activate()) {
		uc_fd_forget(fd);
		return;
	}
	if (!atomic_load_explicit(&uc.mapped, memory_order_acquire))
		(void)uc_retry_map(1); /* an agent started after this process */
	uc_fd_opened(fd, flags);
}

/* The stream's descriptor, when fopen* made one: it passes. glibc reads and writes a
 * stream through its internal read and write, which no preload sees, so classifying it
 * (three system calls) would buy nothing for the program's every fopen: a program's own
 * read on fileno() of a stream is not counted (docs/agent.md "What the shim cannot see").
 * The entry is still set, so a stale one never describes the number's new file. */
static inline void uc_fd_made_stream(FILE *f)
{
	int saved = errno;

	if (f)
		uc_fd_pass(fileno(f));
	errno = saved;
}

/* close: this thread's run on the descriptor and the runs waiting for its file go to the
 * counters while it is still open (its file, or a page's node, can be asked), then the
 * entry is forgotten. */
static inline void uc_fd_closing(int fd)
{
	if (atomic_load_explicit(&uc.on, memory_order_relaxed) == UC_ON) {
		uc_run_close(fd);
		uc_pend_close(fd);
	}
	uc_fd_forget(fd);
}

/* open* take a mode only with O_CREAT or O_TMPFILE; otherwise it is not read (0) */
static inline int uc_needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

#define UC_OPEN_MODE                                                               \
	mode_t mode = 0;                                                           \
	va_list ap;                                                                \
	if (uc_needs_mode(flags)) {                                                \
		va_start(ap, flags);                                               \
		mode = (mode_t)va_arg(ap, int);                                    \
		va_end(ap);                                                        \
	}

/* the families: a call that opens a new file descriptor with `flags` (real function in
 * uc_real.field) */
#define UC_FD_NEW(name, field, params, args, flags)                                \
	UC_FD_WRAP(int, name, field, params, args, , if (r >= 0) uc_fd_made(r, flags))
/* open* (variadic: the mode is passed on as the last argument) */
#define UC_FD_OPEN(name, params, args)                                             \
	UC_FD_WRAP(int, name, name, params, args, UC_OPEN_MODE, if (r >= 0) uc_fd_made(r, flags))
/* fopen*: a stream (its descriptor passes: uc_fd_made_stream) */
#define UC_FD_STREAM(name, params, args)                                           \
	UC_FD_WRAP(FILE *, name, name, params, args, , uc_fd_made_stream(r))
/* a call that makes a descriptor that is not a file */
#define UC_FD_SOCK(name, params, args)                                             \
	UC_FD_WRAP(int, name, name, params, args, , if (r >= 0) uc_fd_pass(r))
/* a call that makes two such descriptors in fds[2] */
#define UC_FD_PAIR(name, params, args)                                             \
	UC_FD_WRAP(int, name, name, params, args, , uc_fd_pass_pair(r, fds))
/* dup2, dup3: nfd now names fd's file whatever it named (when the call succeeded) */
#define UC_FD_REUSE(name, params, args)                                            \
	UC_FD_WRAP(int, name, name, params, args, if (fd != nfd) uc_fd_closing(nfd),    \
		   if (r >= 0) uc_fd_copy(fd, r))

/* offsets and closing */
UC_FD_WRAP(off_t, lseek, lseek, (int fd, off_t off, int whence), (fd, off, whence), ,
	   if (r >= 0) uc_fd_advance(fd, (int64_t)r))
UC_FD_WRAP(off64_t, lseek64, lseek64, (int fd, off64_t off, int whence), (fd, off, whence), ,
	   if (r >= 0) uc_fd_advance(fd, (int64_t)r))
UC_FD_WRAP(int, close, close, (int fd), (fd), uc_fd_closing(fd), )

/* close_range and closefrom close what the shim may know as files: forget them all */
static void uc_fd_closing_range(unsigned lo, unsigned hi)
{
	unsigned fd;

	if (lo >= UC_FD_CACHE)
		return;
	if (hi >= UC_FD_CACHE)
		hi = UC_FD_CACHE - 1;
	for (fd = lo; fd <= hi; fd++)
		if (atomic_load_explicit(&uc_fds[fd].state, memory_order_relaxed) != UC_FD_UNKNOWN)
			uc_fd_closing((int)fd);
}

UC_FD_WRAP(int, close_range, close_range, (unsigned lo, unsigned hi, int flags), (lo, hi, flags),
	   if (!(flags & CLOSE_RANGE_CLOEXEC)) uc_fd_closing_range(lo, hi), )
UC_EXPORT void closefrom(int lo)
{
	if (lo >= 0)
		uc_fd_closing_range((unsigned)lo, UC_FD_CACHE - 1);
	UC_REAL(closefrom)(lo);
}

/* O_DIRECT set on an open descriptor: its run goes to the counters, then it passes. */
static inline void uc_fd_direct(int fd)
{
	if (uc_fd_file(fd)) {
		uc_fd_closing(fd);
		uc_fd_pass(fd);
	}
}

/* fcntl's F_DUPFD*: the new descriptor names the same file; F_SETFL with O_DIRECT: the
 * descriptor passes from then on (its reads bypass the page cache, which unicache places).
 * Any other command: unchanged. Its one argument is an int or a pointer, passed on as a
 * word. */
#define UC_FCNTL(name)                                                              \
	UC_EXPORT int name(int fd, int cmd, ...)                                    \
	{                                                                           \
		uintptr_t arg;                                                      \
		va_list ap;                                                         \
		int r;                                                              \
		va_start(ap, cmd);                                                  \
		arg = va_arg(ap, uintptr_t);                                        \
		va_end(ap);                                                         \
		r = UC_REAL(name)(fd, cmd, arg);                                    \
		if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))           \
			uc_fd_copy(fd, r);                                          \
		else if (r >= 0 && cmd == F_SETFL && ((int)arg & O_DIRECT))         \
			uc_fd_direct(fd);                                           \
		return r;                                                           \
	}
UC_FCNTL(fcntl)
UC_FCNTL(fcntl64)

/* fds made or reused */
UC_FD_WRAP(int, dup, dup, (int fd), (fd), , if (r >= 0) uc_fd_copy(fd, r))
UC_FD_REUSE(dup2, (int fd, int nfd), (fd, nfd))
UC_FD_REUSE(dup3, (int fd, int nfd, int flags), (fd, nfd, flags))
UC_FD_OPEN(open, (const char *path, int flags, ...), (path, flags, mode))
UC_FD_OPEN(open64, (const char *path, int flags, ...), (path, flags, mode))
UC_FD_OPEN(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
UC_FD_OPEN(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
UC_FD_NEW(__open_2, open_2, (const char *path, int flags), (path, flags), flags)
UC_FD_NEW(__open64_2, open64_2, (const char *path, int flags), (path, flags), flags)
UC_FD_NEW(__openat_2, openat_2, (int dirfd, const char *path, int flags), (dirfd, path, flags),
	  flags)
UC_FD_NEW(__openat64_2, openat64_2, (int dirfd, const char *path, int flags),
	  (dirfd, path, flags), flags)
UC_FD_NEW(creat, creat, (const char *path, mode_t mode), (path, mode), O_WRONLY)
UC_FD_NEW(creat64, creat64, (const char *path, mode_t mode), (path, mode), O_WRONLY)
UC_FD_STREAM(fopen, (const char *path, const char *mode), (path, mode))
UC_FD_STREAM(fopen64, (const char *path, const char *mode), (path, mode))
UC_FD_STREAM(freopen, (const char *path, const char *mode, FILE *f), (path, mode, f))
UC_FD_STREAM(freopen64, (const char *path, const char *mode, FILE *f), (path, mode, f))
UC_FD_PAIR(pipe, (int fds[2]), (fds))
UC_FD_PAIR(pipe2, (int fds[2], int flags), (fds, flags))
UC_FD_SOCK(socket, (int domain, int type, int proto), (domain, type, proto))
UC_FD_PAIR(socketpair, (int domain, int type, int proto, int fds[2]), (domain, type, proto, fds))
UC_FD_SOCK(accept, (int fd, struct sockaddr *addr, socklen_t *len), (fd, addr, len))
UC_FD_SOCK(accept4, (int fd, struct sockaddr *addr, socklen_t *len, int flags),
	   (fd, addr, len, flags))
