/* SPDX-License-Identifier: MIT */
/*
 * uc_fdcache.c - descriptors: each fd below UC_FD_CACHE has one cache line that says, with
 * no system call, what a call on it is. An open* makes it OPENED at no cost: its reads
 * count under a stand-in id, and its file (device, inode, size) is learnt later from the
 * program's own fstat (uc_interpose_stat.c: most programs ask it right after the open), or
 * from the shim's at close when the program never asked (uc_pending.c). Once the file is
 * known the descriptor is a FILE and keeps its file's decision for the current table
 * generation (does the table name the file?), so a read of a file nothing places costs no
 * lookup. A descriptor the shim did not see made (inherited, or made by a raw system call)
 * is UNKNOWN and every call on it passes straight through; fds 0-2 are known when the
 * program stats them. The interposed calls that make, reuse or move fds keep it honest
 * (uc_interpose_fd.c).
 */
#include "uc_shim.h"

struct uc_fd uc_fds[UC_FD_CACHE];

/* stand-in ids: distinct per open in this process (a real file id colliding with one is a
 * 2^-64 chance, and would only mix two runs' counts). The sequence starts at random
 * (uc_fd_reseed), so that an open's id is also its draw for the table's open sample. */
static _Atomic uint64_t uc_opens_seq;

/*
 * Where the sequence starts at load, and where a fork's child moves it, so that its draws
 * part from its parent's: mixed with the clock (the vDSO's: no system call where it has
 * one) and this stack's address (ASLR). Not AT_RANDOM's bytes: glibc's canary and pointer
 * guard are made of them, and stand-in ids may reach the shared counters.
 */
void uc_fd_reseed(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	atomic_store_explicit(&uc_opens_seq,
			      uc_mix64(atomic_load_explicit(&uc_opens_seq, memory_order_relaxed) ^
				       (uint64_t)ts.tv_sec << 30 ^ (uint64_t)ts.tv_nsec ^
				       (uint64_t)(uintptr_t)&ts),
			      memory_order_relaxed);
}

/*
 * A descriptor open* just made with `flags`: OPENED, at offset 0 (a fresh open file
 * description; O_APPEND moves it only at a write, which the shim sees), read-only or not.
 * O_DIRECT, O_PATH and O_DIRECTORY pass: their reads are not the page cache's, or no reads
 * at all. No system call; errno untouched.
 */
void uc_fd_opened(int fd, int flags)
{
	struct uc_fd *e;
	uint64_t id;

	if ((unsigned)fd >= UC_FD_CACHE)
		return;
	e = &uc_fds[fd];
	if (flags & (O_DIRECT | O_PATH | O_DIRECTORY)) {
		atomic_store_explicit(&e->state, UC_FD_PASS, memory_order_release);
		return;
	}
	id = uc_mix64(atomic_fetch_add_explicit(&uc_opens_seq, 1, memory_order_relaxed) ^
		      0x5bd1e9955bd1e995ull) | 1u;
	atomic_store_explicit(&e->state, UC_FD_UNKNOWN, memory_order_release);
	atomic_store_explicit(&e->opened_id, id, memory_order_relaxed);
	atomic_store_explicit(&e->file_id, id, memory_order_relaxed);
	atomic_store_explicit(&e->pos, 0, memory_order_relaxed);
	atomic_store_explicit(&e->size, -1, memory_order_relaxed);
	atomic_store_explicit(&e->decision, 0, memory_order_relaxed);
	atomic_store_explicit(&e->sample, (flags & O_ACCMODE) == O_RDONLY ? UC_FD_READ_ONLY : 0,
			      memory_order_relaxed);
	atomic_store_explicit(&e->state, UC_FD_OPENED, memory_order_release);
}

/*
 * The table's open sample, once the file of a descriptor an open* made is known: a
 * read-only open of a regular file of at most sample_bytes is counted with probability
 * 2^-sample_shift, and then its counts go out multiplied by 2^sample_shift (uc_run_send);
 * any other such open passes every call straight through (PASS: no run opened at its
 * first read, none sent at its close: the per-file work a program of many small files,
 * tar or a web server, pays on each), unless the table names its file, which is then
 * counted whole. One draw per open: bits of its stand-in id, random from uc_fd_reseed.
 *
 * uc_fd_sample_shift: the sample's shift when this open of a file of `size` bytes is one
 * the sample may leave out, else 0; uc_fd_drawn: whether the draw counts it.
 */
static inline unsigned uc_fd_sample_shift(const struct uc_fd *e, int64_t size)
{
	unsigned shift;

	if (!(atomic_load_explicit(&e->sample, memory_order_relaxed) & UC_FD_READ_ONLY) ||
	    !uc_table_gen()) /* this thread's copy of the buffer's sample, up to date */
		return 0;
	shift = uc_t.tp.sample_shift;
	return size <= (int64_t)uc_t.tp.sample_bytes ? shift : 0;
}

static inline int uc_fd_drawn(uint64_t opened, unsigned shift)
{
	return ((opened >> 32) & ((1ull << shift) - 1u)) == 0;
}

