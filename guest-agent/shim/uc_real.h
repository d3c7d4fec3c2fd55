/* SPDX-License-Identifier: MIT */
/*
 * uc_real.h - the real functions the shim wraps: the next definition after ours (libc's),
 * looked up with dlsym(RTLD_NEXT) on first use and kept in uc_real (uc_real.c).
 *
 * Included by uc_shim.h after the system headers; include that, not this file.
 */
#ifndef UC_REAL_H
#define UC_REAL_H

typedef ssize_t (*uc_read_t)(int, void *, size_t);
typedef ssize_t (*uc_pread_t)(int, void *, size_t, off_t);
typedef ssize_t (*uc_pread64_t)(int, void *, size_t, off64_t);
typedef ssize_t (*uc_readv_t)(int, const struct iovec *, int);
typedef ssize_t (*uc_preadv_t)(int, const struct iovec *, int, off_t);
typedef ssize_t (*uc_preadv64_t)(int, const struct iovec *, int, off64_t);
typedef ssize_t (*uc_preadv2_t)(int, const struct iovec *, int, off_t, int);
typedef ssize_t (*uc_preadv64v2_t)(int, const struct iovec *, int, off64_t, int);
typedef ssize_t (*uc_write_t)(int, const void *, size_t);
typedef ssize_t (*uc_pwrite_t)(int, const void *, size_t, off_t);
typedef ssize_t (*uc_pwrite64_t)(int, const void *, size_t, off64_t);
typedef off_t (*uc_lseek_t)(int, off_t, int);
typedef off64_t (*uc_lseek64_t)(int, off64_t, int);
typedef int (*uc_close_t)(int);
typedef int (*uc_dup_t)(int);
typedef int (*uc_dup2_t)(int, int);
typedef int (*uc_dup3_t)(int, int, int);
typedef int (*uc_open_t)(const char *, int, ...);
typedef int (*uc_openat_t)(int, const char *, int, ...);
typedef int (*uc_open2_t)(const char *, int);
typedef int (*uc_creat_t)(const char *, mode_t);
typedef int (*uc_pipe_t)(int[2]);
typedef int (*uc_pipe2_t)(int[2], int);
typedef int (*uc_socket_t)(int, int, int);
typedef int (*uc_socketpair_t)(int, int, int, int[2]);
typedef int (*uc_accept_t)(int, struct sockaddr *, socklen_t *);
typedef int (*uc_accept4_t)(int, struct sockaddr *, socklen_t *, int);
typedef ssize_t (*uc_sendfile_t)(int, int, off_t *, size_t);
typedef ssize_t (*uc_sendfile64_t)(int, int, off64_t *, size_t);
typedef ssize_t (*uc_read_chk_t)(int, void *, size_t, size_t);
typedef ssize_t (*uc_pread_chk_t)(int, void *, size_t, off_t, size_t);
typedef ssize_t (*uc_pread64_chk_t)(int, void *, size_t, off64_t, size_t);
typedef ssize_t (*uc_writev_t)(int, const struct iovec *, int);
typedef ssize_t (*uc_pwritev_t)(int, const struct iovec *, int, off_t);
typedef ssize_t (*uc_pwritev64_t)(int, const struct iovec *, int, off64_t);
typedef ssize_t (*uc_pwritev2_t)(int, const struct iovec *, int, off_t, int);
typedef ssize_t (*uc_pwritev64v2_t)(int, const struct iovec *, int, off64_t, int);
typedef int (*uc_ftruncate_t)(int, off_t);
typedef int (*uc_ftruncate64_t)(int, off64_t);
typedef FILE *(*uc_fopen_t)(const char *, const char *);
typedef FILE *(*uc_freopen_t)(const char *, const char *, FILE *);
typedef int (*uc_prctl_t)(int, unsigned long, unsigned long, unsigned long, unsigned long);
typedef long (*uc_syscall_t)(long, long, long, long, long, long, long);
typedef int (*uc_openat2_t)(int, const char *, int);
typedef int (*uc_close_range_t)(unsigned, unsigned, int);
typedef void (*uc_closefrom_t)(int);
typedef int (*uc_fcntl_t)(int, int, ...);
typedef int (*uc_fstat_t)(int, struct stat *);
typedef int (*uc_fstatat_t)(int, const char *, struct stat *, int);
typedef int (*uc_fxstat_t)(int, int, struct stat *);
typedef int (*uc_statx_t)(int, const char *, int, unsigned int, struct statx *);

