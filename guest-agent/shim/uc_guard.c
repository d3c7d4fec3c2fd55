/* SPDX-License-Identifier: MIT */
/*
 * uc_guard.c - the fault guard of copies from mappings (the non-temporal path, replicas)
 * and of a caller's pointer read before the call (sendfile's offset): a SIGBUS or SIGSEGV
 * inside such a copy jumps back so the real call decides; any other fault goes to the
 * handler the program had.
 */
#include "uc_shim.h"

/* set around a copy from a mapping: a fault in it jumps to uc_jb */
UC_TLS int uc_in_copy;
UC_TLS sigjmp_buf uc_jb;

static struct sigaction uc_old_bus, uc_old_segv;
static _Atomic int uc_guard_state; /* 0 none, 1 installed, -1 failed */

static void uc_sig_handler(int sig, siginfo_t *si, void *ctx)
{
	struct sigaction *old = sig == SIGBUS ? &uc_old_bus : &uc_old_segv;

	if (uc_in_copy) {
		uc_in_copy = 0;
		siglongjmp(uc_jb, 1);
	}
	if (old->sa_flags & SA_SIGINFO) {
		if (old->sa_sigaction) {
			old->sa_sigaction(sig, si, ctx);
			return;
		}
	} else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	/* default or ignore: restore it and let the fault happen again under it */
	(void)sigaction(sig, old, NULL);
	if (si && si->si_code <= 0)
		(void)raise(sig);
}

int uc_guard_ready(void)
{
	struct sigaction sa, cur;
	int st = atomic_load(&uc_guard_state);

	if (st == 0) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = uc_sig_handler;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &uc_old_bus) < 0 ||
		    sigaction(SIGSEGV, &sa, &uc_old_segv) < 0) {
			atomic_store(&uc_guard_state, -1);
			return 0;
		}
		atomic_store(&uc_guard_state, 1);
		return 1;
	}
	if (st < 0)
		return 0;
	/* somebody may have replaced our handlers since: then stay off the mmap path */
	if (sigaction(SIGBUS, NULL, &cur) < 0 || cur.sa_sigaction != uc_sig_handler)
		return 0;
	if (sigaction(SIGSEGV, NULL, &cur) < 0 || cur.sa_sigaction != uc_sig_handler)
		return 0;
	return 1;
}

/* Copy n bytes from the caller's p into out under the guard; 1 when copied, 0 when p is not
 * readable (the real call then meets it and says EFAULT) or the guard cannot be set. */
int uc_guarded_load(const void *p, void *out, size_t n)
{
	if (!uc_guard_ready())
		return 0;
	if (sigsetjmp(uc_jb, 1) == 0) {
		*(volatile int *)&uc_in_copy = 1;
		__asm__ volatile("" ::: "memory");
		memcpy(out, p, n);
		__asm__ volatile("" ::: "memory");
		*(volatile int *)&uc_in_copy = 0;
		return 1;
	}
	uc_in_copy = 0;
	return 0;
}