/*
 * The common case first, before any of the naming's work (uc_interpose_stat.c asks it
 * before uc_fd_known): the program's stat of a descriptor an open* made says a regular
 * file the sample may leave out, the draw leaves this open out, and the table names no
 * file at all or its filter clears this one. 1 when it is left out: it passes from now on.
 * No system call; errno untouched.
 */
int uc_fd_left_out(int fd, const struct stat *st)
{
	struct uc_fd *e = &uc_fds[fd]; /* the caller's uc_fd_unknown_file bounds fd */
	uint64_t opened;
	unsigned shift;

	if (atomic_load_explicit(&e->state, memory_order_acquire) != UC_FD_OPENED ||
	    !S_ISREG(st->st_mode) || !atomic_load_explicit(&uc.mapped, memory_order_acquire))
		return 0;
	shift = uc_fd_sample_shift(e, (int64_t)st->st_size);
	opened = atomic_load_explicit(&e->opened_id, memory_order_relaxed);
	if (!shift || uc_fd_drawn(opened, shift) ||
	    (uc_t.tp.names_files &&
	     !uc_file_unnamed(uc_file_id_of(atomic_load_explicit(&uc.salt, memory_order_relaxed),
					    (uint64_t)st->st_dev, (uint64_t)st->st_ino))))
		return 0;
	atomic_store_explicit(&e->state, UC_FD_PASS, memory_order_release);
	uc_pend_known(fd, opened, 0); /* reads before the stat: a left-out open's, dropped */
	return 1;
}

/* The rest, once the file is named: the draw counts this open (its scale set), or the
 * filter held the file: the table names it (counted whole) or it was the filter's false
 * positive (it passes). */
static void uc_fd_sample(struct uc_fd *e, uint64_t opened)
{
	unsigned shift = uc_fd_sample_shift(e, atomic_load_explicit(&e->size,
								   memory_order_relaxed));
	uint64_t gen = uc_t.gen;

	/* named, or a table being rewritten (not decided for gen): counted whole */
	if (!shift || (uc_fd_flags(e, gen) & UC_FF_NAMED) ||
	    atomic_load_explicit(&e->decision, memory_order_relaxed) >> 8 != gen)
		return;
	if (uc_fd_drawn(opened, shift)) {
		atomic_store_explicit(&e->sample, UC_FD_READ_ONLY | shift, memory_order_relaxed);
		atomic_store_explicit(&e->decision, 0, memory_order_release); /* with its scale */
		return;
	}
	atomic_store_explicit(&e->state, UC_FD_PASS, memory_order_release);
}

/*
 * fd's file, as a stat of it just said (the program's, or the shim's own): an OPENED
 * descriptor, or one of fds 0-2 the shim did not see made, becomes a FILE when st is a
 * regular file, else it passes; counts that waited for it go to the counters. A descriptor
 * of fds 0-2 has its offset asked (one lseek): the shim did not see it move. Keeps errno.
 */
void uc_fd_known(int fd, const struct stat *st)
{
	struct uc_fd *e;
	uint32_t state;
	uint64_t opened;
	int64_t pos = 0;
	int saved = errno;

	if ((unsigned)fd >= UC_FD_CACHE || atomic_load_explicit(&uc.on, memory_order_relaxed) == UC_OFF)
		return;
	e = &uc_fds[fd];
	state = atomic_load_explicit(&e->state, memory_order_acquire);
	if (state == UC_FD_UNKNOWN && fd < 3 && S_ISREG(st->st_mode) && !uc_activate())
		return; /* the process's first file: is the shim on here? */
	if (state == UC_FD_OPENED) {
		opened = atomic_load_explicit(&e->opened_id, memory_order_relaxed);
		pos = atomic_load_explicit(&e->pos, memory_order_relaxed);
	} else if (state == UC_FD_UNKNOWN && fd < 3 && S_ISREG(st->st_mode)) {
		opened = 0;
		pos = (int64_t)UC_REAL(lseek)(fd, 0, SEEK_CUR);
		if (pos < 0) {
			errno = saved;
			return;
		}
	} else {
		return; /* a descriptor it knows already, or one of 0-2 that is no file */
	}
	if (!S_ISREG(st->st_mode)) {
		atomic_store_explicit(&e->state, UC_FD_PASS, memory_order_release);
		uc_pend_known(fd, opened, 0); /* a device or a pipe's counts: none to send */
		return;
	}
	atomic_store_explicit(&e->state, UC_FD_UNKNOWN, memory_order_release);
	atomic_store_explicit(&e->dev, (uint64_t)st->st_dev, memory_order_relaxed);
	atomic_store_explicit(&e->ino, (uint64_t)st->st_ino, memory_order_relaxed);
	atomic_store_explicit(&e->size, (int64_t)st->st_size, memory_order_relaxed);
	atomic_store_explicit(&e->pos, pos, memory_order_relaxed);
	atomic_store_explicit(&e->opened_id, opened, memory_order_relaxed);
	atomic_store_explicit(&e->file_id, 0, memory_order_relaxed);
	atomic_store_explicit(&e->decision, 0, memory_order_relaxed);
	atomic_store_explicit(&e->state, UC_FD_FILE, memory_order_release);
	if (!atomic_load_explicit(&uc.mapped, memory_order_acquire))
		(void)uc_retry_map(1); /* fds 0-2: a process that opened nothing yet */
	if (opened && atomic_load_explicit(&uc.mapped, memory_order_acquire)) {
		uc_pend_known(fd, opened, uc_fd_id(e));
		uc_fd_sample(e, opened);
	}
	errno = saved;
}

