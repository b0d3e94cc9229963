/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two-process (or loopback) UCP harness shared by span-check and the tests.
 * The target answers fixed-size commands over a socketpair (a TCP
 * connection in remote mode) and progresses its worker in between, so
 * rendezvous and emulated atomics complete.
 */
#include "span_pair.h"
#include "span_gpu.h"
#include "span_stats.h"

#include <ucs/sys/uid.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#  error "the pattern is written a word at a time, little-endian"
#endif

#define SPAN_PAIR_MAX_REGIONS 16
#define SPAN_PAIR_MAX_RKEY    4096
/* What a remote initiator may send: UCX_TLS, and UCX_SPAN_* variables */
#define SPAN_PAIR_MAX_TLS     256
#define SPAN_PAIR_MAX_ENV     4096
#define SPAN_PAIR_ENV_PREFIX  "UCX_SPAN_"
#define SPAN_PAIR_MAGIC       0x315249415053ull /* "SPAIR1" */
/* A remote target's last word after QUIT: how long it may take to clean up */
#define SPAN_PAIR_EXIT_WAIT_MS 30000

enum {
    SPAN_PAIR_CMD_MAP,
    SPAN_PAIR_CMD_UNMAP,
    SPAN_PAIR_CMD_REFILL,
    SPAN_PAIR_CMD_CHECK,
    SPAN_PAIR_CMD_READ64,
    SPAN_PAIR_CMD_TAG,
    SPAN_PAIR_CMD_REMAP,
    SPAN_PAIR_CMD_PINNED,
    SPAN_PAIR_CMD_KILL,
    SPAN_PAIR_CMD_QUIT
};

typedef struct {
    uint32_t op;
    uint32_t id;
    uint64_t arg[4];
} span_pair_cmd_t;

typedef struct {
    int64_t  status;
    uint64_t value[2];
    uint32_t rkey_size; /* rkey bytes follow */
} span_pair_reply_t;

/* What a remote initiator sends first: UCX_TLS (tls_len bytes) and
 * env_len bytes of NAME=VALUE strings, each ending in a NUL, follow */
typedef struct {
    uint64_t magic;
    uint64_t features;
    uint32_t tls_len;
    uint32_t env_len;
} span_pair_hello_t;

typedef struct {
    void           *buf;    /* mem.ptr while mapped */
    size_t         length;
    ucp_mem_h      memh;
    span_gpu_buf_t mem;
} span_pair_target_region_t;

typedef struct span_pair_target {
    ucp_context_h             context;
    ucp_worker_h              worker;
    span_pair_target_region_t regions[SPAN_PAIR_MAX_REGIONS];
    uint64_t                  map_pinned; /* VmPin bytes the last
                                             ucp_mem_map added */
} span_pair_target_t;

static const uint64_t span_pair_tag = 0x5a5a;

void span_pair_fill(void *buf, size_t length, unsigned seed, size_t offset)
{
    uint8_t *p = buf;
    size_t i   = 0;
    uint64_t word;

    /* whole pattern words at once: a 64 MiB check takes milliseconds */
    for (; (i < length) && ((offset + i) & 7); ++i) {
        p[i] = span_pair_pattern(seed, offset + i);
    }
    for (; i + 8 <= length; i += 8) {
        word = span_pair_pattern_word(seed, (offset + i) >> 3);
        memcpy(p + i, &word, sizeof(word));
    }
    for (; i < length; ++i) {
        p[i] = span_pair_pattern(seed, offset + i);
    }
}

size_t span_pair_mismatches(const void *buf, size_t length, unsigned seed,
                            size_t offset)
{
    const uint8_t *p = buf;
    size_t count     = 0;
    size_t i         = 0;
    uint64_t word, expect;
    unsigned k;

    for (; (i < length) && ((offset + i) & 7); ++i) {
        count += (p[i] != span_pair_pattern(seed, offset + i));
    }
    for (; i + 8 <= length; i += 8) {
        expect = span_pair_pattern_word(seed, (offset + i) >> 3);
        memcpy(&word, p + i, sizeof(word));
        for (k = 0; (word != expect) && (k < 8); ++k) {
            count += (p[i + k] != span_pair_pattern(seed, offset + i + k));
        }
    }
    for (; i < length; ++i) {
        count += (p[i] != span_pair_pattern(seed, offset + i));
    }
    return count;
}

static int span_pair_io(int fd, void *buf, size_t length, int out)
{
    uint8_t *p = buf;
    ssize_t ret;

    while (length > 0) {
        ret = out ? send(fd, p, length, MSG_NOSIGNAL) : read(fd, p, length);
        if (ret <= 0) {
            if ((ret < 0) && (errno == EINTR)) {
                continue;
            }
            return -1;
        }
        p      += ret;
        length -= ret;
    }
    return 0;
}

static ucs_status_t span_pair_wait(ucp_worker_h worker, void *request)
{
    ucs_status_t status;

    if (!UCS_PTR_IS_PTR(request)) {
        return UCS_PTR_STATUS(request);
    }
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    ucp_request_free(request);
    return status;
}

/* Whether the target process died: reaps it, so that a wait on a request it
 * would have answered ends instead of spinning forever */
static int span_pair_target_gone(span_pair_t *pair)
{
    struct pollfd pfd = {.fd = pair->sock, .events = POLLIN};
    int wstatus;
    char c;

    if ((pair->mode == SPAN_PAIR_REMOTE) && !pair->target_dead &&
        (poll(&pfd, 1, 0) == 1) &&
        (recv(pair->sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)) {
        /* a target sends nothing unasked: this is its connection ending */
        fprintf(stderr, "span_pair: target process %u on %s is gone (its "
                "connection closed)\n", pair->peer.pid, pair->peer.hostname);
        pair->target_dead = 1;
    }
    if ((pair->mode != SPAN_PAIR_FORK) || pair->target_dead) {
        return pair->target_dead;
    }
    if ((pair->child > 0) &&
        (waitpid(pair->child, &wstatus, WNOHANG) == pair->child)) {
        fprintf(stderr, "span_pair: target process %d died (%s %d)\n",
                (int)pair->child, WIFSIGNALED(wstatus) ? "signal" : "exit",
                WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) :
                                       WEXITSTATUS(wstatus));
        pair->child       = -1;
        pair->target_dead = 1;
    }
    return pair->target_dead;
}

/* The initiator's wait: like span_pair_wait, but gives up when the target
 * is gone */
static ucs_status_t span_pair_wait_target(span_pair_t *pair, void *request)
{
    ucs_status_t status;
    unsigned spins = 0;

    if (!UCS_PTR_IS_PTR(request)) {
        return UCS_PTR_STATUS(request);
    }
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        ucp_worker_progress(pair->worker);
        if (((++spins % 4096) == 0) && span_pair_target_gone(pair)) {
            status = UCS_ERR_CONNECTION_RESET;
            break;
        }
    }
    ucp_request_free(request);
    return status;
}

