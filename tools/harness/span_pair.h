/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two UCP endpoints for span-check and the UCP tests: an initiator (the
 * calling process) and a target, either a forked process that serves
 * commands over a socket, or, in loopback mode, the caller itself (for
 * transports such as self that only reach their own process), or, in
 * remote mode, a process on another node that a span_pair server there
 * forked for this pair (commands over TCP).
 *
 * The target owns the memory: it maps regions, fills them with a pattern and
 * checks them, so every byte a test moves is verified where it landed.
 */
#ifndef SPAN_PAIR_H_
#define SPAN_PAIR_H_

#include <ucp/api/ucp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SPAN_PAIR_FORK,     /* target is a child process */
    SPAN_PAIR_LOOPBACK, /* target is this process, endpoint to own worker */
    SPAN_PAIR_REMOTE    /* target is a child of a server (span_pair_serve),
                           reached over TCP: span_pair_start_remote */
} span_pair_mode_t;

/* Who the target is, as it reports itself (SPAN_PAIR_REMOTE) */
typedef struct {
    char     hostname[64];
    uint64_t system_id;  /* ucs_get_system_id(): UCX's host identity */
    uint32_t pid;
} span_pair_peer_t;

typedef struct span_pair {
    ucp_context_h    context;
    ucp_worker_h     worker;
    ucp_ep_h         ep;
    span_pair_mode_t mode;
    int              sock;      /* to the child, SPAN_PAIR_FORK only */
    pid_t            child;
    int              target_dead; /* the child died before it was stopped */
    int              local_cuda;  /* put/get buffers are device memory:
                                     told to UCP, as a careful user does */
    struct span_pair_target *target; /* SPAN_PAIR_LOOPBACK only */
    span_pair_peer_t peer;        /* SPAN_PAIR_REMOTE only */
    ucs_status_t     ep_error;    /* the endpoint's failure, as UCP's error
                                     handler reported it (UCS_OK: none) */
    ucp_mem_h        local_memh;  /* span_pair_rma_blocks' local buffer's,
                                     given to UCP as NIXL does; NULL: UCP
                                     finds it */
    double           post_s;      /* of span_pair_rma_blocks' last call:
                                     seconds its posts took, before it
                                     waited for them */
} span_pair_t;

/* Memory on the target: [base, base + alloc_length) is allocated and
 * patterned, [base + reg_offset, + reg_length) is mapped with ucp_mem_map and
 * described by rkey (unpacked on the initiator). */
typedef struct {
    unsigned   id;
    uint64_t   base;
    size_t     alloc_length;
    size_t     reg_offset;
    size_t     reg_length;
    ucp_rkey_h rkey;
} span_pair_region_t;

/* The byte at offset i of a pattern with this seed; aperiodic, so a transfer
 * from a wrong offset is caught. */
