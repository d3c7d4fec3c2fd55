/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_file.c - the file cells: read, pread, readv (one iovec) and stdio fread of a
 * page-cached file, in two patterns:
 *   seq     sequential calls through the file, chunk-aligned: a block reads
 *           UCB_SEQ_BLOCK_BYTES (whole 256 KiB chunks, so work the shim does once per chunk
 *           falls inside every block in its true proportion); at EOF the next block starts
 *           again from 0 (the rewind is outside the clock);
 *   reread  the same first bytes again: lseek(0) + read, pread at 0, lseek(0) + readv,
 *           fseek(0) + fread; UCB_REREAD_CALLS per block, each call with its seek.
 * Each path has its own open file description (its own offset) and runs the same loop;
 * the loops differ only in what they call: the PLT's function (the shim's when it is
 * preloaded) or libc's (uc_bench_libc.c). They are written once, as macros, so that the
 * two cannot drift apart.
 *
 * stdio: glibc's fread reads through its internal read, which no preload can interpose,
 * so under the shim fread is expected to cost about nothing more; it is measured anyway.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const ucb_kind_names[4] = {"read", "pread", "readv", "fread"};
const char *const ucb_pattern_names[2] = {"seq", "reread"};

#define PLT(fn) fn
#define LIBC(fn) ucb_libc.fn

/* before a seq block, outside the clock: back to 0 when the block would pass EOF */
static int seq_rewind(struct ucb_stream *s, int calls, int path)
{
	if (s->pos + (off_t)calls * (off_t)s->size <= s->file_size)
		return 0;
	s->pos = 0;
	if (s->fp)
		return path == UCB_WITH ? fseek(s->fp, 0, SEEK_SET) : LIBC(fseek)(s->fp, 0, SEEK_SET);
	return (path == UCB_WITH ? lseek(s->fd, 0, SEEK_SET) : LIBC(lseek)(s->fd, 0, SEEK_SET)) == 0
		       ? 0
		       : -1;
}

/* one block function: `calls` times CALL (true on success), timed */
#define UCB_BLOCK(name, path, SEQ, CALL)                                                     \
	static double name(void *ctx, int calls)                                             \
	{                                                                                    \
		struct ucb_stream *s = ctx;                                                  \
		uint64_t t0;                                                                 \
                                                                                             \
		if (SEQ && seq_rewind(s, calls, path) != 0)                                  \
			return -1;                                                           \
		t0 = ucb_now_ns();                                                           \
		for (int i = 0; i < calls; i++)                                              \
			if (!(CALL))                                                         \
				return -1;                                                   \
		s->pos += (off_t)calls * (off_t)s->size;                                     \
		return (double)(ucb_now_ns() - t0);                                          \
	}

#define FULL(expr) ((expr) == (ssize_t)s->size)