static ucs_status_t span_pair_ucp_init(const char *tls, uint64_t features,
                                       ucp_context_h *context_p,
                                       ucp_worker_h *worker_p)
{
    ucp_worker_params_t wparams = {0};
    ucp_params_t params         = {0};
    ucp_config_t *config;
    ucs_status_t status;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    status = ucp_config_modify(config, "TLS", tls);
    if (status != UCS_OK) {
        goto out_release;
    }
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = features;
    status            = ucp_init(&params, config, context_p);
    if (status != UCS_OK) {
        goto out_release;
    }
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status              = ucp_worker_create(*context_p, &wparams, worker_p);
    if (status != UCS_OK) {
        ucp_cleanup(*context_p);
    }
out_release:
    ucp_config_release(config);
    return status;
}

/* Target side */

/* VmPin of this process, in bytes */
static ucs_status_t span_pair_pinned(uint64_t *bytes)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kib;
    ucs_status_t status = UCS_ERR_NO_ELEM;

    if (f == NULL) {
        return UCS_ERR_IO_ERROR;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmPin: %lu kB", &kib) == 1) {
            *bytes = kib * 1024;
            status = UCS_OK;
            break;
        }
    }
    fclose(f);
    return status;
}

/* Registers [reg_offset, + reg_length) of region id and packs its rkey */
static void span_pair_target_register(span_pair_target_t *t, unsigned id,
                                      size_t reg_offset, size_t reg_length,
                                      span_pair_reply_t *reply, void **rkey_buf)
{
    ucp_mem_map_params_t params = {0};
    uint64_t pinned;
    size_t rkey_size;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    if (t->regions[id].mem.kind != SPAN_GPU_HOST) {
        params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        params.memory_type = span_gpu_memory_type();
    }
    params.address    = (uint8_t*)t->regions[id].buf + reg_offset;
    params.length     = reg_length;
    if (span_pair_pinned(&pinned) != UCS_OK) {
        pinned = 0;
    }
    reply->status     = ucp_mem_map(t->context, &params, &t->regions[id].memh);
    if (reply->status != UCS_OK) {
        return;
    }
    t->map_pinned = (span_pair_pinned(&t->map_pinned) == UCS_OK) ?
                    t->map_pinned - pinned : 0;
    reply->status = ucp_rkey_pack(t->context, t->regions[id].memh, rkey_buf,
                                  &rkey_size);
    if (reply->status != UCS_OK) {
        ucp_mem_unmap(t->context, t->regions[id].memh);
        return;
    }
    reply->rkey_size = rkey_size;
    reply->value[0]  = id;
    reply->value[1]  = (uintptr_t)t->regions[id].buf;
}

static ucs_status_t span_pair_target_alloc(span_pair_target_region_t *region,
                                           unsigned kind, unsigned handles,
                                           size_t length, void *at)
{
    char reason[256];
    ucs_status_t status;

    if (kind >= SPAN_GPU_KIND_LAST) {
        return UCS_ERR_INVALID_PARAM;
    }
    if ((kind != SPAN_GPU_HOST) && (getenv("SPAN_PAIR_TARGET_GPU") != NULL)) {
        /* the target's device, where it differs from the initiator's */
        setenv("SPAN_GPU_DEVICE", getenv("SPAN_PAIR_TARGET_GPU"), 1);
    }
    if ((kind != SPAN_GPU_HOST) && !span_gpu_init(reason, sizeof(reason))) {
        fprintf(stderr, "span_pair target: %s\n", reason);
        return UCS_ERR_NO_DEVICE;
    }
    status = span_gpu_alloc(kind, length, handles, at, &region->mem);
    if (status != UCS_OK) {
        fprintf(stderr, "span_pair target: cannot allocate %zu bytes of %s "
                "memory: %s\n", length, span_gpu_kind_names[kind],
                ucs_status_string(status));
    } else {
        region->buf    = region->mem.ptr;
        region->length = length;
    }
    return status;
}

static void span_pair_target_free(span_pair_target_region_t *region)
{
    span_gpu_free(&region->mem);
    region->buf = NULL;
}

