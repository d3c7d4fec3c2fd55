/* SPDX-License-Identifier: MIT */
/*
 * uc_layout.h - shared-memory layout between unicache-agent (writer of the table,
 * reader of the counters) and libunicache.so (reader of the table, writer of the counters).
 *
 * Mirrored in guest-agent/unicache_agent/shm.py; documented in docs/agent.md
 * ("Shared memory layout"). All integers are little-endian, naturally aligned.
 *
 * Table file (UNICACHE_TABLE, default /dev/shm/unicache-table), layout 5:
 *   [uc_table_hdr 64 B][uc_table_cpus 256 B][zeros to 4 KiB][buffer 0][buffer 1]
 *   uc_table_cpus: the guest node of each CPU as the agent read it from sysfs (UC_NO_NODE:
 *   none, or a node id >= UC_MAX_NODES), so that no process reads sysfs for it. The agent
 *   may rewrite it in place, without a new gen, when it restarts on a changed topology:
 *   readers read it live.
 *   buffer = [uc_table_buf 64 B][file filter 4032 B][nbuckets x uc_entry 64 B]
 *   (each buffer's head, header and filter, is one page, and its entries start on a page)
 *   The agent writes the inactive buffer under that buffer's seqlock, flips `active`, then
 *   bumps `gen`: a reader that sees a new gen sees the new buffer.
 *   Besides one entry per placed chunk, the table holds one *file entry* per file that any
 *   chunk entry names (chunk == UC_FILE_CHUNK, flags: USED, the union of its chunks' COLOR
 *   and REPLICA, and UC_ENTRY_HOMES when one of them has home vCPUs; budget, color,
 *   replicas and mask 0). File entries count in nentries and in the capacity (nbuckets/2).
 *   A process looks a file up once per table gen and descriptor; a file without one costs
 *   no lookup per call. The file filter, a Bloom filter of the file ids that have a file
 *   entry (two bits each, uc_filter_bits), answers most of those lookups first: a file it
 *   does not hold has no entry, so a process that opens only files the table does not
 *   name touches the table's first page and one buffer's head, never its entries.
 *
 * Counters files (layout 5): one per user, UNICACHE_COUNTERS/<euid> (default directory
 *   /dev/shm/unicache-counters), mode 0600, owned by that user and created whole by the
 *   first process of that user that maps it, in the layout the agent publishes in the table
 *   header (ctr_*). No user can write or shrink another's counters (docs/agent.md,
 *   "Per-user counters"). Each file:
 *   [uc_ctr_hdr 64 B][UC_MAX_VCPUS x u64 vCPU claims][region 0][region 1]
 *   [uc_gen_hdr 64 B][ngens x u64 generations]
 *   region = [uc_ctr_region 64 B][index: 2 x nslots x u32, rounded to 64 B][nslots slots]
 *   slot = uc_ctr_slot (64 B) + max_vcpus x u64 cells, rounded to 64 B.
 *   Slots are taken in order (the region's `next`, one atomic add), so the chunks one
 *   process reads first in an interval sit side by side: a program that reads a thousand
 *   small files writes a few dozen pages of counters, not one page per file. The index
 *   finds a chunk's slot: entry 0 empty, else the slot's number + 1, at
 *   uc_index_pos(file_id, chunk) with linear probing. A slot's key is stored before its
 *   index entry. The agent reads every slot with a key (it needs no index; two slots with
 *   one key, after a race, are added) and zeroes the whole region. A cell holds what was read on one vCPU in the interval, packed so that one atomic
 *   add counts a run of calls: bits 0..39 bytes, bits 40..63 runs (a read that does not
 *   continue the thread's previous read of the chunk starts a run). The agent derives the
 *   chunk's reads and bytes (sums) and its reads per guest node (through uc_table_cpus).
 *   Cells wrap modulo their width within one interval: 2^40 bytes (1 TiB) and 2^24 runs
 *   per chunk and vCPU between two harvests, far beyond a cache's bandwidth. A read on a
 *   CPU at or above max_vcpus (or on an unknown one) counts one in `dropped`.
 *   The shim counts into region `active`; the agent flips `active`, waits a grace period,
 *   harvests and zeroes the other region.
 *   Generations (layout 2): one u64 per hash bucket of file ids, bumped before and after
 *   every write the shim sees to a file the table gives a replica, and by the agent for
 *   writes it learns of (fanotify); a replica filled under one generation is not served
 *   under another. A fast hint only: every serve is also checked against fstat
 *   (docs/replicas.md "Coherence").
 *   vCPU claims (layout 3): one u64 per vCPU, the reading thread that holds it and until
 *   when (uc_decide.h: the rule that reads and writes them), updated by compare-and-swap.
 *   Words 0..max_vcpus-1 are used. Fixed size at a fixed offset, so that no header field a
 *   reader might see half-rewritten can move them outside the mapping. A word:
 *     bits  0..23  tid of the holder, 0 = free (Linux tids are below PID_MAX_LIMIT = 2^22)
 *     bits 24..63  expiry, CLOCK_MONOTONIC milliseconds modulo 2^40, compared as a serial
 *                  number (expired when (now - expiry) mod 2^40 < 2^39): 2^40 ms is 34
 *                  years of uptime, and even a claim left behind is misread only 17 years on
 */