/* the eight loops, once for a path P (PLT or LIBC) */
#define UCB_FILE_BLOCKS(P, sfx, path)                                                        \
	UCB_BLOCK(seq_read_##sfx, path, 1, FULL(P(read)(s->fd, s->buf, s->size)))            \
	UCB_BLOCK(seq_pread_##sfx, path, 1,                                                  \
		  FULL(P(pread)(s->fd, s->buf, s->size, s->pos + (off_t)i * (off_t)s->size))) \
	UCB_BLOCK(seq_readv_##sfx, path, 1, FULL(P(readv)(s->fd, &s->iov, 1)))               \
	UCB_BLOCK(seq_fread_##sfx, path, 1, P(fread)(s->buf, 1, s->size, s->fp) == s->size)  \
	UCB_BLOCK(reread_read_##sfx, path, 0,                                                \
		  P(lseek)(s->fd, 0, SEEK_SET) == 0 && FULL(P(read)(s->fd, s->buf, s->size)))  \
	UCB_BLOCK(reread_pread_##sfx, path, 0, FULL(P(pread)(s->fd, s->buf, s->size, 0)))    \
	UCB_BLOCK(reread_readv_##sfx, path, 0,                                               \
		  P(lseek)(s->fd, 0, SEEK_SET) == 0 && FULL(P(readv)(s->fd, &s->iov, 1)))      \
	UCB_BLOCK(reread_fread_##sfx, path, 0,                                               \
		  P(fseek)(s->fp, 0, SEEK_SET) == 0 &&                                         \
			  P(fread)(s->buf, 1, s->size, s->fp) == s->size)

UCB_FILE_BLOCKS(PLT, plt, UCB_WITH)
UCB_FILE_BLOCKS(LIBC, libc, UCB_WITHOUT)

/* [kind][pattern][path] */
static const ucb_block_fn blocks[4][2][2] = {
	[UCB_READ] = {{seq_read_plt, seq_read_libc}, {reread_read_plt, reread_read_libc}},
	[UCB_PREAD] = {{seq_pread_plt, seq_pread_libc}, {reread_pread_plt, reread_pread_libc}},
	[UCB_READV] = {{seq_readv_plt, seq_readv_libc}, {reread_readv_plt, reread_readv_libc}},
	[UCB_FREAD] = {{seq_fread_plt, seq_fread_libc}, {reread_fread_plt, reread_fread_libc}},
};

/* the whole file once through this path's read: the page cache, and the shim's lookups */
static int warm(struct ucb_stream *s, int path)
{
	for (off_t off = 0; off < s->file_size;) {
		ssize_t r = path == UCB_WITH ? read(s->fd, s->buf, s->size)
					     : LIBC(read)(s->fd, s->buf, s->size);

		if (r <= 0)
			return -1;
		off += r;
	}
	return (path == UCB_WITH ? lseek(s->fd, 0, SEEK_SET) : LIBC(lseek)(s->fd, 0, SEEK_SET)) == 0
		       ? 0
		       : -1;
}

/*
 * fread copies out of the stream's buffer. malloc would place the two streams' buffers at
 * different offsets within a page from the destination, and copies whose source and
 * destination sit at nearly the same offset within a page run slower (4K aliasing): about
 * 8 ns per 512 B fread against one stream and not the other, under no preload at all. So
 * both buffers are page-aligned, of glibc's default size for a file (its st_blksize).
 */
static int open_stdio(struct ucb_stream *s)
{
	struct stat st;

	if (fstat(s->fd, &st) != 0 || st.st_blksize <= 0 ||
	    posix_memalign(&s->stdio_buf, 4096, (size_t)st.st_blksize) != 0)
		return -1;
	s->fp = fdopen(s->fd, "r");
	return s->fp && setvbuf(s->fp, s->stdio_buf, _IOFBF, (size_t)st.st_blksize) == 0 ? 0
											  : -1;
}

int ucb_file_open(struct ucb_file_cell *c, const char *path, enum ucb_kind kind,
		  enum ucb_pattern pattern, size_t size)
{
	size_t seq_calls = size < UCB_SEQ_BLOCK_BYTES ? UCB_SEQ_BLOCK_BYTES / size : 1;
	void *buf = NULL;
	struct stat st;

	memset(c, 0, sizeof(*c));
	c->stream[0].fd = c->stream[1].fd = -1;
	if (size == 0 || posix_memalign(&buf, 4096, size < 4096 ? 4096 : size) != 0)
		return -1;
	memset(buf, 0, size);
	for (int p = 0; p < 2; p++) {
		struct ucb_stream *s = &c->stream[p];

		s->buf = buf;
		s->size = size;
		s->iov.iov_base = buf;
		s->iov.iov_len = size;
		s->fd = open(path, O_RDONLY); /* the PLT's open on both: the shim knows both fds */
		if (s->fd < 0 || fstat(s->fd, &st) != 0)
			goto fail;
		s->file_size = st.st_size;
		if ((off_t)(seq_calls * size) > s->file_size || warm(s, p) != 0)
			goto fail;
		if (kind == UCB_FREAD && open_stdio(s) != 0)
			goto fail;
	}
	c->pair.calls = pattern == UCB_SEQ ? (int)seq_calls : UCB_REREAD_CALLS;
	for (int p = 0; p < 2; p++) {
		c->pair.block[p] = blocks[kind][pattern][p];
		c->pair.ctx[p] = &c->stream[p];
	}
	return 0;
fail:
	ucb_file_close(c);
	return -1;
}

void ucb_file_close(struct ucb_file_cell *c)
{
	void *buf = c->stream[0].buf;

	for (int p = 0; p < 2; p++) {
		struct ucb_stream *s = &c->stream[p];

		if (s->fp)
			fclose(s->fp);
		else if (s->fd >= 0)
			close(s->fd);
		free(s->stdio_buf);
		s->stdio_buf = NULL;
		s->fp = NULL;
		s->fd = -1;
	}
	free(buf);
	c->stream[0].buf = c->stream[1].buf = NULL;
}
