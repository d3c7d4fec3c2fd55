/* SPDX-License-Identifier: MIT */
/*
 * uc_sandbox.c - may the mechanisms (migration, colors, replicas, the mmap path, a page's
 * node) make their system calls in this process? A program under a seccomp filter allows
 * only what it makes itself, and a filter's default action may kill: there the shim only
 * counts (no system call of its own), unless UNICACHE_SECCOMP=act says the operator
 * allowed the mechanisms' calls in that filter. Asked once, when a mechanism first could
 * act; a filter the program installs later through libc's prctl or syscall turns them off
 * from then on.
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
	errno = saved;
	return act == UC_ACT_YES;
}

/* A filter installed from now on: strict mode never lets anything act; a filter only with
 * UNICACHE_SECCOMP=act. */
static void uc_filtered(int strict)
{
	atomic_store_explicit(&uc.act, !strict && uc.act_seccomp ? UC_ACT_YES : UC_ACT_NO,
			      memory_order_relaxed);
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