#ifndef UC_LAYOUT_H
#define UC_LAYOUT_H

#include <stdint.h>

#define UC_TABLE_MAGIC 0x42544355u   /* "UCTB" */
#define UC_CTR_MAGIC 0x54434355u     /* "UCCT" */
/* 2: color/replica entries, generations; 3: claims; 4: per-user counters, ctr_* in table;
 * 5: file entries, the CPUs' nodes in the table, packed per-vCPU cells */
#define UC_LAYOUT_VERSION 5u
#define UC_MAX_VCPUS 256u            /* vCPU mask bits per entry */
#define UC_MASK_WORDS (UC_MAX_VCPUS / 64u)
#define UC_MAX_BUCKETS 65536u        /* hard bound the shim accepts */
#define UC_MAX_SLOTS 65536u
#define UC_MAX_NODES 32u             /* replica_nodes and node_mask bits */
#define UC_MAX_GENS 65536u

/* uc_entry.flags */
#define UC_ENTRY_USED 1u
#define UC_ENTRY_CACHING 2u
#define UC_ENTRY_COLOR 4u            /* color_node is valid (SRM-buffer) */
#define UC_ENTRY_REPLICA 8u          /* replica_nodes is valid (NCC) */
#define UC_ENTRY_HOMES 16u           /* file entry: some chunk of the file has home vCPUs */
/* the chunk index of a file entry (chunk indexes are below 2^48) */
#define UC_FILE_CHUNK 0xffffffffffffffffull
/* a buffer's head: its header and file filter, one page */
#define UC_BUF_HEAD_LEN 4096u
#define UC_FILTER_BYTES 4032u
#define UC_FILTER_BITS (8u * UC_FILTER_BYTES)
/* table buffer flags: valid; some entry has home vCPUs (without it, the table moves no
 * thread); the agent reports home nodes (the host granted `replicas` and two or more guest
 * nodes have CPUs): the shim then records each chunk's home */
#define UC_TABLE_VALID 1u
#define UC_TABLE_HOMES 2u
#define UC_TABLE_NUMA 4u
/* uc_table_cpus: a CPU without a node */
#define UC_NO_NODE 0xffu
/* uc_ctr_slot.home while one process looks it up, or when the page was not resident */
#define UC_HOME_BUSY 0xffffull
/* a counters cell: bytes in the low bits, runs above */
#define UC_CELL_BYTES_BITS 40u
/* the largest sample_shift a table buffer may carry (a descriptor's decision keeps it in
 * four bits, uc_fd.h) */
#define UC_SAMPLE_SHIFT_MAX 15u
#define UC_CELL_BYTES_MASK ((1ull << UC_CELL_BYTES_BITS) - 1ull)

/* migration budget meaning "no limit" */
#define UC_BUDGET_UNLIMITED 0xffffffffu

/* vCPU claim word: tid in the low bits, expiry (ms, modulo 2^40) above */
#define UC_CLAIM_TID_BITS 24u
#define UC_CLAIM_TID_MAX ((1u << UC_CLAIM_TID_BITS) - 1u)
#define UC_CLAIM_EXPIRY_BITS 40u
#define UC_CLAIM_EXPIRY_MASK ((1ull << UC_CLAIM_EXPIRY_BITS) - 1ull)
/* where the claims are in the counters file; the regions follow them */
#define UC_CTR_CLAIMS_OFF 64u
#define UC_CTR_CLAIMS_LEN (8u * UC_MAX_VCPUS)
#define UC_CTR_REGIONS_OFF (UC_CTR_CLAIMS_OFF + UC_CTR_CLAIMS_LEN)

