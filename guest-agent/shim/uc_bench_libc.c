/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_libc.c - libc's own functions: the "without" path of every cell.
 *
 * Looked up in libc.so.6 itself (dlopen RTLD_NOLOAD: the copy already loaded), never
 * RTLD_NEXT or RTLD_DEFAULT, which would find a preloaded library's function first.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <dlfcn.h>
#include <unistd.h>

struct ucb_libc ucb_libc;
static void *libc_handle;

/* a function pointer from dlsym (POSIX allows the conversion; -Wpedantic is not on) */
#define LIBC_FN(name) (ucb_libc.name = (__typeof__(ucb_libc.name))dlsym(libc_handle, #name))

int ucb_libc_init(void)
{
	libc_handle = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_NOW);
	if (!libc_handle)
		return -1;
	if (!LIBC_FN(read) || !LIBC_FN(pread) || !LIBC_FN(readv) || !LIBC_FN(lseek) ||
	    !LIBC_FN(write) || !LIBC_FN(fread) || !LIBC_FN(fseek) || !LIBC_FN(open) ||
	    !LIBC_FN(fstat) || !LIBC_FN(close))
		return -1;
	return 0;
}

int ucb_interposed(const char *name)
{
	void *seen = dlsym(RTLD_DEFAULT, name);

	return seen && libc_handle && seen != dlsym(libc_handle, name);
}
