/* SPDX-License-Identifier: MIT */
/*
 * uc_interpose_fd.c - the interposed calls that move an fd's offset or make or reuse an fd
 * (lseek, close, dup*, open*, creat*, pipe*, socket*, accept*): they keep the fd cache
 * (uc_fdcache.c) honest.
 */
#include "uc_shim.h"

UC_EXPORT off_t lseek(int fd, off_t off, int whence)
{
	off_t r = UC_REAL(lseek)(fd, off, whence);

	if (r >= 0)
		uc_fd_advance(fd, (int64_t)r);
	return r;
}

UC_EXPORT off64_t lseek64(int fd, off64_t off, int whence)
{
	off64_t r = UC_REAL(lseek64)(fd, off, whence);

	if (r >= 0)
		uc_fd_advance(fd, (int64_t)r);
	return r;
}

UC_EXPORT int close(int fd)
{
	uc_fd_forget(fd);
	return UC_REAL(close)(fd);
}

UC_EXPORT int dup(int fd)
{
	int r = UC_REAL(dup)(fd);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int dup2(int fd, int nfd)
{
	int r = UC_REAL(dup2)(fd, nfd);

	uc_fd_forget(nfd);
	return r;
}

UC_EXPORT int dup3(int fd, int nfd, int flags)
{
	int r = UC_REAL(dup3)(fd, nfd, flags);

	uc_fd_forget(nfd);
	return r;
}

static inline int uc_needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

UC_EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(open)(path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(open64)(path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(openat)(dirfd, path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(openat64)(dirfd, path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int __open_2(const char *path, int flags)
{
	int r = UC_REAL_SYM(open_2, "__open_2")(path, flags);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int __open64_2(const char *path, int flags)
{
	int r = UC_REAL_SYM(open64_2, "__open64_2")(path, flags);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int creat(const char *path, mode_t mode)
{
	int r = UC_REAL(creat)(path, mode);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int creat64(const char *path, mode_t mode)
{
	int r = UC_REAL(creat64)(path, mode);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int pipe(int fds[2])
{
	int r = UC_REAL(pipe)(fds);

	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
	return r;
}

UC_EXPORT int pipe2(int fds[2], int flags)
{
	int r = UC_REAL(pipe2)(fds, flags);

	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
	return r;
}

UC_EXPORT int socket(int domain, int type, int proto)
{
	int r = UC_REAL(socket)(domain, type, proto);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int socketpair(int domain, int type, int proto, int fds[2])
{
	int r = UC_REAL(socketpair)(domain, type, proto, fds);

	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
	return r;
}

UC_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	int r = UC_REAL(accept)(fd, addr, len);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int r = UC_REAL(accept4)(fd, addr, len, flags);

	uc_fd_forget(r);
	return r;
}