struct uc_table_hdr {
	uint32_t magic;
	uint32_t layout;
	uint64_t salt;      /* per-boot salt of file ids */
	uint32_t nbuckets;  /* per buffer, power of two */
	uint32_t active;    /* buffer the readers use: 0 or 1 */
	uint64_t gen;       /* bumped on every publish */
	uint32_t agent_pid;
	uint32_t harvests;  /* bumped after each harvest's flip: a thread's open run of counts
			     * goes to the counters at its first call after it (uc_counters.c) */
	/* the counters layout of every user's file (layout 4): uc_ctr_len() */
	uint32_t ctr_nslots;
	uint32_t ctr_max_vcpus;
	uint32_t node_mask;  /* guest nodes 0..31 online, memory-only ones too (layout 5) */
	uint32_t ctr_ngens;
	uint8_t pad[8];
};

/* After the header (layout 5): each CPU's guest node, UC_NO_NODE when sysfs names none. */
struct uc_table_cpus {
	uint8_t cpu_node[UC_MAX_VCPUS];
};

struct uc_table_buf {
	uint64_t seq;           /* seqlock: odd while being written */
	uint64_t version;       /* host table version */
	uint64_t chunk_size;    /* bytes, power of two */
	uint64_t min_read_size; /* MFC section 4.5: shorter reads never migrate */
	uint32_t nentries;      /* chunk and file entries */
	uint32_t flags;         /* UC_TABLE_VALID, UC_TABLE_HOMES, UC_TABLE_NUMA */
	/* which opens the shims count (the agent's OpenSample): a read-only open of a regular
	 * file of at most sample_bytes is counted with probability 2^-sample_shift, its counts
	 * multiplied by 2^sample_shift; 0 and 0 (a writer that never set them): every open */
	uint32_t sample_bytes;
	uint8_t sample_shift;   /* at most UC_SAMPLE_SHIFT_MAX */
	uint8_t pad[19];
};

struct uc_entry {
	uint64_t file_id;
	uint64_t chunk;
	uint32_t flags;            /* UC_ENTRY_* */
	uint32_t migration_budget; /* migrations per report interval (MFC section 4.5) */
	uint16_t color_node;       /* guest node for the chunk's page cache (UC_ENTRY_COLOR) */
	uint16_t pad16;
	uint32_t replica_nodes;    /* guest nodes 0..31 keeping a replica (UC_ENTRY_REPLICA) */
	uint64_t mask[UC_MASK_WORDS]; /* home vCPUs; may be empty (color/replica-only entry) */
};

struct uc_ctr_hdr {
	uint32_t magic;
	uint32_t layout;
	uint32_t nslots;    /* per region, power of two */
	uint32_t max_vcpus; /* per-vCPU counters per slot */
	uint32_t active;    /* region the shim counts into */
	uint32_t slot_size; /* bytes */
	uint64_t dropped[2];  /* per region: reads not counted because the region was full */
	uint64_t clients;     /* processes that mapped the counters (monotonic) */
	uint32_t reserved;    /* 0 (layout 4: per-node counters per slot) */
	uint32_t ngens;       /* file generations, power of two <= UC_MAX_GENS */
	uint64_t inserts;     /* slots taken, both regions (monotonic): the agent's cue that a
			       * chunk was read for the first time since its last harvest */
};

/* After the two regions: shim-wide statistics (monotonic, never zeroed), then generations. */
struct uc_gen_hdr {
	uint64_t replica_serves;   /* reads served from a replica */
	uint64_t replica_fills;    /* replicas filled */
	uint64_t replica_rejects;  /* serves refused: file changed since the fill */
	uint64_t fill_aborts;      /* fills abandoned: file too recently changed or changed during */
	uint64_t color_reads;      /* reads made under a color node's memory policy */
	uint64_t gen_bumps;        /* generation bumps by shim writers */
	uint64_t replica_asks;     /* replicas asked of the agent (requests sent) */
	uint64_t replica_waits;    /* reads made for real while an answer was awaited */
};

/* A counters region's head (layout 5): the index and the slots follow. */
struct uc_ctr_region {
	uint64_t next;       /* slots taken this interval (may pass nslots: then it is full) */
	uint8_t pad[56];
};

struct uc_ctr_slot {
	uint64_t key;        /* 0 = empty; uc_slot_key(file_id, chunk) */
	uint64_t file_id;
	uint64_t chunk;
	uint64_t writes;
	uint64_t migrations; /* this interval: the chunk's migration budget spent */
	uint64_t nt_reads;
	/* guest node + 1 of the chunk's first page-cache page (NCC tables only), 0 unknown,
	 * UC_HOME_BUSY while one process looks it up or when the page was not resident */
	uint64_t home;
	uint64_t pad;
	/* followed by uint64_t cell[max_vcpus]: (runs << UC_CELL_BYTES_BITS) | bytes */
};