/*
 * The shim asks an OPENED descriptor's file itself (one fstat: at its close, a dup, the
 * process's end; never on a read), where the process may make the shim's own calls
 * (uc_may_act: no seccomp filter). 1 when fd is a FILE now.
 */
int uc_fd_identify(int fd)
{
	struct stat st;
	int saved = errno, ok;

	if ((unsigned)fd >= UC_FD_CACHE)
		return 0;
	if (atomic_load_explicit(&uc_fds[fd].state, memory_order_acquire) == UC_FD_OPENED &&
	    uc_may_act() && uc_fstat(fd, &st) == 0)
		uc_fd_known(fd, &st);
	ok = atomic_load_explicit(&uc_fds[fd].state, memory_order_acquire) == UC_FD_FILE;
	errno = saved;
	return ok;
}

/* dup*: `to` now names what `from` names (the same open file description). An OPENED one
 * is asked its file first: two descriptors under one stand-in id would split its counts. */
void uc_fd_copy(int from, int to)
{
	struct uc_fd *a, *b;
	uint32_t state;

	if ((unsigned)to >= UC_FD_CACHE)
		return;
	b = &uc_fds[to];
	atomic_store_explicit(&b->state, UC_FD_UNKNOWN, memory_order_release);
	if ((unsigned)from >= UC_FD_CACHE || from == to)
		return;
	a = &uc_fds[from];
	state = atomic_load_explicit(&a->state, memory_order_acquire);
	if (state == UC_FD_OPENED && !uc_fd_identify(from)) {
		atomic_store_explicit(&b->state, UC_FD_PASS, memory_order_release);
		return;
	}
	state = atomic_load_explicit(&a->state, memory_order_acquire);
	if (state != UC_FD_FILE) {
		atomic_store_explicit(&b->state, state, memory_order_release);
		return;
	}
	atomic_store_explicit(&b->dev, atomic_load(&a->dev), memory_order_relaxed);
	atomic_store_explicit(&b->ino, atomic_load(&a->ino), memory_order_relaxed);
	atomic_store_explicit(&b->size, atomic_load(&a->size), memory_order_relaxed);
	atomic_store_explicit(&b->pos, atomic_load(&a->pos), memory_order_relaxed);
	atomic_store_explicit(&b->file_id, atomic_load(&a->file_id), memory_order_relaxed);
	atomic_store_explicit(&b->opened_id, 0, memory_order_relaxed);
	atomic_store_explicit(&b->decision, 0, memory_order_relaxed);
	atomic_store_explicit(&b->sample, atomic_load(&a->sample), memory_order_relaxed);
	atomic_store_explicit(&b->state, UC_FD_FILE, memory_order_release);
}

/*
 * The file's decision for table generation `gen`: its file entry's flags (UC_FF_*), or 0
 * when the table names none of its chunks, or its file is not known yet (OPENED: nothing
 * acts on it); above them the descriptor's count scale (a sampled open's). Stored with
 * the generation in one word, so a decision never passes for another generation's. (The
 * buffer read is gen's or a newer one: the agent flips the buffer before it bumps the
 * generation.)
 */
uint32_t uc_fd_decide(struct uc_fd *e, uint64_t gen)
{
	uint32_t fl, ff = 0;

	if (atomic_load_explicit(&e->state, memory_order_acquire) != UC_FD_FILE)
		goto done;
	fl = uc_file_flags(uc_fd_id(e));
	if (fl == UINT32_MAX)
		return 0; /* the table was being rewritten: decided again on the next call */
	if (fl & UC_ENTRY_USED) {
		ff = UC_FF_NAMED;
		if (fl & UC_ENTRY_HOMES)
			ff |= UC_FF_HOMES;
		if (fl & UC_ENTRY_COLOR)
			ff |= UC_FF_COLOR;
		if (fl & UC_ENTRY_REPLICA)
			ff |= UC_FF_REPLICA;
	}
	ff |= (atomic_load_explicit(&e->sample, memory_order_relaxed) & UC_FF_SCALE_MASK)
	      << UC_FF_SCALE_SHIFT;
done:
	atomic_store_explicit(&e->decision, gen << 8 | ff, memory_order_release);
	return ff;
}

/* A table with another salt was mapped: every file id is computed again on next use. */
void uc_fd_forget_ids(void)
{
	unsigned fd;

	for (fd = 0; fd < UC_FD_CACHE; fd++)
		if (atomic_load_explicit(&uc_fds[fd].state, memory_order_relaxed) == UC_FD_FILE)
			atomic_store_explicit(&uc_fds[fd].file_id, 0, memory_order_relaxed);
}
