/* SPDX-License-Identifier: MIT */
/*
 * uc_sandbox.c - may the mechanisms (migration, colors, replicas, the mmap path, a page's
 * node) make their system calls in this process? A program under a seccomp filter allows
 * only what it makes itself, and a filter's default action may kill: there the shim only
 * counts (no system call of its own), unless UNICACHE_SECCOMP=act says the operator
 * allowed the mechanisms' calls in that filter. Asked once, when a mechanism first could
 * act or the shim must stat a descriptor; a filter the program installs later through
 * libc's prctl or syscall turns them off from then on. The same answer chooses how the
 * shim stats a descriptor (uc_fstat).
 */
#include "uc_shim.h"

#include <linux/seccomp.h>
#include <sys/prctl.h>

/* Seccomp mode of this process from /proc/self/status ("Seccomp:\t2"); -1 unknown. */
static int uc_seccomp_mode(void)
{
	char buf[4096], *p;
	ssize_t n;
	int fd = UC_REAL(open)("/proc/self/status", O_RDONLY | O_CLOEXEC), mode = -1;

	if (fd < 0)
		return -1;
	n = UC_REAL(read)(fd, buf, sizeof(buf) - 1);
	UC_REAL(close)(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strstr(buf, "\nSeccomp:");
	if (p)
		mode = (int)strtol(p + 9, NULL, 10);
	return mode;
}

int uc_may_act_slow(void)
{
	int saved = errno, mode = uc_seccomp_mode(), act;

	/* unknown (no /proc in this namespace): as if filtered, the safe side */
	act = mode == 0 || (mode == SECCOMP_MODE_FILTER && uc.act_seccomp) ? UC_ACT_YES : UC_ACT_NO;
	atomic_store_explicit(&uc.act, act, memory_order_relaxed);
	atomic_store_explicit(&uc.unfiltered, mode == 0 ? UC_ACT_YES : UC_ACT_NO,
			      memory_order_relaxed);
	errno = saved;
	return act == UC_ACT_YES;
}

/* A filter installed from now on: strict mode never lets anything act; a filter only with
 * UNICACHE_SECCOMP=act. */
static void uc_filtered(int strict)
{
	atomic_store_explicit(&uc.unfiltered, UC_ACT_NO, memory_order_relaxed);
	atomic_store_explicit(&uc.act, !strict && uc.act_seccomp ? UC_ACT_YES : UC_ACT_NO,
			      memory_order_relaxed);
}

/*
 * The shim's own fstat of a descriptor whose file it must know and whose program never
 * said (uc_fdcache.c uc_fd_identify), made only where uc_may_act allows the shim its own
 * calls. The classic fstat system call costs the kernel about a third of what glibc's
 * fstat costs (newfstatat with an empty path, which copies and walks a name): some 1,000
 * guest instructions against 2,700 in a Debian 12 guest (docs/PERFORMANCE.md, "What an
 * open costs"). A filter written for today's glibc may allow newfstatat and not fstat, so
 * the classic call is made only in a process known to run under no filter at all (the
 * status uc_may_act read); a filter installed later through libc turns it off
 * (uc_filtered).
 */
int uc_fstat(int fd, struct stat *st)
{
#if defined(SYS_fstat) && defined(__x86_64__) /* glibc's struct stat is the kernel's there */
	if (atomic_load_explicit(&uc.unfiltered, memory_order_relaxed) == UC_ACT_YES)
		return (int)UC_REAL(syscall)(SYS_fstat, fd, (long)(uintptr_t)st, 0, 0, 0, 0);
#endif
	return uc_real_fstat(fd, st);
}

UC_EXPORT int prctl(int option, ...)
{
	unsigned long a2, a3, a4, a5;
	va_list ap;

	va_start(ap, option);
	a2 = va_arg(ap, unsigned long);
	a3 = va_arg(ap, unsigned long);
	a4 = va_arg(ap, unsigned long);
	a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_SECCOMP)
		uc_filtered(a2 == SECCOMP_MODE_STRICT);
	return UC_REAL(prctl)(option, a2, a3, a4, a5);
}

/* libc's syscall(): the way libseccomp installs a filter (SYS_seccomp) */
UC_EXPORT long syscall(long nr, ...)
{
	long a[6];
	va_list ap;
	int i;

	va_start(ap, nr);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (nr == SYS_seccomp &&
	    (a[0] == SECCOMP_SET_MODE_FILTER || a[0] == SECCOMP_SET_MODE_STRICT))
		uc_filtered(a[0] == SECCOMP_SET_MODE_STRICT);
	return UC_REAL(syscall)(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