/*
 * Guest-wide replicas (NCC, docs/replicas.md). The agent keeps one file per replicated
 * chunk and node in a directory of that node's memory (UNICACHE_REPLICAS/nodeN), root's,
 * mode 0400, never listed or opened by path by anyone else. A file:
 *   [uc_rep_hdr, zero-padded to UC_REP_DATA_OFF][len bytes of the chunk]
 * written whole before any process learns of it; afterwards the agent changes only `state`
 * (VALID -> DROPPED, one byte), then truncates the file to its header and unlinks it.
 * A process gets a replica only from the agent's socket (UNICACHE_REPLICAS/socket,
 * SOCK_SEQPACKET): it sends a uc_rep_req with a descriptor of the source file it reads
 * (SCM_RIGHTS: the proof that it may read that file) and gets a uc_rep_rsp, with a
 * read-only descriptor of the replica file (SCM_RIGHTS) when status is 0.
 */
#define UC_REP_MAGIC 0x46524355u     /* "UCRF" */
#define UC_REP_LAYOUT 1u
#define UC_REP_DATA_OFF 4096u        /* the chunk's bytes start one page in */
#define UC_REP_VALID 1u
#define UC_REP_DROPPED 2u
#define UC_REQ_MAGIC 0x51524355u     /* "UCRQ" */
#define UC_RSP_MAGIC 0x50524355u     /* "UCRP" */

struct uc_rep_hdr {
	uint32_t magic;
	uint32_t layout;
	uint32_t state;      /* UC_REP_VALID, then UC_REP_DROPPED */
	uint32_t node;       /* guest node whose memory holds it */
	uint64_t file_id;
	uint64_t chunk;
	uint64_t chunk_size;
	uint64_t len;        /* bytes of the chunk held (short at EOF) */
	/* the source file when the agent read it (fstat): a serve needs all of them equal */
	uint64_t dev;
	uint64_t ino;
	int64_t size;
	int64_t mtime_sec;
	int64_t mtime_nsec;
	int64_t ctime_sec;
	int64_t ctime_nsec;
	uint8_t pad[24];
};

/* a process asks for the replica of `chunk` (of `chunk_size`) of the file it passes */
struct uc_rep_req {
	uint32_t magic;
	uint32_t node;
	uint64_t id;         /* echoed in the answer */
	uint64_t chunk;
	uint64_t chunk_size;
};

/* status: 0 (descriptor attached), else an errno: EAGAIN the file changed too recently,
 * ENOSPC no room on the node (budget, memory tight), ENOENT not replicated there, EINVAL */
struct uc_rep_rsp {
	uint32_t magic;
	int32_t status;
	uint64_t id;
};

_Static_assert(sizeof(struct uc_table_hdr) == 64, "table header is 64 bytes");
_Static_assert(sizeof(struct uc_table_cpus) == 256, "the CPUs' nodes are 256 bytes");
_Static_assert(sizeof(struct uc_table_buf) == 64, "table buffer header is 64 bytes");
_Static_assert(sizeof(struct uc_entry) == 64, "entry is 64 bytes");
_Static_assert(sizeof(struct uc_ctr_hdr) == 64, "counter header is 64 bytes");
_Static_assert(sizeof(struct uc_ctr_slot) == 64, "counter slot head is 64 bytes");
_Static_assert(sizeof(struct uc_ctr_region) == 64, "counter region head is 64 bytes");
_Static_assert(sizeof(struct uc_gen_hdr) == 64, "generation header is 64 bytes");
_Static_assert(sizeof(struct uc_rep_hdr) == 128, "replica header is 128 bytes");
_Static_assert(sizeof(struct uc_rep_req) == 32, "replica request is 32 bytes");
_Static_assert(sizeof(struct uc_rep_rsp) == 16, "replica answer is 16 bytes");
_Static_assert(UC_CTR_CLAIMS_OFF == sizeof(struct uc_ctr_hdr), "claims follow the header");
_Static_assert(UC_CTR_REGIONS_OFF % 64 == 0, "regions start on a cache line");

