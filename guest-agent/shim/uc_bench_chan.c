/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_chan.c - the pipe and socket cells: a call is a write of SIZE bytes and a read
 * of them back through the same pipe or AF_UNIX stream socketpair. Neither is a regular
 * file, so the shim should only have to tell that (its fd cache) and step aside: these
 * cells measure what that costs.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const char *const ucb_chan_names[2] = {"pipe", "socket"};

#define PLT(fn) fn
#define LIBC(fn) ucb_libc.fn

#define UCB_CHAN_BLOCK(name, P)                                                              \
	static double name(void *ctx, int calls)                                             \
	{                                                                                    \
		struct ucb_chan *ch = ctx;                                                   \
		ssize_t want = (ssize_t)ch->size;                                            \
		uint64_t t0 = ucb_now_ns();                                                  \
                                                                                             \
		for (int i = 0; i < calls; i++)                                              \
			if (P(write)(ch->fds[1], ch->buf, ch->size) != want ||               \
			    P(read)(ch->fds[0], ch->buf, ch->size) != want)                  \
				return -1;                                                   \
		return (double)(ucb_now_ns() - t0);                                          \
	}

UCB_CHAN_BLOCK(chan_plt, PLT)
UCB_CHAN_BLOCK(chan_libc, LIBC)

int ucb_chan_open(struct ucb_chan_cell *c, enum ucb_chan_kind kind, size_t size)
{
	memset(c, 0, sizeof(*c));
	c->chan.fds[0] = c->chan.fds[1] = -1;
	/* a pipe holds 64 KiB by default: a larger write would block with nobody reading */
	if (size == 0 || size > 65536 || posix_memalign(&c->chan.buf, 4096, size) != 0)
		return -1;
	memset(c->chan.buf, 0, size);
	c->chan.size = size;
	/* the PLT's pipe and socketpair: the shim sees the fds made, as an application's */
	if ((kind == UCB_PIPE ? pipe(c->chan.fds)
			      : socketpair(AF_UNIX, SOCK_STREAM, 0, c->chan.fds)) != 0) {
		ucb_chan_close(c);
		return -1;
	}
	c->pair.calls = UCB_CHAN_CALLS;
	c->pair.block[UCB_WITH] = chan_plt;
	c->pair.block[UCB_WITHOUT] = chan_libc;
	c->pair.ctx[UCB_WITH] = c->pair.ctx[UCB_WITHOUT] = &c->chan;
	return 0;
}

void ucb_chan_close(struct ucb_chan_cell *c)
{
	for (int i = 0; i < 2; i++)
		if (c->chan.fds[i] >= 0)
			close(c->chan.fds[i]);
	free(c->chan.buf);
	memset(c, 0, sizeof(*c));
	c->chan.fds[0] = c->chan.fds[1] = -1;
}
