/* Reads a file through io_uring (IORING_OP_READ, raw system calls, no liburing): the
 * kernel does the reads, no read call passes through libc. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned char buf[65536];

int main(int argc, char **argv)
{
	struct io_uring_params p;
	unsigned long sum = 0;
	long long off = 0;
	int fd = argc == 2 ? open(argv[1], O_RDONLY) : -1, ring;
	unsigned char *sq, *cq;
	struct io_uring_sqe *sqes;
	unsigned *sq_tail, *sq_array, *cq_head, *cq_tail;
	struct io_uring_cqe *cqes;

	memset(&p, 0, sizeof(p));
	ring = fd < 0 ? -1 : (int)syscall(__NR_io_uring_setup, 4, &p);
	if (ring < 0)
		return 2;
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
	sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
		return 2;
	sq_tail = (unsigned *)(sq + p.sq_off.tail);
	sq_array = (unsigned *)(sq + p.sq_off.array);
	cq_head = (unsigned *)(cq + p.cq_off.head);
	cq_tail = (unsigned *)(cq + p.cq_off.tail);
	cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	for (;;) {
		unsigned t = *sq_tail, idx = t & (p.sq_entries - 1);
		int res;

		memset(&sqes[idx], 0, sizeof(sqes[idx]));
		sqes[idx].opcode = IORING_OP_READ;
		sqes[idx].fd = fd;
		sqes[idx].addr = (unsigned long)buf;
		sqes[idx].len = sizeof(buf);
		sqes[idx].off = (unsigned long long)off;
		sq_array[idx] = idx;
		__atomic_store_n(sq_tail, t + 1, __ATOMIC_RELEASE);
		if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
			return 2;
		while (__atomic_load_n(cq_head, __ATOMIC_ACQUIRE) == __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE))
			;
		res = cqes[*cq_head & (p.cq_entries - 1)].res;
		__atomic_store_n(cq_head, *cq_head + 1, __ATOMIC_RELEASE);
		if (res < 0)
			return 2;
		if (res == 0)
			break;
		for (int i = 0; i < res; i++)
			sum += buf[i];
		off += res;
	}
	printf("%lu\n", sum);
	return 0;
}
