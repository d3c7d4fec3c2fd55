/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest_check.c - `uc_selftest check SEED ITERS FILE...`: random reads through libc
 * (interposed when run under LD_PRELOAD) against the same reads made with raw syscalls on a
 * second open file description, comparing bytes, return value, errno and file offset (and
 * for sendfile into a pipe, the bytes sent and the offset it updates); then
 * the error cases (bad fds, write-only and directory fds, O_DIRECT, sendfile, bad vectors,
 * a pipe with EINTR).
 */
#include "uc_selftest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAXIOV 8

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = (rng_state += 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static long raw_lseek(int fd, long off, int wh)
{
	return syscall(SYS_lseek, fd, off, wh);
}

struct res {
	long ret;
	int err;
	long pos;
};

static long mismatches, ops;
static volatile int neg_one = -1;

static void fill(size_t n)
{
	memset(bufA, 0xa5, n);
	memset(bufB, 0xa5, n);
}

static void compare(const char *what, int fdA, int fdB, struct res a, struct res b, size_t n)
{
	ops++;
	if (fdA >= 0)
		a.pos = raw_lseek(fdA, 0, SEEK_CUR);
	if (fdB >= 0)
		b.pos = raw_lseek(fdB, 0, SEEK_CUR);
	if (a.ret != b.ret || a.err != b.err || a.pos != b.pos ||
	    memcmp(bufA, bufB, n) != 0) {
		mismatches++;
		fprintf(stderr,
			"MISMATCH %s: shim ret=%ld errno=%d pos=%ld, plain ret=%ld errno=%d pos=%ld, "
			"bytes %s\n",
			what, a.ret, a.err, a.pos, b.ret, b.err, b.pos,
			memcmp(bufA, bufB, n) ? "differ" : "equal");
	}
}

/* build matching iovecs over bufA and bufB */
static int make_iov(struct iovec *ia, struct iovec *ib, size_t *total)
{
	int cnt = 1 + (int)below(MAXIOV), i;
	size_t off = 0;

	for (i = 0; i < cnt; i++) {
		size_t len = below(4) == 0 ? below(64) : below(MAXBUF / MAXIOV / 2);

		ia[i].iov_base = bufA + off;
		ib[i].iov_base = bufB + off;
		ia[i].iov_len = ib[i].iov_len = len;
		off += len + below(16);
	}
	*total = off;
	return cnt;
}

/* the two pipes sendfile writes into (1 MiB each: a send never blocks) */
static int pipeA[2] = {-1, -1}, pipeB[2] = {-1, -1};

/* Empty a pipe into buf with raw reads; returns the bytes read. */
static size_t drain(int fd, unsigned char *buf, size_t cap)
{
	size_t got = 0;
	long k;

	while (got < cap && (k = syscall(SYS_read, fd, buf + got, cap - got)) > 0)
		got += (size_t)k;
	return got;
}

/* sendfile at the file position (offp NULL) or at an offset, into a pipe, read back */
static void sendfile_op(const char *what, int fdA, int fdB, long off, size_t n)
{
	struct res a = {0, 0, 0}, b = {0, 0, 0};
	off_t oa = (off_t)off, ob = (off_t)off;
	int at_pos = (int)below(2);

	if (n > (1u << 18))
		n = 1u << 18;
	fill(MAXBUF / 2);
	errno = 777;
	a.ret = sendfile(pipeA[1], fdA, at_pos ? NULL : &oa, n);
	a.err = errno;
	errno = 777;
	b.ret = syscall(SYS_sendfile, pipeB[1], fdB, at_pos ? NULL : &ob, n);
	b.err = errno;
	drain(pipeA[0], bufA, MAXBUF / 2);
	drain(pipeB[0], bufB, MAXBUF / 2);
	if (oa != ob) {
		fprintf(stderr, "MISMATCH %s sendfile offset %ld, plain %ld\n", what, (long)oa,
			(long)ob);
		mismatches++;
	}
	compare(what, fdA, fdB, a, b, MAXBUF / 2);
}

static void one_op(const char *path, int fdA, int fdB, long size)
{
	struct iovec ia[MAXIOV], ib[MAXIOV];
	struct res a = {0, 0, 0}, b = {0, 0, 0};
	size_t n, total;
	long off;
	int op = (int)below(10), cnt;
	char what[64];

	/* position both descriptions at the same offset; sometimes behind the shim's back */
	off = below(8) == 0 ? size + (long)below(10000) : (long)below((uint64_t)size + 1);
	if (below(2))
		(void)lseek(fdA, off, SEEK_SET);
	else
		(void)raw_lseek(fdA, off, SEEK_SET);
	(void)raw_lseek(fdB, off, SEEK_SET);
	n = below(3) == 0 ? below(4096) : below(MAXBUF / 2);
	if (below(6) == 0)
		off = below(2) ? -1 - (long)below(3) : off; /* negative offsets: EINVAL */
	snprintf(what, sizeof(what), "%s op=%d off=%ld n=%zu", strrchr(path, '/') + 1, op, off, n);
	switch (op) {
	case 0:
		fill(n);
		errno = 0;
		errno = 777;
		a.ret = read(fdA, bufA, n);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_read, fdB, bufB, n);
		b.err = errno;
		compare(what, fdA, fdB, a, b, n);
		break;
	case 1:
	case 2:
		fill(n);
		errno = 777;
		a.ret = op == 1 ? pread(fdA, bufA, n, off) : pread64(fdA, bufA, n, off);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_pread64, fdB, bufB, n, off);
		b.err = errno;
		compare(what, fdA, fdB, a, b, n);
		break;
	case 3:
		cnt = make_iov(ia, ib, &total);
		fill(total);
		errno = 777;
		a.ret = readv(fdA, ia, cnt);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_readv, fdB, ib, cnt);
		b.err = errno;
		compare(what, fdA, fdB, a, b, total);
		break;
	case 4:
	case 5:
		cnt = make_iov(ia, ib, &total);
		fill(total);
		errno = 777;
		a.ret = op == 4 ? preadv(fdA, ia, cnt, off) : preadv64(fdA, ia, cnt, off);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_preadv, fdB, ib, cnt, off, (long)((uint64_t)off >> 32));
		b.err = errno;
		compare(what, fdA, fdB, a, b, total);
		break;
	case 6:
	case 7:
		cnt = make_iov(ia, ib, &total);
		fill(total);
		if (below(2))
			off = -1; /* current position */
		errno = 777;
		a.ret = op == 6 ? preadv2(fdA, ia, cnt, off, 0) : preadv64v2(fdA, ia, cnt, off, 0);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_preadv2, fdB, ib, cnt, off, (long)((uint64_t)off >> 32), 0);
		b.err = errno;
		compare(what, fdA, fdB, a, b, total);
		break;
	case 8:
		if (pipeA[0] >= 0)
			sendfile_op(what, fdA, fdB, off, n);
		break;
	default: {
		/* a bad user buffer: the kernel answers EFAULT; the shim must too, not crash */
		void *bad = (void *)(uintptr_t)4096;

		errno = 777;
		a.ret = pread(fdA, bad, n ? n : 1, off < 0 ? 0 : off);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_pread64, fdB, bad, n ? n : 1, off < 0 ? 0 : off);
		b.err = errno;
		compare(what, fdA, fdB, a, b, 0);
		break;
	}
	}
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* descriptors that are not regular files, and errors */
static void error_cases(const char *path)
{
	struct res a = {0, 0, 0}, b = {0, 0, 0};
	struct iovec ia[1] = {{bufA, 16}}, ib[1] = {{bufB, 16}};
	struct sigaction sa;
	struct itimerval it;
	int p[2], fdw, fdd;

	/* bad fds */
	fill(64);
	errno = 777;
	a.ret = read(-1, bufA, 64);
	a.err = errno;
	errno = 777;
	b.ret = syscall(SYS_read, -1, bufB, 64);
	b.err = errno;
	compare("read bad fd -1", -1, -1, a, b, 64);
	errno = 777;
	a.ret = pread(987, bufA, 64, 0);
	a.err = errno;
	errno = 777;
	b.ret = syscall(SYS_pread64, 987, bufB, 64, 0);
	b.err = errno;
	compare("pread closed fd", -1, -1, a, b, 64);
	errno = 777;
	a.ret = readv(987, ia, 1);
	a.err = errno;
	errno = 777;
	b.ret = syscall(SYS_readv, 987, ib, 1);
	b.err = errno;
	compare("readv closed fd", -1, -1, a, b, 64);

	/* write-only and directory descriptors */
	fdw = open(path, O_WRONLY);
	fdd = open("/", O_RDONLY | O_DIRECTORY);
	if (fdw >= 0 && fdd >= 0) {
		errno = 777;
		a.ret = read(fdw, bufA, 64);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_read, fdw, bufB, 64);
		b.err = errno;
		compare("read O_WRONLY", -1, -1, a, b, 64);
		errno = 777;
		a.ret = pread(fdd, bufA, 64, 0);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_pread64, fdd, bufB, 64, 0);
		b.err = errno;
		compare("pread directory", -1, -1, a, b, 64);
	}
	if (fdw >= 0)
		close(fdw);
	if (fdd >= 0)
		close(fdd);

	/* O_DIRECT passes straight through (where the file system supports it) */
	fdw = open(path, O_RDONLY | O_DIRECT);
	fdd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_DIRECT, 0);
	if (fdw >= 0 && fdd >= 0) {
		fill(8192);
		errno = 777;
		a.ret = pread(fdw, bufA, 4096, 0);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_pread64, fdd, bufB, 4096, 0);
		b.err = errno;
		compare("pread O_DIRECT", fdw, fdd, a, b, 8192);
		errno = 777;
		a.ret = read(fdw, bufA + 1, 100); /* misaligned: EINVAL from the kernel */
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_read, fdd, bufB + 1, 100);
		b.err = errno;
		compare("read O_DIRECT misaligned", fdw, fdd, a, b, 8192);
	}
	if (fdw >= 0)
		close(fdw);
	if (fdd >= 0)
		close(fdd);

	/* sendfile: a bad offset pointer is the kernel's EFAULT (an unmapped one, and one the
	 * process maps without access: the shim reads a named file's offset under its fault
	 * guard), a bad fd its EBADF */
	fdw = open(path, O_RDONLY);
	if (fdw >= 0 && pipe(p) == 0) {
		struct stat fst;
		off_t o = 1;
		void *noaccess = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
				      0);
		int k;

		(void)fstat(fdw, &fst); /* as programs do: the shim learns the file (it is named) */
		for (k = 0; k < 2; k++) {
			off_t *bad = k == 0 || noaccess == MAP_FAILED ? (off_t *)(uintptr_t)4096
								      : (off_t *)noaccess;

			errno = 777;
			a.ret = sendfile(p[1], fdw, bad, 10);
			a.err = errno;
			errno = 777;
			b.ret = syscall(SYS_sendfile, p[1], fdw, bad, 10);
			b.err = errno;
			compare(k == 0 ? "sendfile bad offset pointer"
				       : "sendfile offset pointer without access", -1, -1, a, b, 0);
		}
		if (noaccess != MAP_FAILED)
			munmap(noaccess, 4096);
		errno = 777;
		a.ret = sendfile(p[1], 987, &o, 10);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_sendfile, p[1], 987, &o, 10);
		b.err = errno;
		compare("sendfile closed fd", -1, -1, a, b, 0);
		close(p[0]);
		close(p[1]);
	}
	if (fdw >= 0)
		close(fdw);

	/* invalid vectors */
	errno = 777;
	a.ret = readv(0, ia, neg_one);
	a.err = errno;
	errno = 777;
	b.ret = syscall(SYS_readv, 0, ib, neg_one);
	b.err = errno;
	compare("readv iovcnt -1", -1, -1, a, b, 64);
	errno = 777;
	a.ret = readv(0, (const struct iovec *)(uintptr_t)4096, 2);
	a.err = errno;
	errno = 777;
	b.ret = syscall(SYS_readv, 0, (const struct iovec *)(uintptr_t)4096, 2);
	b.err = errno;
	compare("readv bad iov", -1, -1, a, b, 64);

	/* a pipe passes straight through, including EINTR from a blocking read */
	if (pipe(p) == 0) {
		fill(64);
		if (write(p[1], "abcdabcd", 8) != 8)
			exit(2);
		errno = 777;
		a.ret = read(p[0], bufA, 4);
		a.err = errno;
		errno = 777;
		b.ret = syscall(SYS_read, p[0], bufB, 4);
		b.err = errno;
		compare("pipe read", -1, -1, a, b, 64);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_alarm; /* no SA_RESTART: the read fails with EINTR */
		sigaction(SIGALRM, &sa, NULL);
		memset(&it, 0, sizeof(it));
		it.it_value.tv_usec = 20000;
		setitimer(ITIMER_REAL, &it, NULL);
		errno = 777;
		a.ret = read(p[0], bufA, 4);
		a.err = errno;
		setitimer(ITIMER_REAL, &it, NULL);
		errno = 777;
		b.ret = syscall(SYS_read, p[0], bufB, 4);
		b.err = errno;
		compare("pipe read EINTR", -1, -1, a, b, 64);
		if (a.ret != -1 || a.err != EINTR) {
			fprintf(stderr, "MISMATCH expected EINTR from the blocked read\n");
			mismatches++;
		}
		close(p[0]);
		close(p[1]);
	}
}