/* Where the buffers start in the table file: one page in. */
#define UC_TABLE_BUFS_OFF 4096u
_Static_assert(UC_TABLE_BUFS_OFF >= sizeof(struct uc_table_hdr) + sizeof(struct uc_table_cpus),
	       "the header and the CPUs' nodes fit before the buffers");
_Static_assert(sizeof(struct uc_table_buf) + UC_FILTER_BYTES == UC_BUF_HEAD_LEN,
	       "a buffer's header and filter fill its head");

/* Bytes of one table buffer. */
static inline uint64_t uc_buf_len(uint32_t nbuckets)
{
	return UC_BUF_HEAD_LEN + (uint64_t)nbuckets * sizeof(struct uc_entry);
}

/* Bytes of one counters slot: head and one cell per vCPU; 64 B aligned. */
static inline uint32_t uc_slot_size(uint32_t max_vcpus)
{
	uint32_t raw = (uint32_t)sizeof(struct uc_ctr_slot) + 8u * max_vcpus;

	return (raw + 63u) / 64u * 64u;
}

/* Bytes of a region's index: two u32 entries per slot, 64 B aligned. */
static inline uint64_t uc_index_len(uint32_t nslots)
{
	return (8ull * nslots + 63u) / 64u * 64u;
}

/* Bytes of one counters region: its head, its index and its slots. */
static inline uint64_t uc_region_len(uint32_t nslots, uint32_t max_vcpus)
{
	return sizeof(struct uc_ctr_region) + uc_index_len(nslots) +
	       (uint64_t)nslots * uc_slot_size(max_vcpus);
}

/* Bytes of a counters file of this layout; 0 when a field is out of its bounds. */
static inline uint64_t uc_ctr_len(uint32_t nslots, uint32_t max_vcpus, uint32_t ngens)
{
	if (nslots == 0 || nslots > UC_MAX_SLOTS || (nslots & (nslots - 1u)) || max_vcpus == 0 ||
	    max_vcpus > UC_MAX_VCPUS || ngens == 0 || ngens > UC_MAX_GENS || (ngens & (ngens - 1u)))
		return 0;
	return UC_CTR_REGIONS_OFF + 2ull * uc_region_len(nslots, max_vcpus) +
	       sizeof(struct uc_gen_hdr) + 8ull * ngens;
}

/* A cell's add for `runs` runs of `bytes` bytes. */
static inline uint64_t uc_cell(uint64_t runs, uint64_t bytes)
{
	return runs << UC_CELL_BYTES_BITS | (bytes & UC_CELL_BYTES_MASK);
}

/* splitmix64 finalizer: the one mixing function both sides use */
static inline uint64_t uc_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* opaque file id: no name, no raw inode number leaves the guest */
static inline uint64_t uc_file_id_of(uint64_t salt, uint64_t dev, uint64_t ino)
{
	uint64_t id = uc_mix64(uc_mix64(salt ^ dev) ^ ino);
	return id ? id : 1;
}

static inline uint64_t uc_bucket_hash(uint64_t file_id, uint64_t chunk)
{
	return uc_mix64(file_id ^ (chunk * 0x9e3779b97f4a7c15ull));
}

/* The two bits of a file id in a buffer's file filter (file ids are mixed: their halves
 * are uniform, and each maps onto the filter by a multiply, not a division). */
static inline void uc_filter_bits(uint64_t file_id, uint32_t *b1, uint32_t *b2)
{
	*b1 = (uint32_t)(((file_id & 0xffffffffull) * UC_FILTER_BITS) >> 32);
	*b2 = (uint32_t)(((file_id >> 32) * UC_FILTER_BITS) >> 32);
}

static inline uint64_t uc_slot_key(uint64_t file_id, uint64_t chunk)
{
	return uc_mix64(file_id + 0x632be59bd9b4e019ull * (chunk + 1)) | 1ull;
}

/*
 * Where a chunk's index entry is looked for first, in an index of `nidx` entries (a power
 * of two): consecutive chunks of a file, 16 to a group, in consecutive entries, so that a
 * sequential reader's run reads one line of the index; the groups are spread by the hash.
 */
static inline uint64_t uc_index_pos(uint64_t file_id, uint64_t chunk, uint64_t nidx)
{
	return (uc_slot_key(file_id, chunk / 16u * 16u) + chunk % 16u) & (nidx - 1u);
}

/* generation bucket of a file id */
static inline uint64_t uc_gen_hash(uint64_t file_id)
{
	return uc_mix64(file_id ^ 0x2545f4914f6cdd1dull);
}

#endif /* UC_LAYOUT_H */
