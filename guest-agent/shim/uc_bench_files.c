/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_files.c - the files cell: what a program that reads many small files (tar, a web
 * server; issue #33) pays per file. One call is one whole file, as such a program handles
 * it: open(O_RDONLY | O_CLOEXEC), fstat, read into a page-aligned buffer of at least the
 * file's size until read returns 0 (so a file of SIZE bytes is one read of its data and
 * the read that finds EOF), close. The unit is ns per file.
 *
 * The files are the regular files of one directory (the caller makes them, all of SIZE
 * bytes, page-cached), taken in name order, round and round. The shim's work here is per
 * open more than per byte (learning the file, the open sample's draw, a counted file's run
 * sent at close), which is why the cell exists beside the read cells; under an open sample
 * (the table's OpenSample) most such opens should pass through almost untouched.
 *
 * Both paths share one cursor into the directory: every block opens the files after the
 * ones the block before it opened, so no block finds its files' inodes and pages warm
 * from the block just before it, and which files either path gets follows the samples'
 * random order. The two loops differ only in what they call (the PLT's functions: the
 * shim's when it is preloaded; or libc's, uc_bench_libc.c); they are one macro, so that
 * they cannot drift apart.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLT(fn) fn
#define LIBC(fn) ucb_libc.fn

/* one whole file through path P: 0 when every call succeeded and it read the whole file */
#define UCB_ONE_FILE(name, P)                                                                \
	static int name(const struct ucb_files *f, const char *path)                         \
	{                                                                                    \
		struct stat st;                                                              \
		off_t got = 0;                                                               \
		ssize_t r = -1;                                                              \
		int fd = P(open)(path, O_RDONLY | O_CLOEXEC);                                \
                                                                                             \
		if (fd < 0)                                                                  \
			return -1;                                                           \
		if (P(fstat)(fd, &st) == 0)                                                  \
			while ((r = P(read)(fd, f->buf, f->buf_size)) > 0)                   \
				got += r;                                                    \
		if (P(close)(fd) != 0 || r != 0 || got != st.st_size || got != f->size)     \
			return -1;                                                           \
		return 0;                                                                    \
	}

UCB_ONE_FILE(one_file_plt, PLT)
UCB_ONE_FILE(one_file_libc, LIBC)

/* `calls` files from the shared cursor on, timed */
#define UCB_FILES_BLOCK(name, one)                                                           \
	static double name(void *ctx, int calls)                                             \
	{                                                                                    \
		struct ucb_files *f = ctx;                                                   \
		uint64_t t0 = ucb_now_ns();                                                  \
                                                                                             \
		for (int i = 0; i < calls; i++) {                                            \
			if (one(f, f->paths[f->next]) != 0)                                  \
				return -1;                                                   \
			f->next = f->next + 1 == f->npaths ? 0 : f->next + 1;                \
		}                                                                            \
		return (double)(ucb_now_ns() - t0);                                          \
	}

UCB_FILES_BLOCK(files_plt, one_file_plt)
UCB_FILES_BLOCK(files_libc, one_file_libc)

/* the directory's entries but . and .. (and any other dot file: not the caller's) */
static int visible(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* dir/name, stat'ed: 0 when it is a regular file of exactly f->size bytes */
static int add_file(struct ucb_files *f, size_t i, const char *dir, const char *name)
{
	struct stat st;

	if (asprintf(&f->paths[i], "%s/%s", dir, name) < 0) {
		f->paths[i] = NULL; /* asprintf leaves it undefined */
		return -1;
	}
	return stat(f->paths[i], &st) == 0 && S_ISREG(st.st_mode) && st.st_size == f->size ? 0
											      : -1;
}

/* the directory's files, in name order */
static int list_files(struct ucb_files *f, const char *dir)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, visible, alphasort), rc = -1;

	if (n >= 1 && n <= UCB_FILES_MAX && (f->paths = calloc((size_t)n, sizeof(char *)))) {
		f->npaths = (size_t)n; /* zeroed: ucb_files_close frees what is set */
		rc = 0;
	}
	for (int i = 0; i < n; i++) {
		if (rc == 0 && add_file(f, (size_t)i, dir, names[i]->d_name) != 0)
			rc = -1;
		free(names[i]);
	}
	free(names);
	return rc;
}

int ucb_files_open(struct ucb_files_cell *c, const char *dir, size_t size)
{
	struct ucb_files *f = &c->files;

	memset(c, 0, sizeof(*c));
	f->size = (off_t)size;
	f->buf_size = (size + 4095) & ~(size_t)4095;
	if (size == 0 || posix_memalign(&f->buf, 4096, f->buf_size) != 0) {
		f->buf = NULL;
		return -1;
	}
	memset(f->buf, 0, f->buf_size);
	if (list_files(f, dir) != 0)
		goto fail;
	/* every file once through each path, untimed: the page cache, the dentries, and what
	 * the shim learns on its first open of a file */
	for (size_t i = 0; i < f->npaths; i++)
		if (one_file_plt(f, f->paths[i]) != 0 || one_file_libc(f, f->paths[i]) != 0)
			goto fail;
	c->pair.calls = UCB_FILES_CALLS;
	c->pair.block[UCB_WITH] = files_plt;
	c->pair.block[UCB_WITHOUT] = files_libc;
	c->pair.ctx[UCB_WITH] = c->pair.ctx[UCB_WITHOUT] = f;
	return 0;
fail:
	ucb_files_close(c);
	return -1;
}

void ucb_files_close(struct ucb_files_cell *c)
{
	struct ucb_files *f = &c->files;

	for (size_t i = 0; i < f->npaths; i++)
		free(f->paths[i]);
	free(f->paths);
	free(f->buf);
	memset(c, 0, sizeof(*c));
}
