/* SPDX-License-Identifier: MIT */
/*
 * uc_bench.h - what the files of uc_bench (`unicache bench shim`'s driver) share.
 *
 * uc_bench measures what a call pays under whatever LD_PRELOAD it runs with: blocks of
 * calls through the interposed function (the normal call through the PLT: the shim's
 * when libunicache.so is preloaded) alternate with blocks through libc's own function
 * (dlsym on libc.so.6), in samples of four blocks, W O O W or O W W O (uc_bench_run.c:
 * why); the added cost is the median over samples of the paired difference, with a
 * distribution-free 95 % interval. Under libuc_null.so the same run is the control: the
 * method's own zero.
 *
 * One concern per file:
 *   uc_bench.c         the entry point: subcommands `cell`, `spawn`, their options
 *   uc_bench_budget.c  `budget`: the shim's budgets, met or not (the guest package's gate)
 *   uc_bench_run.c     alternating blocks, the clock, pinning, the statistics, JSON
 *   uc_bench_libc.c    libc's own functions (the "without" path)
 *   uc_bench_file.c    the file cells: read, pread, readv, fread; seq and reread
 *   uc_bench_chan.c    the pipe and socket cells: write + read
 *   uc_bench_files.c   the files cell: open, fstat, read to EOF, close, file after file
 *   uc_bench_spawn.c   process-level alternation: posix_spawn + wait under two preloads
 */
#ifndef UC_BENCH_H
#define UC_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

/* a block of `calls` calls on one path; its elapsed ns (clock around the calls only), or
 * < 0 when a call failed (the cell is then wrong, not slow) */
typedef double (*ucb_block_fn)(void *ctx, int calls);

enum { UCB_WITH = 0, UCB_WITHOUT = 1 };

/* the two paths of one cell: [UCB_WITH] through the PLT, [UCB_WITHOUT] through libc */
struct ucb_pair {
	ucb_block_fn block[2];
	void *ctx[2];
	int calls; /* calls per block */
};

/* ns per call of each path in each sample (its two blocks), in sample order */
struct ucb_samples {
	double *ns[2];
	size_t n, cap;
};

/* one cell's figures (ns per call, or whatever unit the samples are in) */
struct ucb_summary {
	double added, ci_low, ci_high; /* median of with - without, its 95 % interval */
	double with_ns, without_ns;    /* medians of each path */
	double ratio;                  /* without / with */
	size_t blocks;
};

/* uc_bench_run.c */
uint64_t ucb_now_ns(void);
int ucb_pin(int cpu); /* -1: the highest CPU this process may run on */
int ucb_alternate(const struct ucb_pair *pair, double seconds, struct ucb_samples *out);
int ucb_add_sample(struct ucb_samples *s, double with_ns, double without_ns);
void ucb_samples_free(struct ucb_samples *s);
int ucb_summarize(const struct ucb_samples *s, struct ucb_summary *out);
void ucb_print_summary(FILE *out, const struct ucb_summary *sum, const char *unit);
void ucb_print_blocks(FILE *out, const struct ucb_samples *s);

/* uc_bench_libc.c */
struct ucb_libc {
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*pread)(int, void *, size_t, off_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	off_t (*lseek)(int, off_t, int);
	ssize_t (*write)(int, const void *, size_t);
	size_t (*fread)(void *, size_t, size_t, FILE *);
	int (*fseek)(FILE *, long, int);
	int (*open)(const char *, int, ...);
	int (*fstat)(int, struct stat *);
	int (*close)(int);
};
extern struct ucb_libc ucb_libc;
int ucb_libc_init(void);
int ucb_interposed(const char *name); /* 1 when the PLT's `name` is not libc's */

/* uc_bench_file.c */
enum ucb_kind { UCB_READ, UCB_PREAD, UCB_READV, UCB_FREAD };
enum ucb_pattern { UCB_SEQ, UCB_REREAD };
struct ucb_stream {
	int fd;
	FILE *fp;
	void *stdio_buf; /* fp's buffer: page-aligned, as the destination is */
	void *buf;
	size_t size;     /* bytes per call */
	off_t file_size;
	off_t pos;       /* where the next seq call reads */
	struct iovec iov;
};
struct ucb_file_cell {
	struct ucb_stream stream[2]; /* one open file description per path */
	struct ucb_pair pair;
};
extern const char *const ucb_kind_names[4];
extern const char *const ucb_pattern_names[2];
#define UCB_SEQ_BLOCK_BYTES (1 << 20) /* a seq block: 4 whole 256 KiB chunks */
#define UCB_REREAD_CALLS 64
int ucb_file_open(struct ucb_file_cell *c, const char *path, enum ucb_kind kind,
		  enum ucb_pattern pattern, size_t size);
void ucb_file_close(struct ucb_file_cell *c);

/* uc_bench_chan.c */
enum ucb_chan_kind { UCB_PIPE, UCB_SOCKET };
struct ucb_chan {
	int fds[2]; /* written to [1], read from [0] */
	void *buf;
	size_t size;
};
struct ucb_chan_cell {
	struct ucb_chan chan;
	struct ucb_pair pair;
};
extern const char *const ucb_chan_names[2];
#define UCB_CHAN_CALLS 64
int ucb_chan_open(struct ucb_chan_cell *c, enum ucb_chan_kind kind, size_t size);
void ucb_chan_close(struct ucb_chan_cell *c);

/* uc_bench_files.c */
struct ucb_files {
	char **paths;    /* the directory's regular files, in name order */
	size_t npaths;
	size_t next;     /* the next block's first file: both paths share it (uc_bench_files.c) */
	void *buf;       /* page-aligned, rounded up to whole pages, at least size bytes */
	size_t buf_size;
	off_t size;      /* every file's size */
};
struct ucb_files_cell {
	struct ucb_files files;
	struct ucb_pair pair;
};
#define UCB_FILES_CALLS 32 /* files per block */
#define UCB_FILES_MAX 4096 /* files a directory may hold */
int ucb_files_open(struct ucb_files_cell *c, const char *dir, size_t size);
void ucb_files_close(struct ucb_files_cell *c);

/* the subcommands */
int ucb_cmd_budget(int argc, char **argv);
int ucb_cmd_spawn(int argc, char **argv);

#endif