int cmd_check(int argc, char **argv)
{
	int nfiles = argc - 4, i, *fa, *fb;
	long iters = atol(argv[3]), k, *sizes;

	rng_state = strtoull(argv[2], NULL, 0);
	if (nfiles < 1 || iters < 0)
		return 2;
	fa = calloc((size_t)nfiles, sizeof(int));
	fb = calloc((size_t)nfiles, sizeof(int));
	sizes = calloc((size_t)nfiles, sizeof(long));
	for (i = 0; i < nfiles; i++) {
		struct stat st;

		fa[i] = open(argv[4 + i], O_RDONLY);
		fb[i] = (int)syscall(SYS_openat, AT_FDCWD, argv[4 + i], O_RDONLY, 0);
		if (fa[i] < 0 || fb[i] < 0 || fstat(fa[i], &st) < 0) {
			perror(argv[4 + i]);
			return 2;
		}
		sizes[i] = (long)st.st_size;
	}
	if (pipe2(pipeA, O_NONBLOCK) < 0 || pipe2(pipeB, O_NONBLOCK) < 0 ||
	    fcntl(pipeA[1], F_SETPIPE_SZ, 1 << 20) < 0 || fcntl(pipeB[1], F_SETPIPE_SZ, 1 << 20) < 0)
		pipeA[0] = -1; /* no big pipes here: no sendfile ops */
	for (k = 0; k < iters; k++) {
		i = (int)below((uint64_t)nfiles);
		one_op(argv[4 + i], fa[i], fb[i], sizes[i]);
	}
	error_cases(argv[4]);
	printf("ops=%ld mismatches=%ld\n", ops, mismatches);
	return mismatches ? 1 : 0;
}
