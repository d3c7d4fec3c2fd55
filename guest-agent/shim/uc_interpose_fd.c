/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_fd.c - the interposed calls that move an fd's offset or make or reuse an fd
 * (lseek, close, dup*, open*, creat*, pipe*, socket*, accept*): they keep the fd cache
 * (uc_fdcache.c) honest.
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

/* fds[0] and fds[1] are new when the call succeeded (pipe*, socketpair) */
static inline void uc_fd_forget_pair(int r, const int fds[2])
{
	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
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

/* the families: a call that returns a new fd (real function in uc_real.field) */
#define UC_FD_NEW(name, field, params, args)                                       \
	UC_FD_WRAP(int, name, field, params, args, , uc_fd_forget(r))
/* open* (variadic: the mode is passed on as the last argument) */
#define UC_FD_OPEN(name, params, args)                                             \
	UC_FD_WRAP(int, name, name, params, args, UC_OPEN_MODE, uc_fd_forget(r))
/* a call that makes two fds in fds[2] */
#define UC_FD_PAIR(name, params, args)                                             \
	UC_FD_WRAP(int, name, name, params, args, , uc_fd_forget_pair(r, fds))
/* dup2, dup3: nfd is reused, whatever the call returns */
#define UC_FD_REUSE(name, params, args)                                            \
	UC_FD_WRAP(int, name, name, params, args, , uc_fd_forget(nfd))

/* offsets and closing */
UC_FD_WRAP(off_t, lseek, lseek, (int fd, off_t off, int whence), (fd, off, whence), ,
	   if (r >= 0) uc_fd_advance(fd, (int64_t)r))
UC_FD_WRAP(off64_t, lseek64, lseek64, (int fd, off64_t off, int whence), (fd, off, whence), ,
	   if (r >= 0) uc_fd_advance(fd, (int64_t)r))
UC_FD_WRAP(int, close, close, (int fd), (fd), uc_fd_forget(fd), )

/* fds made or reused */
UC_FD_NEW(dup, dup, (int fd), (fd))
UC_FD_REUSE(dup2, (int fd, int nfd), (fd, nfd))
UC_FD_REUSE(dup3, (int fd, int nfd, int flags), (fd, nfd, flags))
UC_FD_OPEN(open, (const char *path, int flags, ...), (path, flags, mode))
UC_FD_OPEN(open64, (const char *path, int flags, ...), (path, flags, mode))
UC_FD_OPEN(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
UC_FD_OPEN(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
UC_FD_NEW(__open_2, open_2, (const char *path, int flags), (path, flags))
UC_FD_NEW(__open64_2, open64_2, (const char *path, int flags), (path, flags))
UC_FD_NEW(creat, creat, (const char *path, mode_t mode), (path, mode))
UC_FD_NEW(creat64, creat64, (const char *path, mode_t mode), (path, mode))
UC_FD_PAIR(pipe, (int fds[2]), (fds))
UC_FD_PAIR(pipe2, (int fds[2], int flags), (fds, flags))
UC_FD_NEW(socket, socket, (int domain, int type, int proto), (domain, type, proto))
UC_FD_PAIR(socketpair, (int domain, int type, int proto, int fds[2]), (domain, type, proto, fds))
UC_FD_NEW(accept, accept, (int fd, struct sockaddr *addr, socklen_t *len), (fd, addr, len))
UC_FD_NEW(accept4, accept4, (int fd, struct sockaddr *addr, socklen_t *len, int flags),
	  (fd, addr, len, flags))