/* Device memory is patterned and checked through a host copy */
static ucs_status_t span_pair_target_fill(span_pair_target_region_t *region,
                                          unsigned seed)
{
    ucs_status_t status;
    void *host;

    if (region->mem.kind == SPAN_GPU_HOST) {
        span_pair_fill(region->buf, region->length, seed, 0);
        return UCS_OK;
    }
    host = malloc(region->length);
    if (host == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    span_pair_fill(host, region->length, seed, 0);
    status = span_gpu_copy(region->buf, host, region->length);
    free(host);
    return status;
}

static size_t span_pair_target_mismatches(span_pair_target_region_t *region,
                                          size_t offset, size_t length,
                                          unsigned seed)
{
    uint8_t *buf = (uint8_t*)region->buf + offset;
    size_t count = SIZE_MAX;
    void *host;

    if (region->mem.kind == SPAN_GPU_HOST) {
        return span_pair_mismatches(buf, length, seed, offset);
    }
    host = malloc(length ? length : 1);
    if ((host != NULL) && (span_gpu_copy(host, buf, length) == UCS_OK)) {
        count = span_pair_mismatches(host, length, seed, offset);
    }
    free(host);
    return count;
}

static void span_pair_target_map(span_pair_target_t *t,
                                const span_pair_cmd_t *cmd,
                                span_pair_reply_t *reply, void **rkey_buf)
{
    size_t length = cmd->arg[0];
    unsigned id;

    for (id = 0; (id < SPAN_PAIR_MAX_REGIONS) && t->regions[id].buf; ++id) {
    }
    if (id == SPAN_PAIR_MAX_REGIONS) {
        reply->status = UCS_ERR_NO_RESOURCE;
        return;
    }
    if ((cmd->arg[1] > length) || (cmd->arg[2] > length - cmd->arg[1])) {
        reply->status = UCS_ERR_INVALID_PARAM;
        return;
    }
    reply->status = span_pair_target_alloc(&t->regions[id], cmd->id & 0xff,
                                           cmd->id >> 8, length, NULL);
    if (reply->status != UCS_OK) {
        return;
    }
    reply->status = span_pair_target_fill(&t->regions[id], cmd->arg[3]);
    if (reply->status == UCS_OK) {
        span_pair_target_register(t, id, cmd->arg[1], cmd->arg[2], reply,
                                  rkey_buf);
    }
    if (reply->status != UCS_OK) {
        span_pair_target_free(&t->regions[id]);
    }
}

/* Device memory freed and allocated again until the allocator hands out
 * the same address (cudaFree, then cudaMalloc); the misses are held
 * meanwhile, so that each retry gets another address */
static ucs_status_t span_pair_target_realloc(span_pair_target_region_t *region)
{
    span_gpu_buf_t misses[64];
    void *want = region->buf;
    unsigned i, count = 0;
    ucs_status_t status;

    span_gpu_free(&region->mem);
    do {
        status = span_gpu_alloc(region->mem.kind, region->length,
                                region->mem.handles, want, &region->mem);
        if ((status != UCS_OK) || (region->mem.ptr == want)) {
            break;
        }
        misses[count++] = region->mem;
    } while (count < sizeof(misses) / sizeof(misses[0]));
    for (i = 0; i < count; ++i) {
        span_gpu_free(&misses[i]);
    }
    region->buf = (status == UCS_OK) ? region->mem.ptr : NULL;
    return status;
}

/* The application frees the buffer and gets new memory at the same address
 * (as an allocator hands it out again), patterns it and registers it */
static void span_pair_target_remap(span_pair_target_t *t,
                                   const span_pair_cmd_t *cmd,
                                   span_pair_reply_t *reply, void **rkey_buf)
{
    span_pair_target_region_t *region = &t->regions[cmd->id];
    void *buf;

    void *old = region->buf;

    ucp_mem_unmap(t->context, region->memh);
    if (region->mem.kind == SPAN_GPU_HOST) {
        /* NOREPLACE: where another thread's mmap got the range between
         * the two calls, fail rather than overwrite its memory (issue 38) */
        munmap(region->buf, region->length);
        buf = mmap(region->buf, region->length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if ((buf != MAP_FAILED) && (buf != region->buf)) {
            munmap(buf, region->length); /* a kernel that took it as a hint */
        }
        reply->status = (buf == region->buf) ? UCS_OK : UCS_ERR_NO_MEMORY;
    } else {
        reply->status = span_pair_target_realloc(region);
    }
    if ((reply->status != UCS_OK) || (region->buf != old)) {
        reply->status = UCS_ERR_NO_MEMORY;
        region->buf   = NULL;
        return;
    }
    reply->status = span_pair_target_fill(region, cmd->arg[2]);
    if (reply->status == UCS_OK) {
        span_pair_target_register(t, cmd->id, cmd->arg[0], cmd->arg[1], reply,
                                  rkey_buf);
    }
    if (reply->status != UCS_OK) {
        span_pair_target_free(region);
    }
}

static void span_pair_target_unmap(span_pair_target_t *t, unsigned id)
{
    ucp_mem_unmap(t->context, t->regions[id].memh);
    span_pair_target_free(&t->regions[id]);
}

static void *span_pair_target_tag_post(span_pair_target_t *t, size_t length,
                                       void **buf_p)
{
    ucp_request_param_t param = {0};
    void *buf                 = malloc(length ? length : 1);

    *buf_p = buf;
    if (buf == NULL) {
        return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
    }
    memset(buf, 0, length);
    return ucp_tag_recv_nbx(t->worker, buf, length, span_pair_tag, UINT64_MAX,
                            &param);
}

static size_t span_pair_target_tag_wait(span_pair_target_t *t, void *request,
                                        void *buf, size_t length,
                                        unsigned seed, ucs_status_t *status)
{
    size_t count = SIZE_MAX;

    *status = span_pair_wait(t->worker, request);
    if (*status == UCS_OK) {
        count = span_pair_mismatches(buf, length, seed, 0);
    }
    free(buf);
    return count;
}

static int span_pair_target_valid(span_pair_target_t *t,
                                  const span_pair_cmd_t *cmd, size_t offset,
                                  size_t length)
{
    return (cmd->id < SPAN_PAIR_MAX_REGIONS) && t->regions[cmd->id].buf &&
           (offset <= t->regions[cmd->id].length) &&
           (length <= t->regions[cmd->id].length - offset);
}

/* Executes one command; returns 1 on QUIT. */
static int span_pair_target_handle(span_pair_target_t *t,
                                   const span_pair_cmd_t *cmd,
                                   span_pair_reply_t *reply, void **rkey_buf)
{
    ucs_status_t status;
    uint8_t *buf;
    void *req;

    memset(reply, 0, sizeof(*reply));
    *rkey_buf = NULL;
    if ((cmd->op == SPAN_PAIR_CMD_QUIT) || (cmd->op == SPAN_PAIR_CMD_MAP) ||
        (cmd->op == SPAN_PAIR_CMD_TAG) || (cmd->op == SPAN_PAIR_CMD_PINNED) ||
        (cmd->op == SPAN_PAIR_CMD_KILL)) {
        /* no region argument */
    } else if (!span_pair_target_valid(t, cmd, cmd->arg[0],
                                       (cmd->op == SPAN_PAIR_CMD_CHECK) ?
                                       cmd->arg[1] : 0)) {
        reply->status = UCS_ERR_INVALID_PARAM;
        return 0;
    }

    buf = (cmd->op == SPAN_PAIR_CMD_MAP) || (cmd->op == SPAN_PAIR_CMD_TAG) ||
          (cmd->op == SPAN_PAIR_CMD_QUIT) || (cmd->op == SPAN_PAIR_CMD_PINNED) ||
          (cmd->op == SPAN_PAIR_CMD_KILL) ? NULL : t->regions[cmd->id].buf;
    switch (cmd->op) {
    case SPAN_PAIR_CMD_MAP:
        span_pair_target_map(t, cmd, reply, rkey_buf);
        break;
    case SPAN_PAIR_CMD_UNMAP:
        span_pair_target_unmap(t, cmd->id);
        break;
    case SPAN_PAIR_CMD_REMAP:
        if (cmd->arg[1] > t->regions[cmd->id].length - cmd->arg[0]) {
            reply->status = UCS_ERR_INVALID_PARAM;
        } else {
            span_pair_target_remap(t, cmd, reply, rkey_buf);
        }
        break;
    case SPAN_PAIR_CMD_REFILL:
        reply->status = span_pair_target_fill(&t->regions[cmd->id],
                                              cmd->arg[1]);
        break;
    case SPAN_PAIR_CMD_CHECK:
        reply->value[0] = span_pair_target_mismatches(&t->regions[cmd->id],
                                                      cmd->arg[0], cmd->arg[1],
                                                      cmd->arg[2]);
        break;
    case SPAN_PAIR_CMD_READ64:
        if (cmd->arg[0] + sizeof(uint64_t) > t->regions[cmd->id].length) {
            reply->status = UCS_ERR_INVALID_PARAM;
        } else {
            reply->status = span_gpu_copy(&reply->value[0], buf + cmd->arg[0],
                                          sizeof(uint64_t));
        }
        break;
    case SPAN_PAIR_CMD_TAG:
        req = span_pair_target_tag_post(t, cmd->arg[0], (void**)&buf);
        reply->value[0] = span_pair_target_tag_wait(t, req, buf, cmd->arg[0],
                                                    cmd->arg[1], &status);
        reply->status   = status;
        break;
    case SPAN_PAIR_CMD_PINNED:
        reply->status   = span_pair_pinned(&reply->value[0]);
        reply->value[1] = t->map_pinned;
        break;
    case SPAN_PAIR_CMD_KILL:
        kill(getpid(), SIGKILL); /* as kill -9 from outside: no cleanup */
        break;
    case SPAN_PAIR_CMD_QUIT:
        return 1;
    default:
        reply->status = UCS_ERR_INVALID_PARAM;
    }
    return 0;
}

static void span_pair_target_cleanup(span_pair_target_t *t)
{
    unsigned id;

    for (id = 0; id < SPAN_PAIR_MAX_REGIONS; ++id) {
        if (t->regions[id].buf != NULL) {
            span_pair_target_unmap(t, id);
        }
    }
}

static int span_pair_target_serve(int sock, const char *tls, uint64_t features)
{
    span_pair_target_t t = {0};
    struct pollfd pfd    = {.fd = sock, .events = POLLIN};
    span_pair_reply_t reply;
    span_pair_cmd_t cmd;
    ucp_address_t *address;
    size_t address_length;
    uint64_t header;
    void *rkey_buf;
    int quit = 0;

    if ((span_pair_ucp_init(tls, features, &t.context, &t.worker) != UCS_OK) ||
        (ucp_worker_get_address(t.worker, &address, &address_length) !=
         UCS_OK)) {
        header = 0;
        span_pair_io(sock, &header, sizeof(header), 1);
        return 1;
    }
    header = address_length;
    if (span_pair_io(sock, &header, sizeof(header), 1) ||
        span_pair_io(sock, address, address_length, 1)) {
        return 1;
    }
    ucp_worker_release_address(t.worker, address);

    while (!quit) {
        if (poll(&pfd, 1, 0) == 0) {
            ucp_worker_progress(t.worker);
            continue;
        }
        if (span_pair_io(sock, &cmd, sizeof(cmd), 0)) {
            break; /* initiator gone */
        }
        quit = span_pair_target_handle(&t, &cmd, &reply, &rkey_buf);
        if (span_pair_io(sock, &reply, sizeof(reply), 1) ||
            span_pair_io(sock, rkey_buf, reply.rkey_size, 1)) {
            quit = 1;
        }
        if (rkey_buf != NULL) {
            ucp_rkey_buffer_release(rkey_buf);
        }
    }
    span_pair_target_cleanup(&t);
    ucp_worker_destroy(t.worker);
    ucp_cleanup(t.context);
    return 0;
}

/* Initiator side */

static ucs_status_t span_pair_call(span_pair_t *pair, span_pair_cmd_t *cmd,
                                   span_pair_reply_t *reply, void *rkey_out)
{
    void *rkey_buf;

    if (pair->mode == SPAN_PAIR_LOOPBACK) {
        span_pair_target_handle(pair->target, cmd, reply, &rkey_buf);
        if (rkey_buf != NULL) {
            memcpy(rkey_out, rkey_buf, reply->rkey_size);
            ucp_rkey_buffer_release(rkey_buf);
        }
        return reply->status;
    }
    if (span_pair_io(pair->sock, cmd, sizeof(*cmd), 1) ||
        span_pair_io(pair->sock, reply, sizeof(*reply), 0) ||
        (reply->rkey_size > SPAN_PAIR_MAX_RKEY) ||
        span_pair_io(pair->sock, rkey_out, reply->rkey_size, 0)) {
        return UCS_ERR_IO_ERROR;
    }
    return reply->status;
}

static void span_pair_ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    span_pair_t *pair = arg;

    fprintf(stderr, "span_pair: endpoint to the target failed: %s\n",
            ucs_status_string(status));
    pair->ep_error = status;
}

static ucs_status_t span_pair_connect(span_pair_t *pair,
                                      const ucp_address_t *address,
                                      unsigned flags)
{
    ucp_ep_params_t params = {0};

    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address    = address;
    if (flags & SPAN_PAIR_FLAG_PEER_ERRORS) {
        params.field_mask      |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode         = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb   = span_pair_ep_failed;
        params.err_handler.arg  = pair;
    }
    return ucp_ep_create(pair->worker, &params, &pair->ep);
}

/* The exec'ed target finds its socket and UCP settings in the environment */
static void span_pair_exec_target(int sock, const char *tls, uint64_t features,
                                  char *const argv[])
{
    char value[32];

    snprintf(value, sizeof(value), "%d", sock);
    setenv("SPAN_PAIR_SOCK", value, 1);
    snprintf(value, sizeof(value), "%" PRIu64, features);
    setenv("SPAN_PAIR_FEATURES", value, 1);
    setenv("SPAN_PAIR_TLS", tls, 1);
    execvp(argv[0], argv);
    fprintf(stderr, "span_pair: cannot run %s: %m\n", argv[0]);
}

int span_pair_target_main(void)
{
    const char *sock     = getenv("SPAN_PAIR_SOCK");
    const char *tls      = getenv("SPAN_PAIR_TLS");
    const char *features = getenv("SPAN_PAIR_FEATURES");

    if ((sock == NULL) || (tls == NULL) || (features == NULL)) {
        fprintf(stderr, "span_pair: not started by span_pair_start_exec\n");
        return 1;
    }
    return span_pair_target_serve(atoi(sock), tls,
                                  strtoull(features, NULL, 0));
}

/* The initiator's half once the target is up: the target's worker address
 * from the socket, UCP here, the endpoint */
static ucs_status_t span_pair_start_initiator(span_pair_t *pair,
                                              const char *tls,
                                              uint64_t features,
                                              unsigned flags)
{
    ucs_status_t status = UCS_ERR_IO_ERROR;
    uint64_t length;
    void *address;

    if (span_pair_io(pair->sock, &length, sizeof(length), 0) ||
        (length == 0) || (length > 65536)) {
        return UCS_ERR_IO_ERROR;
    }
    address = malloc(length);
    if ((address != NULL) &&
        !span_pair_io(pair->sock, address, length, 0)) {
        status = span_pair_ucp_init(tls, features, &pair->context,
                                    &pair->worker);
        if (status == UCS_OK) {
            status = span_pair_connect(pair, address, flags);
        }
    }
    free(address);
    return status;
}

static ucs_status_t span_pair_start_child(span_pair_t *pair, const char *tls,
                                          uint64_t features,
                                          char *const argv[])
{
    pid_t parent;
    int fds[2];

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        return UCS_ERR_IO_ERROR;
    }
    fflush(NULL);
    parent      = getpid();
    pair->child = fork();
    if (pair->child == 0) {
        /* a target outliving a crashed initiator would spin forever */
        if ((prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ||
            (getppid() != parent)) {
            _exit(1);
        }
        close(fds[0]);
        if (argv != NULL) {
            span_pair_exec_target(fds[1], tls, features, argv);
            _exit(127);
        }
        _exit(span_pair_target_serve(fds[1], tls, features));
    }
    close(fds[1]);
    pair->sock = fds[0];
    if (pair->child < 0) {
        return UCS_ERR_IO_ERROR;
    }
    return span_pair_start_initiator(pair, tls, features, 0);
}

static int span_pair_remote_exit(span_pair_t *pair);

static void span_pair_init(span_pair_t *pair, span_pair_mode_t mode)
{
    memset(pair, 0, sizeof(*pair));
    pair->mode  = mode;
    pair->sock  = -1;
    pair->child = -1;
}

ucs_status_t span_pair_start_exec(span_pair_t *pair, const char *tls,
                                  uint64_t features, char *const argv[])
{
    span_pair_init(pair, SPAN_PAIR_FORK);
    return span_pair_start_child(pair, tls, features, argv);
}

ucs_status_t span_pair_start(span_pair_t *pair, span_pair_mode_t mode,
                             const char *tls, uint64_t features)
{
    ucp_address_t *address;
    size_t address_length;
    ucs_status_t status;

    span_pair_init(pair, mode);
    if (mode == SPAN_PAIR_FORK) {
        /* Fork before UCP exists here: a child must not inherit a context */
        return span_pair_start_child(pair, tls, features, NULL);
    }
    status = span_pair_ucp_init(tls, features, &pair->context, &pair->worker);
    if (status != UCS_OK) {
        return status;
    }
    pair->target = calloc(1, sizeof(*pair->target));
    if (pair->target == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    pair->target->context = pair->context;
    pair->target->worker  = pair->worker;
    status = ucp_worker_get_address(pair->worker, &address, &address_length);
    if (status != UCS_OK) {
        return status;
    }
    status = span_pair_connect(pair, address, 0);
    ucp_worker_release_address(pair->worker, address);
    return status;
}

static void span_pair_ep_close(span_pair_t *pair)
{
    ucp_request_param_t param = {0};

    if (pair->ep == NULL) {
        return;
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    /* an endpoint UCP's error handler reported failed cannot flush */
    param.flags        = (pair->ep_error != UCS_OK) ?
                         UCP_EP_CLOSE_FLAG_FORCE : 0;
    if ((span_pair_wait_target(pair, ucp_ep_close_nbx(pair->ep, &param)) !=
         UCS_OK) && (pair->ep_error == UCS_OK)) {
        /* the endpoint failed (e.g. after a refused access): drop it */
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
        span_pair_wait_target(pair, ucp_ep_close_nbx(pair->ep, &param));
    }
    pair->ep = NULL;
}

int span_pair_stop(span_pair_t *pair)
{
    span_pair_cmd_t cmd = {.op = SPAN_PAIR_CMD_QUIT};
    span_pair_reply_t reply;
    int rc = 0, wstatus;

    span_pair_ep_close(pair);
    if (pair->mode == SPAN_PAIR_LOOPBACK) {
        if (pair->target != NULL) {
            span_pair_target_cleanup(pair->target);
            free(pair->target);
        }
    } else if (pair->child > 0) {
        span_pair_call(pair, &cmd, &reply, NULL);
        close(pair->sock);
        rc = (waitpid(pair->child, &wstatus, 0) != pair->child) ||
             !WIFEXITED(wstatus) || (WEXITSTATUS(wstatus) != 0);
    } else if ((pair->mode == SPAN_PAIR_REMOTE) && !pair->target_dead &&
               (pair->sock >= 0)) {
        rc = (span_pair_call(pair, &cmd, &reply, NULL) != UCS_OK) ||
             (span_pair_remote_exit(pair) != 0);
        close(pair->sock);
    } else if (pair->target_dead) {
        close(pair->sock);
        rc = 1;
    }
    if (pair->worker != NULL) {
        ucp_worker_destroy(pair->worker);
    }
    if (pair->context != NULL) {
        ucp_cleanup(pair->context);
    }
    memset(pair, 0, sizeof(*pair));
    return rc;
}

/* Remote mode: a server forks a target per TCP connection */

/* "host:port" into a socket address list; NULL on error (logged) */
static struct addrinfo *span_pair_resolve(const char *address, int passive)
{
    struct addrinfo hints = {0}, *list = NULL;
    char host[256];
    const char *colon = strrchr(address, ':');
    int ret;

    if ((colon == NULL) || (colon == address) ||
        ((size_t)(colon - address) >= sizeof(host))) {
        fprintf(stderr, "span_pair: '%s' is not host:port\n", address);
        return NULL;
    }
    memcpy(host, address, colon - address);
    host[colon - address] = '\0';
    hints.ai_family       = AF_INET;
    hints.ai_socktype     = SOCK_STREAM;
    hints.ai_flags        = passive ? AI_PASSIVE : 0;
    ret = getaddrinfo(host, colon + 1, &hints, &list);
    if (ret != 0) {
        fprintf(stderr, "span_pair: cannot resolve '%s': %s\n", address,
                gai_strerror(ret));
        return NULL;
    }
    return list;
}

/* Commands and replies are small and alternate: sent at once, not held
 * back for an acknowledgement (Nagle's algorithm would cost a delayed ACK
 * per reply) */
static void span_pair_sock_setup(int sock, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    int one           = 1;

    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* a peer that stops answering during the handshake ends it; 0: none */
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static double span_pair_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

/* Connects, retrying while the server is not listening yet */
static int span_pair_dial(const char *address)
{
    double deadline = span_pair_now() + SPAN_PAIR_CONNECT_S;
    struct addrinfo *list = span_pair_resolve(address, 0);
    int sock = -1, err = 0;

    while (list != NULL) {
        sock = socket(list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if ((sock < 0) ||
            (connect(sock, list->ai_addr, list->ai_addrlen) == 0)) {
            break;
        }
        err = errno;
        close(sock);
        sock = -1;
        if (((err != ECONNREFUSED) && (err != EHOSTUNREACH) &&
             (err != ENETUNREACH) && (err != ETIMEDOUT)) ||
            (span_pair_now() > deadline)) {
            break;
        }
        usleep(200000);
    }
    if ((sock < 0) && (list != NULL)) {
        fprintf(stderr, "span_pair: cannot connect to %s: %s\n", address,
                strerror(err));
    }
    if (list != NULL) {
        freeaddrinfo(list);
    }
    return sock;
}

/* The UCX_SPAN_* variables of the environment, as NUL-terminated strings
 * back to back; its length, or -1 when they do not fit */
static ssize_t span_pair_env_pack(char *buf, size_t size)
{
    extern char **environ;
    size_t used = 0, len;
    char **e;

    for (e = environ; *e != NULL; ++e) {
        if (strncmp(*e, SPAN_PAIR_ENV_PREFIX,
                    strlen(SPAN_PAIR_ENV_PREFIX)) != 0) {
            continue;
        }
        len = strlen(*e) + 1;
        if (len > size - used) {
            fprintf(stderr, "span_pair: the UCX_SPAN_* variables take more "
                    "than %zu bytes\n", size);
            return -1;
        }
        memcpy(buf + used, *e, len);
        used += len;
    }
    return used;
}

/* Sets the variables a remote initiator sent: only UCX_SPAN_* names, each
 * string NAME=VALUE, the last one ending the buffer */
static int span_pair_env_apply(char *buf, size_t length)
{
    char *p, *next, *end = buf + length, *eq;

    if ((length > 0) && (buf[length - 1] != '\0')) {
        fprintf(stderr, "span_pair target: the variables sent do not end "
                "in a NUL\n");
        return -1;
    }
    for (p = buf; p < end; p = next) {
        next = p + strlen(p) + 1;
        eq   = strchr(p, '=');
        if ((strncmp(p, SPAN_PAIR_ENV_PREFIX,
                     strlen(SPAN_PAIR_ENV_PREFIX)) != 0) || (eq == NULL)) {
            fprintf(stderr, "span_pair target: refused variable '%.64s' "
                    "(only " SPAN_PAIR_ENV_PREFIX "NAME=VALUE)\n", p);
            return -1;
        }
        *eq = '\0';
        setenv(p, eq + 1, 1);
    }
    return 0;
}

/* A server's child: the handshake, then the target's loop; its exit code
 * is its last word on the connection */
static int span_pair_remote_target(int sock)
{
    char tls[SPAN_PAIR_MAX_TLS + 1], env[SPAN_PAIR_MAX_ENV];
    span_pair_peer_t self = {0};
    span_pair_hello_t hello;
    uint64_t code;
    int rc;

    span_pair_sock_setup(sock, SPAN_PAIR_CONNECT_S * 1000);
    if (span_pair_io(sock, &hello, sizeof(hello), 0) ||
        (hello.magic != SPAN_PAIR_MAGIC) || (hello.tls_len == 0) ||
        (hello.tls_len > SPAN_PAIR_MAX_TLS) ||
        (hello.env_len > SPAN_PAIR_MAX_ENV) ||
        span_pair_io(sock, tls, hello.tls_len, 0) ||
        span_pair_io(sock, env, hello.env_len, 0)) {
        fprintf(stderr, "span_pair target: not a span_pair initiator, or "
                "one that sent too much\n");
        return 1;
    }
    tls[hello.tls_len] = '\0';
    if (span_pair_env_apply(env, hello.env_len) != 0) {
        return 1;
    }
    gethostname(self.hostname, sizeof(self.hostname) - 1);
    self.system_id = ucs_get_system_id();
    self.pid       = getpid();
    if (span_pair_io(sock, &self, sizeof(self), 1)) {
        return 1;
    }
    span_pair_sock_setup(sock, 0);
    rc   = span_pair_target_serve(sock, tls, hello.features);
    code = rc;
    span_pair_io(sock, &code, sizeof(code), 1);
    return rc;
}

/* The exit code a remote target sent after QUIT, once it cleaned up */
static int span_pair_remote_exit(span_pair_t *pair)
{
    struct pollfd pfd = {.fd = pair->sock, .events = POLLIN};
    uint64_t code;

    if ((poll(&pfd, 1, SPAN_PAIR_EXIT_WAIT_MS) != 1) ||
        span_pair_io(pair->sock, &code, sizeof(code), 0)) {
        fprintf(stderr, "span_pair: target process %u on %s did not report "
                "its exit\n", pair->peer.pid, pair->peer.hostname);
        return 1;
    }
    return code != 0;
}

static void span_pair_reap(void)
{
    int wstatus;
    pid_t pid;

    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
        if (WIFSIGNALED(wstatus)) {
            printf("span_pair server: target %d ended by signal %d\n",
                   (int)pid, WTERMSIG(wstatus));
        } else if (WEXITSTATUS(wstatus) != 0) {
            printf("span_pair server: target %d exited with %d\n", (int)pid,
                   WEXITSTATUS(wstatus));
        }
        fflush(stdout);
    }
}

int span_pair_serve(const char *address)
{
    struct addrinfo *list = span_pair_resolve(address, 1);
    struct pollfd pfd     = {.events = POLLIN};
    int one = 1, sock;
    pid_t server, pid;

    if (list == NULL) {
        return 1;
    }
    pfd.fd = socket(list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if ((pfd.fd < 0) ||
        setsockopt(pfd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(pfd.fd, list->ai_addr, list->ai_addrlen) ||
        listen(pfd.fd, 16)) {
        fprintf(stderr, "span_pair server: cannot listen at %s: %m\n",
                address);
        freeaddrinfo(list);
        return 1;
    }
    freeaddrinfo(list);
    printf("span_pair server: listening at %s\n", address);
    fflush(stdout);
    server = getpid();
    for (;;) {
        span_pair_reap();
        if (poll(&pfd, 1, 1000) != 1) {
            continue;
        }
        sock = accept4(pfd.fd, NULL, NULL, SOCK_CLOEXEC);
        if (sock < 0) {
            continue;
        }
        fflush(NULL);
        pid = fork();
        if (pid == 0) {
            /* a target outliving its server would be left spinning */
            if ((prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ||
                (getppid() != server)) {
                _exit(1);
            }
            close(pfd.fd);
            _exit(span_pair_remote_target(sock));
        }
        close(sock);
        printf("span_pair server: target %d started\n", (int)pid);
        fflush(stdout);
    }
}

ucs_status_t span_pair_start_remote(span_pair_t *pair, const char *address,
                                    const char *tls, uint64_t features,
                                    unsigned flags)
{
    span_pair_hello_t hello = {.magic = SPAN_PAIR_MAGIC, .features = features};
    char env[SPAN_PAIR_MAX_ENV];
    ssize_t env_len;

    span_pair_init(pair, SPAN_PAIR_REMOTE);
    env_len = span_pair_env_pack(env, sizeof(env));
    if ((env_len < 0) || (strlen(tls) == 0) ||
        (strlen(tls) > SPAN_PAIR_MAX_TLS)) {
        return UCS_ERR_INVALID_PARAM;
    }
    pair->sock = span_pair_dial(address);
    if (pair->sock < 0) {
        return UCS_ERR_UNREACHABLE;
    }
    span_pair_sock_setup(pair->sock, SPAN_PAIR_CONNECT_S * 1000);
    hello.tls_len = strlen(tls);
    hello.env_len = env_len;
    if (span_pair_io(pair->sock, &hello, sizeof(hello), 1) ||
        span_pair_io(pair->sock, (void*)tls, hello.tls_len, 1) ||
        span_pair_io(pair->sock, env, env_len, 1) ||
        span_pair_io(pair->sock, &pair->peer, sizeof(pair->peer), 0)) {
        fprintf(stderr, "span_pair: no target answered at %s\n", address);
        return UCS_ERR_IO_ERROR;
    }
    pair->peer.hostname[sizeof(pair->peer.hostname) - 1] = '\0';
    /* its worker address follows once its UCP is up */
    span_pair_sock_setup(pair->sock, 0);
    return span_pair_start_initiator(pair, tls, features, flags);
}

ucs_status_t span_pair_kill_target(span_pair_t *pair)
{
    span_pair_cmd_t cmd = {.op = SPAN_PAIR_CMD_KILL};

    switch (pair->mode) {
    case SPAN_PAIR_FORK:
        return (kill(pair->child, SIGKILL) == 0) ? UCS_OK : UCS_ERR_IO_ERROR;
    case SPAN_PAIR_REMOTE:
        /* no reply: it dies on reading it */
        return span_pair_io(pair->sock, &cmd, sizeof(cmd), 1) ?
               UCS_ERR_IO_ERROR : UCS_OK;
    default:
        return UCS_ERR_UNSUPPORTED;
    }
}

ucs_status_t span_pair_target_pinned(span_pair_t *pair, uint64_t *bytes,
                                     uint64_t *map_bytes)
{
    span_pair_cmd_t cmd = {.op = SPAN_PAIR_CMD_PINNED};
    span_pair_reply_t reply;
    ucs_status_t status;

    status     = span_pair_call(pair, &cmd, &reply, NULL);
    *bytes     = reply.value[0];
    *map_bytes = reply.value[1];
    return status;
}

void span_pair_ep_info(span_pair_t *pair, char *buf, size_t size)
{
    FILE *stream = fmemopen(buf, size, "w");

    buf[0] = '\0';
    if (stream != NULL) {
        ucp_ep_print_info(pair->ep, stream);
        fclose(stream);
    }
}

ucs_status_t span_pair_map(span_pair_t *pair, size_t alloc_length,
                           size_t reg_offset, size_t reg_length, unsigned seed,
                           span_pair_region_t *region)
{
    return span_pair_map_kind(pair, SPAN_GPU_HOST, 0, alloc_length,
                              reg_offset, reg_length, seed, region);
}

ucs_status_t span_pair_map_kind(span_pair_t *pair, unsigned kind,
                                unsigned handles, size_t alloc_length,
                                size_t reg_offset, size_t reg_length,
                                unsigned seed, span_pair_region_t *region)
{
    span_pair_cmd_t cmd = {.op  = SPAN_PAIR_CMD_MAP,
                           .id  = kind | (handles << 8),
                           .arg = {alloc_length, reg_offset, reg_length, seed}};
    span_pair_reply_t reply;
    uint8_t rkey_buf[SPAN_PAIR_MAX_RKEY];
    ucs_status_t status;

    memset(region, 0, sizeof(*region));
    status = span_pair_call(pair, &cmd, &reply, rkey_buf);
    if (status != UCS_OK) {
        return status;
    }
    region->id           = reply.value[0];
    region->base         = reply.value[1];
    region->alloc_length = alloc_length;
    region->reg_offset   = reg_offset;
    region->reg_length   = reg_length;
    status = ucp_ep_rkey_unpack(pair->ep, rkey_buf, &region->rkey);
    if (status != UCS_OK) {
        span_pair_unmap(pair, region);
    }
    return status;
}

void span_pair_unmap(span_pair_t *pair, span_pair_region_t *region)
{
    span_pair_cmd_t cmd = {.op = SPAN_PAIR_CMD_UNMAP, .id = region->id};
    span_pair_reply_t reply;

    if (region->rkey != NULL) {
        ucp_rkey_destroy(region->rkey);
        region->rkey = NULL;
    }
    span_pair_call(pair, &cmd, &reply, NULL);
}

ucs_status_t span_pair_remap(span_pair_t *pair, span_pair_region_t *region,
                             unsigned seed)
{
    span_pair_cmd_t cmd = {.op = SPAN_PAIR_CMD_REMAP, .id = region->id,
                           .arg = {region->reg_offset, region->reg_length,
                                   seed}};
    uint8_t rkey_buf[SPAN_PAIR_MAX_RKEY];
    span_pair_reply_t reply;
    ucs_status_t status;

    ucp_rkey_destroy(region->rkey);
    region->rkey = NULL;
    status       = span_pair_call(pair, &cmd, &reply, rkey_buf);
    if (status != UCS_OK) {
        return status;
    }
    if (reply.value[1] != region->base) {
        return UCS_ERR_NO_MEMORY; /* the address was not given again */
    }
    return ucp_ep_rkey_unpack(pair->ep, rkey_buf, &region->rkey);
}

ucs_status_t span_pair_refill(span_pair_t *pair, span_pair_region_t *region,
                              unsigned seed)
{
    span_pair_cmd_t cmd = {.op  = SPAN_PAIR_CMD_REFILL, .id = region->id,
                           .arg = {0, seed}};
    span_pair_reply_t reply;

    return span_pair_call(pair, &cmd, &reply, NULL);
}

size_t span_pair_check(span_pair_t *pair, span_pair_region_t *region,
                       size_t offset, size_t length, unsigned seed)
{
    span_pair_cmd_t cmd = {.op  = SPAN_PAIR_CMD_CHECK, .id = region->id,
                           .arg = {offset, length, seed}};
    span_pair_reply_t reply;

    if (span_pair_call(pair, &cmd, &reply, NULL) != UCS_OK) {
        return SIZE_MAX;
    }
    return reply.value[0];
}

ucs_status_t span_pair_read64(span_pair_t *pair, span_pair_region_t *region,
                              size_t offset, uint64_t *value)
{
    span_pair_cmd_t cmd = {.op  = SPAN_PAIR_CMD_READ64, .id = region->id,
                           .arg = {offset}};
    span_pair_reply_t reply;
    ucs_status_t status;

    status = span_pair_call(pair, &cmd, &reply, NULL);
    *value = reply.value[0];
    return status;
}

static ucs_status_t span_pair_flush(span_pair_t *pair, ucs_status_t status)
{
    ucp_request_param_t param = {0};
    ucs_status_t flush_status;

    flush_status = span_pair_wait_target(pair,
                                         ucp_ep_flush_nbx(pair->ep, &param));
    return (status != UCS_OK) ? status : flush_status;
}

static void span_pair_op_param(span_pair_t *pair, ucp_request_param_t *param)
{
    memset(param, 0, sizeof(*param));
    if (pair->local_cuda) {
        param->op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        param->memory_type  = span_gpu_memory_type();
    }
}

ucs_status_t span_pair_put(span_pair_t *pair, span_pair_region_t *region,
                           size_t offset, const void *buf, size_t length)
{
    ucp_request_param_t param;
    ucs_status_t status;

    span_pair_op_param(pair, &param);
    status = span_pair_wait_target(
            pair, ucp_put_nbx(pair->ep, buf, length,
                              region->base + offset, region->rkey, &param));
    return span_pair_flush(pair, status);
}

ucs_status_t span_pair_get(span_pair_t *pair, span_pair_region_t *region,
                           size_t offset, void *buf, size_t length)
{
    ucp_request_param_t param;
    ucs_status_t status;

    span_pair_op_param(pair, &param);
    status = span_pair_wait_target(
            pair, ucp_get_nbx(pair->ep, buf, length,
                              region->base + offset, region->rkey, &param));
    return span_pair_flush(pair, status);
}

ucs_status_t span_pair_rma_blocks(span_pair_t *pair,
                                  span_pair_region_t *region, size_t offset,
                                  void *local, size_t block, size_t stride,
                                  size_t count, int get, size_t kill_at,
                                  ucs_status_t *statuses)
{
    ucs_status_t status = UCS_OK, st;
    void **requests     = calloc(count, sizeof(*requests));
    ucp_request_param_t param;
    uint64_t remote;
    uint8_t *buf;
    size_t i;

    if (requests == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    span_pair_op_param(pair, &param);
    if (pair->local_memh != NULL) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh          = pair->local_memh;
    }
    pair->post_s = span_stats_now();
    for (i = 0; i < count; ++i) {
        buf         = (uint8_t*)local + (i * stride);
        remote      = region->base + offset + (i * stride);
        requests[i] = get ?
                      ucp_get_nbx(pair->ep, buf, block, remote, region->rkey,
                                  &param) :
                      ucp_put_nbx(pair->ep, buf, block, remote, region->rkey,
                                  &param);
        if ((i + 1 == kill_at) && (span_pair_kill_target(pair) != UCS_OK)) {
            status = UCS_ERR_UNSUPPORTED;
        }
    }
    pair->post_s = span_stats_now() - pair->post_s;
    for (i = 0; i < count; ++i) {
        st = span_pair_wait_target(pair, requests[i]);
        if (statuses != NULL) {
            statuses[i] = st;
        }
        if (status == UCS_OK) {
            status = st;
        }
    }
    free(requests);
    return span_pair_flush(pair, status);
}

ucs_status_t span_pair_rma_sgl(span_pair_t *pair, span_pair_region_t *region,
                               size_t offset, void *local, size_t block,
                               size_t stride, size_t count, int get,
                               size_t bad)
{
    void **buffers      = calloc(count, sizeof(*buffers));
    size_t *lengths     = calloc(count, sizeof(*lengths));
    uint64_t *addrs     = calloc(count, sizeof(*addrs));
    ucp_rkey_h *rkeys   = calloc(count, sizeof(*rkeys));
    ucp_dt_local_sgl_t lsgl;
    ucp_dt_remote_sgl_t rsgl;
    ucp_request_param_t param;
    ucs_status_t status;
    size_t i;

    if ((buffers == NULL) || (lengths == NULL) || (addrs == NULL) ||
        (rkeys == NULL)) {
        status = UCS_ERR_NO_MEMORY;
        goto out;
    }
    for (i = 0; i < count; ++i) {
        buffers[i] = (uint8_t*)local + (i * stride);
        lengths[i] = block;
        addrs[i]   = region->base + offset + (i * stride);
        rkeys[i]   = region->rkey;
    }
    if (bad > 0) { /* its last byte past the region's registration */
        addrs[bad - 1] = region->base + region->reg_offset +
                         region->reg_length - block + 1;
    }
    lsgl.field_mask = UCP_DT_LOCAL_SGL_FIELD_BUFFERS |
                      UCP_DT_LOCAL_SGL_FIELD_LENGTHS;
    lsgl.buffers    = buffers;
    lsgl.lengths    = lengths;
    rsgl.field_mask = UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS |
                      UCP_DT_REMOTE_SGL_FIELD_LENGTHS |
                      UCP_DT_REMOTE_SGL_FIELD_RKEYS;
    rsgl.remote_addrs = addrs;
    rsgl.lengths      = lengths;
    rsgl.rkeys        = rkeys;

    span_pair_op_param(pair, &param);
    param.op_attr_mask   |= UCP_OP_ATTR_FIELD_DATATYPE |
                            UCP_OP_ATTR_FIELD_REMOTE_DATATYPE |
                            UCP_OP_ATTR_FIELD_REMOTE |
                            UCP_OP_ATTR_FIELD_REMOTE_COUNT;
    param.datatype        = ucp_dt_make_sgl();
    param.remote_datatype = ucp_dt_make_sgl();
    param.remote          = &rsgl;
    param.remote_count    = count;
    pair->post_s = span_stats_now();
    status = span_pair_wait_target(
            pair, get ? ucp_get_nbx(pair->ep, &lsgl, count,
                                    UCP_REMOTE_ADDR_INVALID, UCP_RKEY_INVALID,
                                    &param) :
                        ucp_put_nbx(pair->ep, &lsgl, count,
                                    UCP_REMOTE_ADDR_INVALID, UCP_RKEY_INVALID,
                                    &param));
    pair->post_s = span_stats_now() - pair->post_s;
    status = span_pair_flush(pair, status);
out:
    free(rkeys);
    free(addrs);
    free(lengths);
    free(buffers);
    return status;
}

ucs_status_t span_pair_put_fenced(span_pair_t *pair,
                                  span_pair_region_t *region, size_t offset,
                                  void *local, size_t block, size_t count)
{
    ucs_status_t status = UCS_OK, st;
    void **requests     = calloc(count, sizeof(*requests));
    ucp_request_param_t param;
    size_t i;

    if (requests == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    span_pair_op_param(pair, &param);
    for (i = 0; i < count; ++i) {
        if ((i > 0) && (status == UCS_OK)) {
            status = ucp_worker_fence(pair->worker);
        }
        requests[i] = ucp_put_nbx(pair->ep, (uint8_t*)local + (i * block),
                                  block, region->base + offset,
                                  region->rkey, &param);
    }
    for (i = 0; i < count; ++i) {
        st     = span_pair_wait_target(pair, requests[i]);
        status = (status == UCS_OK) ? st : status;
    }
    free(requests);
    return span_pair_flush(pair, status);
}

ucs_status_t span_pair_atomic(span_pair_t *pair, span_pair_region_t *region,
                              size_t offset, ucp_atomic_op_t op,
                              uint64_t value, uint64_t compare,
                              uint64_t *result)
{
    ucp_request_param_t param = {0};
    ucs_status_t status;

    uint64_t operand = value;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype     = ucp_dt_make_contig(sizeof(uint64_t));
    if (result != NULL) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        param.reply_buffer  = result;
        if (op == UCP_ATOMIC_OP_CSWAP) {
            /* UCP compares with the operand and swaps in the reply buffer */
            operand = compare;
            *result = value;
        }
    }
    status = span_pair_wait_target(
            pair, ucp_atomic_op_nbx(pair->ep, op, &operand, 1,
                                    region->base + offset, region->rkey,
                                    &param));
    return span_pair_flush(pair, status);
}

size_t span_pair_tag_send(span_pair_t *pair, size_t length, unsigned seed,
                          ucs_status_t *status)
{
    span_pair_cmd_t cmd = {.op = SPAN_PAIR_CMD_TAG, .arg = {length, seed}};
    ucp_request_param_t param = {0};
    span_pair_reply_t reply;
    ucs_status_t recv_status;
    void *rbuf, *rreq, *sreq;
    size_t count = SIZE_MAX;
    uint8_t *buf;

    buf = malloc(length ? length : 1);
    if (buf == NULL) {
        *status = UCS_ERR_NO_MEMORY;
        return SIZE_MAX;
    }
    span_pair_fill(buf, length, seed, 0);
    if (pair->mode == SPAN_PAIR_LOOPBACK) {
        rreq = span_pair_target_tag_post(pair->target, length, &rbuf);
        sreq = ucp_tag_send_nbx(pair->ep, buf, length, span_pair_tag, &param);
        *status = span_pair_wait_target(pair, sreq);
        count   = span_pair_target_tag_wait(pair->target, rreq, rbuf, length,
                                            seed, &recv_status);
        if (*status == UCS_OK) {
            *status = recv_status;
        }
    } else if (!span_pair_io(pair->sock, &cmd, sizeof(cmd), 1)) {
        sreq    = ucp_tag_send_nbx(pair->ep, buf, length, span_pair_tag,
                                   &param);
        *status = span_pair_wait_target(pair, sreq);
        if (span_pair_io(pair->sock, &reply, sizeof(reply), 0)) {
            *status = UCS_ERR_IO_ERROR;
        } else if (*status == UCS_OK) {
            *status = reply.status;
            count   = reply.value[0];
        }
    } else {
        *status = UCS_ERR_IO_ERROR;
    }
    free(buf);
    return count;
}