struct uc_real_fns {
	uc_read_t read;
	uc_pread_t pread;
	uc_pread64_t pread64;
	uc_readv_t readv;
	uc_preadv_t preadv;
	uc_preadv64_t preadv64;
	uc_preadv2_t preadv2;
	uc_preadv64v2_t preadv64v2;
	uc_write_t write;
	uc_pwrite_t pwrite;
	uc_pwrite64_t pwrite64;
	uc_lseek_t lseek;
	uc_lseek64_t lseek64;
	uc_close_t close;
	uc_dup_t dup;
	uc_dup2_t dup2;
	uc_dup3_t dup3;
	uc_open_t open;
	uc_open_t open64;
	uc_openat_t openat;
	uc_openat_t openat64;
	uc_open2_t open_2;
	uc_open2_t open64_2;
	uc_creat_t creat;
	uc_creat_t creat64;
	uc_pipe_t pipe;
	uc_pipe2_t pipe2;
	uc_socket_t socket;
	uc_socketpair_t socketpair;
	uc_accept_t accept;
	uc_accept4_t accept4;
	uc_sendfile_t sendfile;
	uc_sendfile64_t sendfile64;
	uc_read_chk_t read_chk;
	uc_pread_chk_t pread_chk;
	uc_pread64_chk_t pread64_chk;
	uc_writev_t writev;
	uc_pwritev_t pwritev;
	uc_pwritev64_t pwritev64;
	uc_pwritev2_t pwritev2;
	uc_pwritev64v2_t pwritev64v2;
	uc_ftruncate_t ftruncate;
	uc_ftruncate64_t ftruncate64;
	uc_fopen_t fopen;
	uc_fopen_t fopen64;
	uc_freopen_t freopen;
	uc_freopen_t freopen64;
	uc_prctl_t prctl;
	uc_syscall_t syscall;
	uc_openat2_t openat_2;
	uc_openat2_t openat64_2;
	uc_close_range_t close_range;
	uc_closefrom_t closefrom;
	uc_fcntl_t fcntl;
	uc_fcntl_t fcntl64;
	uc_fstat_t fstat;
	uc_fstat_t fstat64;
	uc_fstatat_t fstatat;
	uc_fstatat_t fstatat64;
	uc_fxstat_t fxstat;
	uc_fxstat_t fxstat64;
	uc_statx_t statx;
};

/* filled one function at a time by UC_REAL / UC_REAL_SYM; never reset */
extern struct uc_real_fns uc_real __attribute__((visibility("hidden")));

/* the cold half of UC_REAL: look `name` up and keep it in *slot (uc_real.c); out of line,
 * so that a wrapper's common path (the pointer is there) is a load and a tail call */
void *uc_real_resolve(void **slot, const char *name)
	__attribute__((visibility("hidden"), noinline, cold));

#define UC_REAL(name)                                                              \
	(__extension__({                                                           \
		__typeof__(uc_real.name) f_ = uc_real.name;                        \
		if (__builtin_expect(!f_, 0))                                      \
			f_ = (__typeof__(f_))uc_real_resolve((void **)&uc_real.name, #name); \
		f_;                                                                \
	}))
#define UC_REAL_SYM(field, sym)                                                    \
	(__extension__({                                                           \
		__typeof__(uc_real.field) f_ = uc_real.field;                      \
		if (__builtin_expect(!f_, 0))                                      \
			f_ = (__typeof__(f_))uc_real_resolve((void **)&uc_real.field, sym); \
		f_;                                                                \
	}))

/*
 * A wrapper's pass-through without a frame: UC_COLD_PASS(type, name, params, args) defines
 * uc_cold_<name>, the real call after its lookup, out of line; UC_PASS(name, args) is then
 * one load and a tail call while the pointer is there (a lookup in the wrapper itself
 * would make every call save registers for it).
 */
#define UC_COLD_PASS(type, name, params, args)                                     \
	static __attribute__((noinline, cold)) type uc_cold_##name params          \
	{                                                                          \
		return UC_REAL(name) args;                                         \
	}
#define UC_PASS(name, args)                                                        \
	(__builtin_expect(uc_real.name != NULL, 1) ? uc_real.name args : uc_cold_##name args)

#endif /* UC_REAL_H */