static inline uint64_t span_pair_pattern_word(unsigned seed, size_t word)
{
    /* splitmix64 of the word index: every byte of the word is well mixed */
    uint64_t x = (uint64_t)word + ((uint64_t)seed << 48);

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint8_t span_pair_pattern(unsigned seed, size_t i)
{
    return (uint8_t)(span_pair_pattern_word(seed, i >> 3) >> ((i & 7) * 8));
}

void span_pair_fill(void *buf, size_t length, unsigned seed, size_t offset);

/* Number of bytes of buf that differ from the pattern at offset. */
size_t span_pair_mismatches(const void *buf, size_t length, unsigned seed,
                            size_t offset);

/* tls is the UCX_TLS value; features UCP_FEATURE_*. */
ucs_status_t span_pair_start(span_pair_t *pair, span_pair_mode_t mode,
                             const char *tls, uint64_t features);

/* SPAN_PAIR_FORK where the target is another program: the child execs argv
 * (NULL-terminated), which must call span_pair_target_main, e.g. a Python
 * process that serves memory of its own allocator (span_gpu_external_set)
 * through this code loaded as a library. */
ucs_status_t span_pair_start_exec(span_pair_t *pair, const char *tls,
                                  uint64_t features, char *const argv[]);

/* The target's loop in a program span_pair_start_exec started; its exit
 * code (0 when the initiator stopped it cleanly). */
int span_pair_target_main(void);

/* SPAN_PAIR_REMOTE: connects to the server at address ("host:port"; the
 * server may still be starting: refused connections are retried for
 * SPAN_PAIR_CONNECT_S seconds), which forks a target for this pair. The
 * target's UCX reads the UCX_SPAN_* variables of this process's
 * environment, as a forked target inherits them. With
 * SPAN_PAIR_FLAG_PEER_ERRORS the endpoint is created with
 * UCP_ERR_HANDLING_MODE_PEER: a target that dies fails its requests
 * instead of the process. */
#define SPAN_PAIR_CONNECT_S          60
#define SPAN_PAIR_FLAG_PEER_ERRORS   1u
ucs_status_t span_pair_start_remote(span_pair_t *pair, const char *address,
                                    const char *tls, uint64_t features,
                                    unsigned flags);

/* Serves span_pair_start_remote at address ("host:port"): forks one target
 * per connection (UCP is initialized only in them) and reaps them, until a
 * signal ends it. Returns only on a setup error (1). */
int span_pair_serve(const char *address);

/* Returns 0 when the target exited cleanly. */
int span_pair_stop(span_pair_t *pair);

/* Kills the target as kill -9 would (SIGKILL), without waiting for
 * anything: a remote target sends the signal to itself on command.
 * UCS_ERR_UNSUPPORTED in loopback mode. */
ucs_status_t span_pair_kill_target(span_pair_t *pair);

/* Bytes of memory the target has pinned (VmPin of its /proc status: every
 * ibv_reg_mr adds its pages), and those its last ucp_mem_map pinned (UCP
 * registers buffers of its own meanwhile, as connections come up) */
ucs_status_t span_pair_target_pinned(span_pair_t *pair, uint64_t *bytes,
                                     uint64_t *map_bytes);

/* Writes ucp_ep_print_info into buf (lanes and transports in use). */
void span_pair_ep_info(span_pair_t *pair, char *buf, size_t size);

ucs_status_t span_pair_map(span_pair_t *pair, size_t alloc_length,
                           size_t reg_offset, size_t reg_length, unsigned seed,
                           span_pair_region_t *region);
/* The same in memory of a kind of span_gpu.h (SPAN_GPU_VMM: of handles
 * physical allocations); UCS_ERR_NO_DEVICE where the target has no GPU */
ucs_status_t span_pair_map_kind(span_pair_t *pair, unsigned kind,
                                unsigned handles, size_t alloc_length,
                                size_t reg_offset, size_t reg_length,
                                unsigned seed, span_pair_region_t *region);
void span_pair_unmap(span_pair_t *pair, span_pair_region_t *region);

/* The target deregisters the region, unmaps it, maps new memory at the
 * same address, fills it with the pattern of seed and registers the same
 * range again (an allocator handing freed memory out again); the region
 * gets the new rkey. */
ucs_status_t span_pair_remap(span_pair_t *pair, span_pair_region_t *region,
                             unsigned seed);

/* Refill the whole allocation of a region with the pattern of seed. */
ucs_status_t span_pair_refill(span_pair_t *pair, span_pair_region_t *region,
                              unsigned seed);

/* Mismatching bytes in [offset, offset + length) of the allocation, against
 * the pattern of seed taken at the same offsets; SIZE_MAX on failure. */
size_t span_pair_check(span_pair_t *pair, span_pair_region_t *region,
                       size_t offset, size_t length, unsigned seed);

/* The 64-bit word at offset of the allocation. */
ucs_status_t span_pair_read64(span_pair_t *pair, span_pair_region_t *region,
                              size_t offset, uint64_t *value);

/* Blocking RMA and atomics on the region (offset from its allocation base);
 * the status is the request's. */
ucs_status_t span_pair_put(span_pair_t *pair, span_pair_region_t *region,
                           size_t offset, const void *buf, size_t length);
ucs_status_t span_pair_get(span_pair_t *pair, span_pair_region_t *region,
                           size_t offset, void *buf, size_t length);
/* The same blocks (stride apart on both sides) in one UCP SGL put (UCX
 * 1.22 and later; get where UCP has SGL gets, none of 1.22 and 1.23 does),
 * then a flush; with bad > 0, block bad - 1 goes to
 * an address whose last byte lies past the registration. The request's
 * status, or the flush's. */
ucs_status_t span_pair_rma_sgl(span_pair_t *pair, span_pair_region_t *region,
                               size_t offset, void *local, size_t block,
                               size_t stride, size_t count, int get,
                               size_t bad);
/* count puts (or gets) of block bytes each, block i between local + i *
 * stride and the region at offset + i * stride, all posted before one
 * flush (as NIXL posts a transfer of many blocks); with kill_at > 0, the
 * target is killed after that many are posted. The first failure; each
 * block's in statuses where not NULL. */
ucs_status_t span_pair_rma_blocks(span_pair_t *pair,
                                  span_pair_region_t *region, size_t offset,
                                  void *local, size_t block, size_t stride,
                                  size_t count, int get, size_t kill_at,
                                  ucs_status_t *statuses);
/* count puts of block bytes each, put i from local + i * block, all to the
 * same bytes of the region at offset, a ucp_worker_fence between each two,
 * posted before one flush: the last one's bytes must be what stays. The
 * first failure */
ucs_status_t span_pair_put_fenced(span_pair_t *pair,
                                  span_pair_region_t *region, size_t offset,
                                  void *local, size_t block, size_t count);
ucs_status_t span_pair_atomic(span_pair_t *pair, span_pair_region_t *region,
                              size_t offset, ucp_atomic_op_t op,
                              uint64_t value, uint64_t compare,
                              uint64_t *result);

/* Tagged send of a patterned buffer to the target, which receives it into a
 * fresh buffer and counts mismatching bytes; SIZE_MAX on failure. */
size_t span_pair_tag_send(span_pair_t *pair, size_t length, unsigned seed,
                          ucs_status_t *status);

#ifdef __cplusplus
}
#endif

#endif
