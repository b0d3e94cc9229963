/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An emulated HSA runtime (libhsa-runtime64.so.1, symbols of version
 * ROCR_1), for tests only: see test/rocm_emu/README for what it models and
 * what it does not.
 *
 * "Device memory" is host memory: every allocation is a memfd mapped into
 * an address range reserved for its device (an arena), so that an address
 * tells the device, an IPC handle can name the memfd for another process to
 * open, and memory freed and allocated again comes back at the same
 * address. A copy engine thread runs async copies and decrements their
 * completion signals. Every call takes one lock: tests, not speed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hsa_emu.h"

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <time.h>
#include <unistd.h>

#define EMU_GPUS_MAX      8
#define EMU_PAGE          4096ull
#define EMU_ARENA_DEFAULT (256ull << 30)
#define EMU_MEM_DEFAULT   (64ull << 30)
#define EMU_IPC_MAGIC     0x554d4548u /* "HEMU" */
#define EMU_SIGNAL_MAGIC  0x4c4e4753494d4548ull
#define EMU_VMM_MAGIC     0x4d4d56554d4548ull
#define EMU_MEMFD_POOL    "hsa-emu dev="
#define EMU_MEMFD_VMM     "hsa-emu-vmm dev="
#define EMU_DRI_DEFAULT   "/dev/dri"
#define EMU_FAIL_MAX      16

typedef struct emu_agent {
    int                device;   /* -1: the CPU */
    hsa_device_type_t  type;
} emu_agent_t;

typedef struct emu_pool {
    emu_agent_t *agent;
} emu_pool_t;

/* Memory the runtime knows: ranges never overlap, but for locked host
 * memory (kept apart) */
typedef struct emu_rec {
    hsa_emu_kind_t kind;
    uint64_t       base;
    uint64_t       size;
    int            arena;
    int            device;     /* -1: host */
    int            memfd;      /* POOL, IPC: the memory; else -1 */
    uint64_t       ino;        /* of memfd */
    uint64_t       agent;      /* LOCKED: where devices see base */
    int            hip_device; /* LOCKED: hipHostRegister's device; or -1 */
    uint64_t       buffer_id;
    void           *user_data;
    hsa_emu_vmm_t  *vmm;       /* VMM: the handle mapped here */
    uint32_t       access;     /* VMM: devices granted access (bits) */
} emu_rec_t;

struct hsa_emu_vmm {
    uint64_t magic;
    int      refs;             /* the handle's and each mapping's */
    int      memfd;
    int      device;
    int      imported;         /* another process's memory: not counted */
    uint64_t size;
    uint32_t handle_types;
};

typedef struct emu_signal {
    uint64_t              magic;
    _Atomic int64_t       value;
} emu_signal_t;

typedef struct emu_copy {
    struct emu_copy *next;
    void            *dst;
    const void      *src;
    size_t          size;
    uint32_t        num_deps;
    hsa_signal_t    *deps;
    hsa_signal_t    signal;
} emu_copy_t;

typedef struct emu_fail {
    char     name[64];
    unsigned nth;       /* 0: every call */
    int      onwards;   /* the nth and later */
    unsigned calls;
} emu_fail_t;

static struct {
    pthread_mutex_t lock;
    int             inits;
    int             ready;       /* arenas reserved, agents made */
    int             num_gpus;
    emu_agent_t     agents[EMU_GPUS_MAX + 1]; /* [0]: the CPU */
    emu_pool_t      pools[EMU_GPUS_MAX + 1];
    /* GPUs, host pool, VMM, agent addresses of locked memory */
    uint64_t        arena[EMU_GPUS_MAX + 3];
    uint64_t        arena_size;
    uint64_t        mem_size;                 /* per device */
    uint64_t        used[EMU_GPUS_MAX + 1];
    char            gfx[64];
    int             xgmi;
    emu_rec_t       *recs;                    /* sorted by base */
    size_t          num_recs, max_recs;
    emu_rec_t       *locked;
    size_t          num_locked, max_locked;
    emu_rec_t       *resv;                    /* VMM reservations */
    size_t          num_resv, max_resv;
    /* copy engine */
    pthread_t       thread;
    int             thread_running;
    pthread_cond_t  cond;
    pthread_cond_t  idle;
    emu_copy_t      *head, *tail;
    uint64_t        queued, done;
    uint64_t        copy_delay_us;
    int             fault_returns;
    int             lock_alias;  /* agent pointers of locked memory differ */
    char            dri[PATH_MAX]; /* device files live here; "": memfds */
    unsigned        dri_seq;
    emu_fail_t      fail[EMU_FAIL_MAX];
    unsigned        num_fail;
} emu = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER
};

static _Atomic uint64_t emu_next_buffer_id = 1;

#define EMU_ARENA_HOST (emu.num_gpus)
#define EMU_ARENA_VMM  (emu.num_gpus + 1)
#define EMU_ARENA_AGENT (emu.num_gpus + 2)
#define EMU_NUM_ARENAS (emu.num_gpus + 3)

/* ---- failure injection ------------------------------------------------ */

static int emu_fail_parse(const char *spec)
{
    char buf[1024], *save = NULL, *item, *at;
    emu_fail_t *f;

    emu.num_fail = 0;
    if ((spec == NULL) || (*spec == '\0')) {
        return 0;
    }
    if (strlen(spec) >= sizeof(buf)) {
        return -1;
    }
    strcpy(buf, spec);
    for (item = strtok_r(buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (emu.num_fail == EMU_FAIL_MAX) {
            return -1;
        }
        f = &emu.fail[emu.num_fail];
        memset(f, 0, sizeof(*f));
        at = strchr(item, '@');
        if (at != NULL) {
            *at = '\0';
            f->nth     = strtoul(at + 1, &at, 10);
            f->onwards = (*at == '+');
            if ((f->nth == 0) || (*at != '\0' && strcmp(at, "+"))) {
                return -1;
            }
        }
        if ((*item == '\0') || (strlen(item) >= sizeof(f->name))) {
            return -1;
        }
        strcpy(f->name, item);
        ++emu.num_fail;
    }
    return 0;
}

int hsa_emu_fail(const char *spec)
{
    int ret;

    pthread_mutex_lock(&emu.lock);
    ret = emu_fail_parse(spec);
    if (ret != 0) {
        emu.num_fail = 0;
    }
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

static int emu_should_fail_locked(const char *name)
{
    emu_fail_t *f;
    int fail = 0;
    unsigned i;

    for (i = 0; i < emu.num_fail; ++i) {
        f = &emu.fail[i];
        if (strcmp(f->name, name)) {
            continue;
        }
        ++f->calls;
        fail |= (f->nth == 0) || (f->calls == f->nth) ||
                (f->onwards && (f->calls > f->nth));
    }
    if (fail) {
        fprintf(stderr, "hsa emu: %s fails (injected)\n", name);
    }
    return fail;
}

int hsa_emu_should_fail(const char *name)
{
    int fail;

    pthread_mutex_lock(&emu.lock);
    fail = emu_should_fail_locked(name);
    pthread_mutex_unlock(&emu.lock);
    return fail;
}

int hsa_emu_set(const char *name, uint64_t value)
{
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    if (!strcmp(name, "copy_delay_us")) {
        emu.copy_delay_us = value;
    } else if (!strcmp(name, "fault")) {
        emu.fault_returns = (value != 0);
    } else if (!strcmp(name, "lock_alias") && (emu.num_locked == 0)) {
        emu.lock_alias = (value != 0);
    } else {
        ret = -1;
    }
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

/* ---- setup -------------------------------------------------------------- */

static uint64_t emu_env_u64(const char *name, uint64_t dflt)
{
    const char *value = getenv(name);
    char *end;
    uint64_t v;

    if ((value == NULL) || (*value == '\0')) {
        return dflt;
    }
    v = strtoull(value, &end, 0);
    switch (*end) {
    case 'g': case 'G': v <<= 30; break;
    case 'm': case 'M': v <<= 20; break;
    case 'k': case 'K': v <<= 10; break;
    default: break;
    }
    return v;
}

static void emu_atfork_child(void)
{
    /* the copy thread is not in the child; its copies are the parent's */
    emu.thread_running = 0;
    emu.head = emu.tail = NULL;
    emu.done = emu.queued;
    pthread_mutex_init(&emu.lock, NULL);
}

/*
 * Where device memory files are made. UCX finds ROCm memory allocated
 * before its first lookup by scanning /proc/self/maps for paths that
 * start with "/dev/dri" (ucm/rocm/rocmmem.c), as the real runtime maps
 * memory through a render node there; a memfd shows as "/memfd:...", so
 * device memory is a file made and unlinked at once in HSA_EMU_DRI_DIR
 * (default /dev/dri, made where missing and allowed). Only on tmpfs (as
 * /dev is): an IPC handle tells memory apart by inode, which tmpfs never
 * gives twice and a disk file system reuses at once. Where that cannot be,
 * or HSA_EMU_DRI_DIR is empty, memfds: hsa_emu_dri() tells tests.
 */
static void emu_dri_setup(void)
{
    const char *dir = getenv("HSA_EMU_DRI_DIR");
    char probe[PATH_MAX + 64];
    struct statfs fs;
    int fd;

    emu.dri[0] = '\0';
    if (dir == NULL) {
        dir = EMU_DRI_DEFAULT;
    } else if (*dir == '\0') {
        return;
    }
    if (((mkdir(dir, 0755) != 0) && (errno != EEXIST)) ||
        (statfs(dir, &fs) != 0) || (fs.f_type != TMPFS_MAGIC)) {
        return;
    }
    snprintf(probe, sizeof(probe), "%s/hsa-emu probe %d", dir, getpid());
    fd = open(probe, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        return;
    }
    unlink(probe);
    close(fd);
    snprintf(emu.dri, sizeof(emu.dri), "%s", dir);
}

static hsa_status_t emu_setup(void)
{
    const char *gfx = getenv("HSA_EMU_GFX");
    const char *link = getenv("HSA_EMU_LINK");
    void *arena;
    int i;

    emu.num_gpus   = (int)emu_env_u64("HSA_EMU_GPUS", 1);
    emu.arena_size = emu_env_u64("HSA_EMU_ARENA_SIZE", EMU_ARENA_DEFAULT);
    emu.mem_size   = emu_env_u64("HSA_EMU_MEM_SIZE", EMU_MEM_DEFAULT);
    emu.copy_delay_us = emu_env_u64("HSA_EMU_COPY_DELAY_US", 0);
    emu.fault_returns = (emu_env_u64("HSA_EMU_FAULT_RETURNS", 0) != 0);
    emu.lock_alias    = (emu_env_u64("HSA_EMU_LOCK_ALIAS", 1) != 0);
    emu_dri_setup();
    if ((emu.num_gpus < 0) || (emu.num_gpus > EMU_GPUS_MAX) ||
        (emu.arena_size % EMU_PAGE) || (emu.arena_size == 0)) {
        fprintf(stderr, "hsa emu: HSA_EMU_GPUS (0-%d) or HSA_EMU_ARENA_SIZE "
                "out of range\n", EMU_GPUS_MAX);
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if (emu_fail_parse(getenv("HSA_EMU_FAIL")) != 0) {
        fprintf(stderr, "hsa emu: malformed HSA_EMU_FAIL='%s'\n",
                getenv("HSA_EMU_FAIL"));
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    snprintf(emu.gfx, sizeof(emu.gfx), "%s", (gfx != NULL) ? gfx : "gfx90a");
    emu.xgmi = (link != NULL) && !strcmp(link, "xgmi");

    emu.agents[0].device = -1;
    emu.agents[0].type   = HSA_DEVICE_TYPE_CPU;
    emu.pools[0].agent   = &emu.agents[0];
    for (i = 0; i < emu.num_gpus; ++i) {
        emu.agents[i + 1].device = i;
        emu.agents[i + 1].type   = HSA_DEVICE_TYPE_GPU;
        emu.pools[i + 1].agent   = &emu.agents[i + 1];
    }
    for (i = 0; i < EMU_NUM_ARENAS; ++i) {
        arena = mmap(NULL, emu.arena_size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (arena == MAP_FAILED) {
            fprintf(stderr, "hsa emu: cannot reserve an arena of %lu bytes: "
                    "%m\n", (unsigned long)emu.arena_size);
            while (i-- > 0) {
                munmap((void*)emu.arena[i], emu.arena_size);
            }
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        emu.arena[i] = (uintptr_t)arena;
    }
    pthread_atfork(NULL, NULL, emu_atfork_child);
    emu.ready = 1;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_init(void)
{
    hsa_status_t status = HSA_STATUS_SUCCESS;

    pthread_mutex_lock(&emu.lock);
    if (!emu.ready) {
        status = emu_setup();
    }
    /* no /dev/kfd: what the real runtime says on a machine without a GPU */
    if ((status == HSA_STATUS_SUCCESS) && emu_should_fail_locked("hsa_init")) {
        status = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    if (status == HSA_STATUS_SUCCESS) {
        ++emu.inits;
    }
    pthread_mutex_unlock(&emu.lock);
    return status;
}

hsa_status_t hsa_shut_down(void)
{
    hsa_status_t status = HSA_STATUS_SUCCESS;

    pthread_mutex_lock(&emu.lock);
    if (emu.inits == 0) {
        status = HSA_STATUS_ERROR_NOT_INITIALIZED;
    } else {
        --emu.inits; /* memory stays: the tests outlive it */
    }
    pthread_mutex_unlock(&emu.lock);
    return status;
}

static int emu_live(void)
{
    return emu.inits > 0;
}

#define EMU_ENTER(_name) \
    pthread_mutex_lock(&emu.lock); \
    if (!emu_live()) { \
        pthread_mutex_unlock(&emu.lock); \
        return HSA_STATUS_ERROR_NOT_INITIALIZED; \
    } \
    if (emu_should_fail_locked(_name)) { \
        pthread_mutex_unlock(&emu.lock); \
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES; \
    }

#define EMU_RETURN(_status) \
    do { \
        hsa_status_t _s = (_status); \
        pthread_mutex_unlock(&emu.lock); \
        return _s; \
    } while (0)

hsa_status_t hsa_status_string(hsa_status_t status, const char **string)
{
    switch (status) {
    case HSA_STATUS_SUCCESS:
        *string = "HSA_STATUS_SUCCESS: The function has been executed "
                  "successfully.";
        return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_INVALID_ARGUMENT:
        *string = "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual "
                  "arguments does not meet a precondition stated in the "
                  "documentation of the corresponding formal argument.";
        return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES:
        *string = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed "
                  "to allocate the necessary resources.";
        return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_NOT_INITIALIZED:
        *string = "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than "
                  "hsa_init has been invoked while the reference count of "
                  "the HSA runtime is zero.";
        return HSA_STATUS_SUCCESS;
    default:
        *string = "HSA_STATUS_ERROR: A generic error has occurred.";
        return HSA_STATUS_SUCCESS;
    }
}

hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void *value)
{
    EMU_ENTER("hsa_system_get_info")
    switch ((int)attribute) {
    case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY:
        *(uint64_t*)value = 1000000000ull;
        EMU_RETURN(HSA_STATUS_SUCCESS);
    case HSA_SYSTEM_INFO_VERSION_MAJOR:
        *(uint16_t*)value = 1;
        EMU_RETURN(HSA_STATUS_SUCCESS);
    case HSA_SYSTEM_INFO_VERSION_MINOR:
        *(uint16_t*)value = 1;
        EMU_RETURN(HSA_STATUS_SUCCESS);
    default:
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
}

/* ---- agents and pools ------------------------------------------------- */

static emu_agent_t *emu_agent(hsa_agent_t agent)
{
    int i;

    for (i = 0; i <= emu.num_gpus; ++i) {
        if (agent.handle == (uintptr_t)&emu.agents[i]) {
            return &emu.agents[i];
        }
    }
    return NULL;
}

static hsa_agent_t emu_agent_handle(int device)
{
    hsa_agent_t agent = {0};

    if (device < emu.num_gpus) {
        agent.handle = (uintptr_t)&emu.agents[device + 1];
    }
    return agent;
}

static emu_pool_t *emu_pool(hsa_amd_memory_pool_t pool)
{
    int i;

    for (i = 0; i <= emu.num_gpus; ++i) {
        if (pool.handle == (uintptr_t)&emu.pools[i]) {
            return &emu.pools[i];
        }
    }
    return NULL;
}

hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t, void*),
                                void *data)
{
    hsa_agent_t agent;
    hsa_status_t status = HSA_STATUS_SUCCESS;
    int i, n;

    EMU_ENTER("hsa_iterate_agents")
    n = emu.num_gpus;
    pthread_mutex_unlock(&emu.lock);
    for (i = 0; (i <= n) && (status == HSA_STATUS_SUCCESS); ++i) {
        agent.handle = (uintptr_t)&emu.agents[i];
        status       = callback(agent, data);
    }
    return status;
}

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute,
                                void *value)
{
    emu_agent_t *a;

    EMU_ENTER("hsa_agent_get_info")
    a = emu_agent(agent);
    if (a == NULL) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    }
    switch ((int)attribute) {
    case HSA_AGENT_INFO_DEVICE:
        *(hsa_device_type_t*)value = a->type;
        break;
    case HSA_AGENT_INFO_NAME:
        memset(value, 0, 64);
        snprintf(value, 64, "%s", (a->device < 0) ? "emulated CPU" : emu.gfx);
        break;
    case HSA_AGENT_INFO_VENDOR_NAME:
        memset(value, 0, 64);
        snprintf(value, 64, "%s", (a->device < 0) ? "CPU" : "AMD");
        break;
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME:
        memset(value, 0, 64);
        snprintf(value, 64, "%s", (a->device < 0) ? "emulated CPU" :
                                  "emulated AMD GPU");
        break;
    case HSA_AGENT_INFO_NODE:
        *(uint32_t*)value = a->device + 1;
        break;
    case HSA_AMD_AGENT_INFO_BDFID:
        /* bus 0xe0 + device, slot 0: no such device in sysfs */
        *(uint32_t*)value = (a->device < 0) ? 0 : ((0xe0u + a->device) << 8);
        break;
    case HSA_AMD_AGENT_INFO_DOMAIN:
        *(uint32_t*)value = 0;
        break;
    default:
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

hsa_status_t hsa_amd_agent_iterate_memory_pools(
        hsa_agent_t agent,
        hsa_status_t (*callback)(hsa_amd_memory_pool_t, void*), void *data)
{
    hsa_amd_memory_pool_t pool;
    emu_agent_t *a;

    EMU_ENTER("hsa_amd_agent_iterate_memory_pools")
    a = emu_agent(agent);
    pthread_mutex_unlock(&emu.lock);
    if (a == NULL) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    pool.handle = (uintptr_t)&emu.pools[a->device + 1];
    return callback(pool, data);
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t memory_pool,
                                          hsa_amd_memory_pool_info_t attribute,
                                          void *value)
{
    emu_pool_t *pool;

    EMU_ENTER("hsa_amd_memory_pool_get_info")
    pool = emu_pool(memory_pool);
    if (pool == NULL) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    switch ((int)attribute) {
    case HSA_AMD_MEMORY_POOL_INFO_SEGMENT:
        *(hsa_amd_segment_t*)value = HSA_AMD_SEGMENT_GLOBAL;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
        *(uint32_t*)value = (pool->agent->device < 0) ?
                            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED :
                            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_SIZE:
    case HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE:
        *(size_t*)value = emu.mem_size;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED:
        *(bool*)value = true;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE:
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT:
        *(size_t*)value = EMU_PAGE;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL:
        *(bool*)value = (pool->agent->device < 0);
        break;
    default:
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

hsa_status_t
hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent,
                                   hsa_amd_memory_pool_t memory_pool,
                                   hsa_amd_agent_memory_pool_info_t attribute,
                                   void *value)
{
    hsa_amd_memory_pool_link_info_t *link = value;
    emu_agent_t *a;
    emu_pool_t *pool;

    EMU_ENTER("hsa_amd_agent_memory_pool_get_info")
    a    = emu_agent(agent);
    pool = emu_pool(memory_pool);
    if ((a == NULL) || (pool == NULL)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    switch ((int)attribute) {
    case HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS:
        *(hsa_amd_memory_pool_access_t*)value =
                (a == pool->agent) || (pool->agent->device < 0) ?
                HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT :
                HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
        break;
    case HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS:
        *(uint32_t*)value = (a == pool->agent) ? 0 : 1;
        break;
    case HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO:
        memset(link, 0, sizeof(*link));
        link->link_type = ((a->device >= 0) && (pool->agent->device >= 0) &&
                           emu.xgmi) ? HSA_AMD_LINK_INFO_TYPE_XGMI :
                                       HSA_AMD_LINK_INFO_TYPE_PCIE;
        link->atomic_support_32bit = link->atomic_support_64bit = true;
        break;
    default:
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

/* ---- the memory table ------------------------------------------------- */

static uint64_t emu_round(uint64_t size)
{
    return (size + EMU_PAGE - 1) & ~(EMU_PAGE - 1);
}

static emu_rec_t *emu_find(uint64_t addr)
{
    size_t i;

    for (i = 0; i < emu.num_recs; ++i) {
        if ((addr >= emu.recs[i].base) &&
            (addr - emu.recs[i].base < emu.recs[i].size)) {
            return &emu.recs[i];
        }
    }
    return NULL;
}

static emu_rec_t *emu_find_locked_host(uint64_t addr)
{
    size_t i;

    for (i = 0; i < emu.num_locked; ++i) {
        if ((addr >= emu.locked[i].base) &&
            (addr - emu.locked[i].base < emu.locked[i].size)) {
            return &emu.locked[i];
        }
    }
    return NULL;
}

/* Locked host memory by the address devices use (its agent pointer) */
static emu_rec_t *emu_find_locked_agent(uint64_t addr)
{
    size_t i;

    for (i = 0; i < emu.num_locked; ++i) {
        if ((addr >= emu.locked[i].agent) &&
            (addr - emu.locked[i].agent < emu.locked[i].size)) {
            return &emu.locked[i];
        }
    }
    return NULL;
}

/* Where the CPU reaches what a device reaches at addr */
static void *emu_cpu_addr(const void *addr)
{
    const emu_rec_t *rec;

    if (emu_find((uintptr_t)addr) != NULL) {
        return (void*)addr;
    }
    rec = emu_find_locked_agent((uintptr_t)addr);
    return (rec == NULL) ? (void*)addr :
           (void*)(rec->base + ((uintptr_t)addr - rec->agent));
}

static int emu_grow(emu_rec_t **array, size_t count, size_t *max)
{
    emu_rec_t *grown;
    size_t n;

    if (count < *max) {
        return 0;
    }
    n     = (*max == 0) ? 64 : (*max * 2);
    grown = realloc(*array, n * sizeof(**array));
    if (grown == NULL) {
        return -1;
    }
    *array = grown;
    *max   = n;
    return 0;
}

static emu_rec_t *emu_insert(const emu_rec_t *rec)
{
    size_t i;

    if (emu_grow(&emu.recs, emu.num_recs, &emu.max_recs) != 0) {
        return NULL;
    }
    for (i = emu.num_recs; (i > 0) && (emu.recs[i - 1].base > rec->base); --i) {
        emu.recs[i] = emu.recs[i - 1];
    }
    emu.recs[i] = *rec;
    ++emu.num_recs;
    return &emu.recs[i];
}

static void emu_remove(emu_rec_t *rec)
{
    size_t i = rec - emu.recs;

    memmove(&emu.recs[i], &emu.recs[i + 1],
            (emu.num_recs - i - 1) * sizeof(*rec));
    --emu.num_recs;
}

static int emu_in_arena(int arena, uint64_t base)
{
    return (base >= emu.arena[arena]) &&
           (base - emu.arena[arena] < emu.arena_size);
}

/* The lowest free range of size bytes in an arena, aligned: memory freed
 * and allocated again of its size lands where it was */
static int emu_place(int arena, uint64_t size, uint64_t align, uint64_t *addr_p)
{
    uint64_t start = emu.arena[arena], end = start + emu.arena_size;
    uint64_t cur   = start, base, top;
    const emu_rec_t *list;
    size_t i, n;
    int moved = 1;

    if (align < EMU_PAGE) {
        align = EMU_PAGE;
    }
    list = (arena == EMU_ARENA_VMM)   ? emu.resv :
           (arena == EMU_ARENA_AGENT) ? emu.locked : emu.recs;
    n    = (arena == EMU_ARENA_VMM)   ? emu.num_resv :
           (arena == EMU_ARENA_AGENT) ? emu.num_locked : emu.num_recs;
    while (moved) {
        moved = 0;
        cur   = (cur + align - 1) & ~(align - 1);
        for (i = 0; i < n; ++i) {
            base = list[i].base;
            top  = base + list[i].size;
            if (arena == EMU_ARENA_AGENT) {
                /* whole pages, and a page apart: a device copy never runs
                 * from one locked buffer into the next */
                base = list[i].agent & ~(EMU_PAGE - 1);
                top  = emu_round(list[i].agent + list[i].size) + EMU_PAGE;
            }
            if ((list[i].arena == arena) && (base < cur + size) &&
                (top > cur)) {
                cur   = (top + align - 1) & ~(align - 1);
                moved = 1;
            }
        }
    }
    if ((cur + size > end) || (cur + size < cur)) {
        return -1;
    }
    *addr_p = cur;
    return 0;
}

/* Back to reserved address space: the next access faults */
static void emu_release_va(uint64_t base, uint64_t size)
{
    mmap((void*)base, size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

static int emu_memfd(const char *prefix, int device, uint64_t size,
                     uint64_t *ino_p)
{
    char name[64], path[PATH_MAX + 128];
    struct stat st;
    int fd;

    if (emu.dri[0] != '\0') {
        /* made and unlinked at once: nothing stays in the directory, and
         * the name (pid, sequence) is this process's alone meanwhile */
        snprintf(path, sizeof(path), "%s/%s%d %d.%u", emu.dri, prefix,
                 device, getpid(), emu.dri_seq++);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            unlink(path);
        }
    } else {
        snprintf(name, sizeof(name), "%s%d", prefix, device);
        fd = memfd_create(name, MFD_CLOEXEC);
    }
    if (fd < 0) {
        return -1;
    }
    if ((ftruncate(fd, size) != 0) || (fstat(fd, &st) != 0)) {
        close(fd);
        return -1;
    }
    *ino_p = st.st_ino;
    return fd;
}

/* ---- allocation ------------------------------------------------------- */

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t memory_pool,
                                          size_t size, uint32_t flags,
                                          void **ptr)
{
    emu_rec_t rec = {.kind = HSA_EMU_POOL};
    emu_pool_t *pool;
    uint64_t addr, rounded = emu_round(size);
    void *mapped;

    EMU_ENTER("hsa_amd_memory_pool_allocate")
    pool = emu_pool(memory_pool);
    if ((pool == NULL) || (size == 0) || (ptr == NULL)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    rec.device = pool->agent->device;
    rec.arena  = (rec.device < 0) ? EMU_ARENA_HOST : rec.device;
    if ((emu.used[rec.device + 1] + rounded > emu.mem_size) ||
        (emu_place(rec.arena, rounded, EMU_PAGE, &addr) != 0)) {
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    rec.memfd = emu_memfd(EMU_MEMFD_POOL, rec.device, rounded, &rec.ino);
    if (rec.memfd < 0) {
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    mapped = mmap((void*)addr, rounded, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_FIXED, rec.memfd, 0);
    if (mapped == MAP_FAILED) {
        close(rec.memfd);
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    rec.base      = addr;
    rec.size      = rounded;
    rec.buffer_id = emu_next_buffer_id++;
    if (emu_insert(&rec) == NULL) {
        emu_release_va(addr, rounded);
        close(rec.memfd);
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    emu.used[rec.device + 1] += rounded;
    *ptr = (void*)addr;
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

hsa_status_t hsa_amd_memory_pool_free(void *ptr)
{
    emu_rec_t *rec;

    EMU_ENTER("hsa_amd_memory_pool_free")
    rec = emu_find((uintptr_t)ptr);
    if ((rec == NULL) || (rec->kind != HSA_EMU_POOL) ||
        (rec->base != (uintptr_t)ptr)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    emu_release_va(rec->base, rec->size);
    close(rec->memfd); /* importers' mappings keep the memory */
    emu.used[rec->device + 1] -= rec->size;
    emu_remove(rec);
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

/* ---- pointer info ----------------------------------------------------- */

hsa_emu_range_t hsa_emu_lookup(uint64_t addr)
{
    hsa_emu_range_t range = {.kind = HSA_EMU_NONE, .device = -1,
                             .hip_device = -1};
    const emu_rec_t *rec;
    size_t i;

    pthread_mutex_lock(&emu.lock);
    rec = emu_find(addr);
    if (rec == NULL) {
        rec = emu_find_locked_host(addr);
    }
    if (rec == NULL) {
        rec = emu_find_locked_agent(addr);
    }
    if (rec == NULL) {
        for (i = 0; i < emu.num_resv; ++i) {
            if ((addr >= emu.resv[i].base) &&
                (addr - emu.resv[i].base < emu.resv[i].size)) {
                rec = &emu.resv[i];
            }
        }
    }
    if (rec != NULL) {
        range.kind         = rec->kind;
        range.base         = rec->base;
        range.size         = rec->size;
        range.device       = rec->device;
        range.buffer_id    = rec->buffer_id;
        range.vmm          = rec->vmm;
        range.handle_types = (rec->vmm != NULL) ? rec->vmm->handle_types : 0;
        range.host_base    = rec->base;
        range.agent_base   = rec->base;
        if (rec->kind == HSA_EMU_LOCKED) {
            range.agent_base = rec->agent;
            range.hip_device = rec->hip_device;
            /* in the address space of addr: host, else agent */
            if ((addr < rec->base) || (addr - rec->base >= rec->size)) {
                range.base = rec->agent;
            }
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return range;
}

const char *hsa_emu_dri(void)
{
    return emu.dri;
}

int hsa_emu_gpu_count(void)
{
    int n;

    pthread_mutex_lock(&emu.lock);
    n = emu.ready ? emu.num_gpus : 0;
    pthread_mutex_unlock(&emu.lock);
    return n;
}

hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info,
                                  void *(*alloc)(size_t),
                                  uint32_t *num_agents_accessible,
                                  hsa_agent_t **accessible)
{
    hsa_amd_pointer_info_t out = {.size = sizeof(out)};
    const emu_rec_t *rec;
    uint32_t size;
    int i;

    EMU_ENTER("hsa_amd_pointer_info")
    if ((ptr == NULL) || (info == NULL) || (info->size < sizeof(uint32_t))) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    rec = emu_find((uintptr_t)ptr);
    if (rec == NULL) {
        rec = emu_find_locked_host((uintptr_t)ptr);
    }
    if (rec == NULL) {
        rec = emu_find_locked_agent((uintptr_t)ptr);
    }
    if (rec == NULL) {
        out.type             = HSA_EXT_POINTER_TYPE_UNKNOWN;
        out.agentBaseAddress = (void*)ptr;
        out.hostBaseAddress  = (void*)ptr;
    } else {
        out.type = (rec->kind == HSA_EMU_IPC)    ? HSA_EXT_POINTER_TYPE_IPC :
                   (rec->kind == HSA_EMU_LOCKED) ? HSA_EXT_POINTER_TYPE_LOCKED :
                                                   HSA_EXT_POINTER_TYPE_HSA;
        /* locked: by its host or its agent pointer alike, both bases */
        out.agentBaseAddress = (void*)((rec->kind == HSA_EMU_LOCKED) ?
                                       rec->agent : rec->base);
        out.hostBaseAddress  = (void*)rec->base;
        out.sizeInBytes      = rec->size;
        out.userData         = rec->user_data;
        out.agentOwner       = (rec->device < 0) ?
                               (hsa_agent_t){(uintptr_t)&emu.agents[0]} :
                               emu_agent_handle(rec->device);
        out.global_flags     = (rec->device < 0) ?
                               HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED :
                               HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
    }
    /* the caller's version of the structure: no member past its size */
    size = (info->size < sizeof(out)) ? info->size : sizeof(out);
    memcpy(info, &out, size);
    info->size = size;
    if ((alloc != NULL) && (num_agents_accessible != NULL) &&
        (accessible != NULL)) {
        *num_agents_accessible = (rec == NULL) ? 0 : (emu.num_gpus + 1);
        *accessible = alloc(sizeof(hsa_agent_t) * (emu.num_gpus + 1));
        if (*accessible == NULL) {
            EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
        }
        for (i = 0; i <= emu.num_gpus; ++i) {
            (*accessible)[i].handle = (uintptr_t)&emu.agents[i];
        }
    }
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

hsa_status_t hsa_amd_pointer_info_set_userdata(const void *ptr, void *userdata)
{
    emu_rec_t *rec;

    EMU_ENTER("hsa_amd_pointer_info_set_userdata")
    rec = emu_find((uintptr_t)ptr);
    if ((rec == NULL) || (rec->base != (uintptr_t)ptr)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    rec->user_data = userdata;
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

/* ---- IPC -------------------------------------------------------------- */

/*
 * A handle names the exporter's memfd: its pid, descriptor number, inode
 * and size, and the device. The importer opens /proc/<pid>/fd/<fd> (what a
 * same-user process may do where the exporter is dumpable) and checks the
 * inode: a descriptor number closed and used again is refused. Where this
 * process holds an attachment of the same memory already, that is used:
 * "a handle is valid while the allocation it references remains
 * accessible in any process" (hsa_ext_amd.h), within this one at least.
 */
typedef struct emu_ipc_handle {
    uint32_t magic;
    uint32_t pid;
    uint32_t fd;
    uint32_t device;
    uint64_t size;
    uint64_t ino;
} emu_ipc_handle_t;

_Static_assert(sizeof(emu_ipc_handle_t) == sizeof(hsa_amd_ipc_memory_t),
               "an IPC handle is 32 bytes");

hsa_status_t hsa_amd_ipc_memory_create(void *ptr, size_t len,
                                       hsa_amd_ipc_memory_t *handle)
{
    emu_ipc_handle_t h;
    emu_rec_t *rec;

    EMU_ENTER("hsa_amd_ipc_memory_create")
    rec = emu_find((uintptr_t)ptr);
    /* only the first byte and full length of an allocation of a pool: not
     * an interior pointer, not an attachment, not VMM memory (ROCm/clr
     * #265: IPC handles refuse hipMemCreate allocations) */
    if ((handle == NULL) || (rec == NULL) || (rec->kind != HSA_EMU_POOL) ||
        (rec->base != (uintptr_t)ptr) || (rec->size != emu_round(len)) ||
        (len == 0)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    h.magic  = EMU_IPC_MAGIC;
    h.pid    = getpid();
    h.fd     = rec->memfd;
    h.device = rec->device;
    h.size   = rec->size;
    h.ino    = rec->ino;
    memcpy(handle, &h, sizeof(h));
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

/* Whether fd is an emulator memfd, or device file (emu_memfd), of prefix;
 * its device */
static int emu_memfd_device(int fd, const char *prefix, int *device_p)
{
    char path[64], target[PATH_MAX + 128];
    const char *name;
    ssize_t n;
    size_t len = strlen(prefix);

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0) {
        return 0;
    }
    target[n] = '\0';
    if (!strncmp(target, "/memfd:", 7)) {
        name = target + 7;
    } else if ((name = strrchr(target, '/')) != NULL) {
        ++name; /* "<dir>/<prefix><device> <pid>.<seq> (deleted)" */
    } else {
        return 0;
    }
    if (strncmp(name, prefix, len)) {
        return 0;
    }
    *device_p = atoi(name + len);
    return 1;
}

/* This process's descriptor of the memory a handle names */
static int emu_ipc_open(const emu_ipc_handle_t *h)
{
    char path[64];
    struct stat st;
    size_t i;
    int fd, device;

    for (i = 0; i < emu.num_recs; ++i) {
        if ((emu.recs[i].memfd >= 0) && (emu.recs[i].ino == h->ino) &&
            ((emu.recs[i].kind == HSA_EMU_IPC) ||
             (emu.recs[i].kind == HSA_EMU_POOL))) {
            return fcntl(emu.recs[i].memfd, F_DUPFD_CLOEXEC, 0);
        }
    }
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", h->pid, h->fd);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        return -1;
    }
    if ((fstat(fd, &st) != 0) || ((uint64_t)st.st_ino != h->ino) ||
        ((uint64_t)st.st_size != h->size) ||
        !emu_memfd_device(fd, EMU_MEMFD_POOL, &device)) {
        close(fd);
        return -1;
    }
    return fd;
}

hsa_status_t hsa_amd_ipc_memory_attach(const hsa_amd_ipc_memory_t *handle,
                                       size_t len, uint32_t num_agents,
                                       const hsa_agent_t *mapping_agents,
                                       void **mapped_ptr)
{
    emu_rec_t rec = {.kind = HSA_EMU_IPC};
    emu_ipc_handle_t h;
    uint64_t addr;
    void *mapped;

    EMU_ENTER("hsa_amd_ipc_memory_attach")
    if ((handle == NULL) || (mapped_ptr == NULL)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    memcpy(&h, handle, sizeof(h));
    if ((h.magic != EMU_IPC_MAGIC) || (emu_round(len) != h.size) ||
        (h.size == 0)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    rec.memfd = emu_ipc_open(&h);
    if (rec.memfd < 0) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    rec.device = (int)h.device;
    rec.arena  = ((rec.device >= 0) && (rec.device < emu.num_gpus)) ?
                 rec.device : EMU_ARENA_HOST;
    if (emu_place(rec.arena, h.size, EMU_PAGE, &addr) != 0) {
        close(rec.memfd);
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    mapped = mmap((void*)addr, h.size, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_FIXED, rec.memfd, 0);
    if (mapped == MAP_FAILED) {
        close(rec.memfd);
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    rec.base      = addr;
    rec.size      = h.size;
    rec.ino       = h.ino;
    rec.buffer_id = emu_next_buffer_id++;
    if (emu_insert(&rec) == NULL) {
        emu_release_va(addr, h.size);
        close(rec.memfd);
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    *mapped_ptr = (void*)addr;
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

hsa_status_t hsa_amd_ipc_memory_detach(void *mapped_ptr)
{
    emu_rec_t *rec;

    EMU_ENTER("hsa_amd_ipc_memory_detach")
    rec = emu_find((uintptr_t)mapped_ptr);
    if ((rec == NULL) || (rec->kind != HSA_EMU_IPC) ||
        (rec->base != (uintptr_t)mapped_ptr)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    emu_release_va(rec->base, rec->size);
    close(rec->memfd);
    emu_remove(rec);
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

/* ---- access, locking -------------------------------------------------- */

hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents,
                                         const hsa_agent_t *agents,
                                         const uint32_t *flags, const void *ptr)
{
    uint32_t i;

    EMU_ENTER("hsa_amd_agents_allow_access")
    if ((num_agents == 0) || (agents == NULL)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    for (i = 0; i < num_agents; ++i) {
        if (emu_agent(agents[i]) == NULL) {
            EMU_RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
        }
    }
    if ((emu_find((uintptr_t)ptr) == NULL) &&
        (emu_find_locked_host((uintptr_t)ptr) == NULL) &&
        (emu_find_locked_agent((uintptr_t)ptr) == NULL)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

static int emu_in_any_arena(uint64_t addr)
{
    int i;

    for (i = 0; i < EMU_NUM_ARENAS; ++i) {
        if (emu_in_arena(i, addr)) {
            return 1;
        }
    }
    return 0;
}

/*
 * Locks host memory for devices. Where the GPU maps the pages elsewhere in
 * its own address space (lock_alias, the default), the agent pointer is
 * in an arena of its own, never mapped for the CPU (a CPU access faults,
 * as it would on such a GPU's address), and a device reaches the memory
 * through it only; the copy engine finds the pages behind it.
 */
static hsa_status_t emu_lock(void *host_ptr, size_t size, int hip_device,
                             void **agent_ptr)
{
    emu_rec_t rec = {.kind = HSA_EMU_LOCKED, .device = -1, .memfd = -1,
                     .arena = -1, .hip_device = hip_device};
    uint64_t offset = (uintptr_t)host_ptr & (EMU_PAGE - 1), page;
    size_t i;

    if ((host_ptr == NULL) || (size == 0) || (agent_ptr == NULL) ||
        emu_in_any_arena((uintptr_t)host_ptr) ||
        ((uintptr_t)host_ptr + size < (uintptr_t)host_ptr)) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if (emu_grow(&emu.locked, emu.num_locked, &emu.max_locked) != 0) {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    rec.base  = (uintptr_t)host_ptr;
    rec.size  = size;
    rec.agent = rec.base;
    /* The real runtime's thunk keeps one registration per host address and
     * length: locking the same range again counts it again and maps the
     * same pages at the same agent address */
    for (i = 0; i < emu.num_locked; ++i) {
        if ((emu.locked[i].base == rec.base) &&
            (emu.locked[i].size == rec.size)) {
            *agent_ptr = (void*)emu.locked[i].agent;
            return HSA_STATUS_SUCCESS;
        }
    }
    if (emu.lock_alias) {
        if (emu_place(EMU_ARENA_AGENT, emu_round(offset + size) + EMU_PAGE,
                      EMU_PAGE, &page) != 0) {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        rec.arena = EMU_ARENA_AGENT;
        rec.agent = page + offset; /* the offset in its page kept */
    }
    rec.buffer_id = emu_next_buffer_id++;
    emu.locked[emu.num_locked++] = rec;
    *agent_ptr = (void*)rec.agent;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size,
                                 hsa_agent_t *agents, int num_agent,
                                 void **agent_ptr)
{
    EMU_ENTER("hsa_amd_memory_lock")
    EMU_RETURN(emu_lock(host_ptr, size, -1, agent_ptr));
}

int hsa_emu_host_register(void *host_ptr, size_t size, int device,
                          void **agent_ptr)
{
    hsa_status_t status;

    pthread_mutex_lock(&emu.lock);
    status = !emu_live() ? HSA_STATUS_ERROR_NOT_INITIALIZED :
             ((host_ptr != NULL) &&
              ((emu_find_locked_host((uintptr_t)host_ptr) != NULL) ||
               (emu_find_locked_host((uintptr_t)host_ptr + size - 1) !=
                NULL))) ? HSA_STATUS_ERROR_INVALID_ARGUMENT :
             emu_lock(host_ptr, size, device, agent_ptr);
    pthread_mutex_unlock(&emu.lock);
    return (status == HSA_STATUS_SUCCESS) ? 0 : -1;
}

int hsa_emu_host_unregister(void *host_ptr)
{
    int ret = -1;
    size_t i;

    pthread_mutex_lock(&emu.lock);
    for (i = 0; i < emu.num_locked; ++i) {
        if ((emu.locked[i].base == (uintptr_t)host_ptr) &&
            (emu.locked[i].hip_device >= 0)) {
            emu.locked[i] = emu.locked[--emu.num_locked];
            ret = 0;
            break;
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

/*
 * Unlocks by host address, as ROCr does: its thunk looks the registration
 * up by that address alone, and where two locks of different lengths start
 * there (two registrations: the thunk tells them apart by address and
 * length) the look-up matches neither, so neither is unmapped nor
 * released; ROCr ignores the thunk's answer and reports success, also for
 * an address nothing locked. Both locks stay usable. (Where the thunk
 * registers through KFD's SVM interface, the agent pointer being the host
 * pointer, an unlock releases nothing at all: the model here is the
 * stricter of the two.) UCX's rocm_copy lock cache relies on this: it
 * locks a range again with a new length and then unlocks the old entry
 * by its address, which is the same.
 */
hsa_status_t hsa_amd_memory_unlock(void *host_ptr)
{
    size_t i, found = 0, at = 0;

    EMU_ENTER("hsa_amd_memory_unlock")
    for (i = 0; i < emu.num_locked; ++i) {
        if (emu.locked[i].base == (uintptr_t)host_ptr) {
            at = i;
            ++found;
        }
    }
    if (found == 1) {
        emu.locked[at] = emu.locked[--emu.num_locked];
    }
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

/* ---- signals ---------------------------------------------------------- */

static emu_signal_t *emu_signal(hsa_signal_t signal)
{
    emu_signal_t *s = (emu_signal_t*)(uintptr_t)signal.handle;

    if ((s == NULL) || (s->magic != EMU_SIGNAL_MAGIC)) {
        fprintf(stderr, "hsa emu: 0x%lx is not a signal\n",
                (unsigned long)signal.handle);
        abort(); /* the real runtime dereferences it */
    }
    return s;
}

hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value,
                               uint32_t num_consumers,
                               const hsa_agent_t *consumers,
                               hsa_signal_t *signal)
{
    emu_signal_t *s;

    EMU_ENTER("hsa_signal_create")
    pthread_mutex_unlock(&emu.lock);
    if (signal == NULL) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    s = malloc(sizeof(*s));
    if (s == NULL) {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    s->magic = EMU_SIGNAL_MAGIC;
    atomic_store(&s->value, initial_value);
    signal->handle = (uintptr_t)s;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t signal)
{
    emu_signal_t *s = (emu_signal_t*)(uintptr_t)signal.handle;

    if ((s == NULL) || (s->magic != EMU_SIGNAL_MAGIC)) {
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    s->magic = 0;
    free(s);
    return HSA_STATUS_SUCCESS;
}

hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal)
{
    return atomic_load_explicit(&emu_signal(signal)->value,
                                memory_order_acquire);
}

hsa_signal_value_t hsa_signal_load_relaxed(hsa_signal_t signal)
{
    return atomic_load_explicit(&emu_signal(signal)->value,
                                memory_order_relaxed);
}

void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value)
{
    atomic_store_explicit(&emu_signal(signal)->value, value,
                          memory_order_release);
}

void hsa_signal_store_relaxed(hsa_signal_t signal, hsa_signal_value_t value)
{
    atomic_store_explicit(&emu_signal(signal)->value, value,
                          memory_order_relaxed);
}

void hsa_signal_subtract_screlease(hsa_signal_t signal,
                                   hsa_signal_value_t value)
{
    atomic_fetch_sub_explicit(&emu_signal(signal)->value, value,
                              memory_order_release);
}

void hsa_signal_subtract_relaxed(hsa_signal_t signal, hsa_signal_value_t value)
{
    atomic_fetch_sub_explicit(&emu_signal(signal)->value, value,
                              memory_order_relaxed);
}

static int emu_signal_met(hsa_signal_condition_t condition,
                          hsa_signal_value_t value, hsa_signal_value_t compare)
{
    switch (condition) {
    case HSA_SIGNAL_CONDITION_EQ:  return value == compare;
    case HSA_SIGNAL_CONDITION_NE:  return value != compare;
    case HSA_SIGNAL_CONDITION_LT:  return value < compare;
    case HSA_SIGNAL_CONDITION_GTE: return value >= compare;
    default:                       return 1;
    }
}

static uint64_t emu_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* The timeout is a hint in timestamp ticks (nanoseconds here); the value
 * observed last is returned, met or not, as the real one may */
hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal,
                                             hsa_signal_condition_t condition,
                                             hsa_signal_value_t compare_value,
                                             uint64_t timeout_hint,
                                             hsa_wait_state_t wait_state_hint)
{
    emu_signal_t *s = emu_signal(signal);
    uint64_t start  = emu_now_ns();
    struct timespec pause = {0, 10000};
    hsa_signal_value_t value;

    for (;;) {
        value = atomic_load_explicit(&s->value, memory_order_acquire);
        if (emu_signal_met(condition, value, compare_value) ||
            (emu_now_ns() - start >= timeout_hint)) {
            return value;
        }
        nanosleep(&pause, NULL);
    }
}

hsa_signal_value_t hsa_signal_wait_relaxed(hsa_signal_t signal,
                                           hsa_signal_condition_t condition,
                                           hsa_signal_value_t compare_value,
                                           uint64_t timeout_hint,
                                           hsa_wait_state_t wait_state_hint)
{
    return hsa_signal_wait_scacquire(signal, condition, compare_value,
                                     timeout_hint, wait_state_hint);
}

/* ---- copies ----------------------------------------------------------- */

/* Whether a device may reach every byte: memory the runtime knows, ranges
 * back to back (a VMM range of several handles), a VMM mapping only where
 * some device was given access; with host, memory outside every arena too
 * (pageable host memory, which synchronous copies stage) */
static int emu_reachable(uint64_t addr, uint64_t size, int host)
{
    uint64_t end = addr + size, cur = addr;
    const emu_rec_t *rec;

    if (end < addr) {
        return 0;
    }
    if (host && !emu_in_any_arena(addr) && !emu_in_any_arena(end - 1) &&
        (emu_find(addr) == NULL)) {
        return 1;
    }
    while (cur < end) {
        rec = emu_find(cur);
        if (rec != NULL) {
            if ((rec->kind == HSA_EMU_VMM) && !rec->access) {
                return 0;
            }
            cur = rec->base + rec->size;
            continue;
        }
        /* locked host memory through its agent pointer; through its host
         * pointer only where the two are one */
        rec = emu_find_locked_agent(cur);
        if (rec != NULL) {
            cur = rec->agent + rec->size;
            continue;
        }
        rec = emu.lock_alias ? NULL : emu_find_locked_host(cur);
        if (rec == NULL) {
            return 0;
        }
        cur = rec->base + rec->size;
    }
    return 1;
}

/* A bad access by a device kills the process on real hardware */
static int emu_fault(const char *what, const void *addr, size_t size)
{
    fprintf(stderr, "hsa emu: Memory access fault by GPU: %s %p +%zu is not "
            "memory a device may access%s\n", what, addr, size,
            emu.fault_returns ? "" : " (aborting, as a GPU fault does)");
    if (!emu.fault_returns) {
        abort();
    }
    return -1;
}

static int emu_check_copy(void *dst, const void *src, size_t size, int host)
{
    if (!emu_reachable((uintptr_t)src, size, host)) {
        return emu_fault("copy source", src, size);
    }
    if (!emu_reachable((uintptr_t)dst, size, host)) {
        return emu_fault("copy destination", dst, size);
    }
    return 0;
}

int hsa_emu_copy(void *dst, const void *src, size_t size)
{
    int ret;

    pthread_mutex_lock(&emu.lock);
    ret = emu_check_copy(dst, src, size, 1);
    dst = emu_cpu_addr(dst);
    src = emu_cpu_addr(src);
    pthread_mutex_unlock(&emu.lock);
    if ((ret == 0) && (size > 0)) {
        memmove(dst, src, size);
    }
    return ret;
}

static void emu_copy_wait_deps(const emu_copy_t *c)
{
    struct timespec pause = {0, 10000};
    uint32_t i;

    for (i = 0; i < c->num_deps; ++i) {
        while (hsa_signal_load_scacquire(c->deps[i]) != 0) {
            nanosleep(&pause, NULL);
        }
    }
}

static void *emu_copy_thread(void *arg)
{
    struct timespec delay;
    emu_copy_t *c;

    pthread_mutex_lock(&emu.lock);
    for (;;) {
        while (emu.head == NULL) {
            pthread_cond_wait(&emu.cond, &emu.lock);
        }
        c = emu.head;
        delay.tv_sec  = emu.copy_delay_us / 1000000;
        delay.tv_nsec = (emu.copy_delay_us % 1000000) * 1000;
        pthread_mutex_unlock(&emu.lock);

        emu_copy_wait_deps(c);
        if (delay.tv_sec || delay.tv_nsec) {
            nanosleep(&delay, NULL);
        }
        memmove(c->dst, c->src, c->size);
        atomic_fetch_sub_explicit(&emu_signal(c->signal)->value, 1,
                                  memory_order_release);

        pthread_mutex_lock(&emu.lock);
        emu.head = c->next;
        if (emu.head == NULL) {
            emu.tail = NULL;
        }
        ++emu.done;
        pthread_cond_broadcast(&emu.idle);
        free(c->deps);
        free(c);
    }
    return NULL;
}

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent,
                                       const void *src, hsa_agent_t src_agent,
                                       size_t size, uint32_t num_dep_signals,
                                       const hsa_signal_t *dep_signals,
                                       hsa_signal_t completion_signal)
{
    emu_copy_t *c;

    EMU_ENTER("hsa_amd_memory_async_copy")
    if ((emu_agent(dst_agent) == NULL) || (emu_agent(src_agent) == NULL)) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    }
    if ((dst == NULL) || (src == NULL) ||
        ((num_dep_signals > 0) && (dep_signals == NULL))) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    emu_signal(completion_signal);
    if (emu_check_copy(dst, src, size, 0) != 0) {
        EMU_RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    c = calloc(1, sizeof(*c));
    if ((c == NULL) ||
        ((num_dep_signals > 0) &&
         ((c->deps = malloc(num_dep_signals * sizeof(*c->deps))) == NULL))) {
        free(c);
        EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    if (!emu.thread_running) {
        if (pthread_create(&emu.thread, NULL, emu_copy_thread, NULL) != 0) {
            free(c->deps);
            free(c);
            EMU_RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
        }
        pthread_detach(emu.thread);
        emu.thread_running = 1;
    }
    c->dst      = emu_cpu_addr(dst);
    c->src      = emu_cpu_addr(src);
    c->size     = size;
    c->num_deps = num_dep_signals;
    if (num_dep_signals > 0) {
        memcpy(c->deps, dep_signals, num_dep_signals * sizeof(*c->deps));
    }
    c->signal = completion_signal;
    if (emu.tail != NULL) {
        emu.tail->next = c;
    } else {
        emu.head = c;
    }
    emu.tail = c;
    ++emu.queued;
    pthread_cond_signal(&emu.cond);
    EMU_RETURN(HSA_STATUS_SUCCESS);
}

void hsa_emu_copy_drain(void)
{
    uint64_t target;

    pthread_mutex_lock(&emu.lock);
    target = emu.queued;
    while (emu.thread_running && (emu.done < target)) {
        pthread_cond_wait(&emu.idle, &emu.lock);
    }
    pthread_mutex_unlock(&emu.lock);
}

/* ---- VMM (for the HIP layer) ------------------------------------------ */

int hsa_emu_vmm_create(int device, uint64_t size, uint32_t handle_types,
                       hsa_emu_vmm_t **vmm_p)
{
    hsa_emu_vmm_t *vmm;
    uint64_t ino;
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    if (!emu_live() || (device < 0) || (device >= emu.num_gpus) ||
        (size == 0) || (size % EMU_PAGE)) {
        ret = EINVAL;
    } else if (emu.used[device + 1] + size > emu.mem_size) {
        ret = ENOMEM;
    } else if ((vmm = calloc(1, sizeof(*vmm))) == NULL) {
        ret = ENOMEM;
    } else if ((vmm->memfd = emu_memfd(EMU_MEMFD_VMM, device, size,
                                       &ino)) < 0) {
        free(vmm);
        ret = ENOMEM;
    } else {
        vmm->magic        = EMU_VMM_MAGIC;
        vmm->refs         = 1;
        vmm->device       = device;
        vmm->size         = size;
        vmm->handle_types = handle_types;
        emu.used[device + 1] += size;
        *vmm_p = vmm;
    }
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

int hsa_emu_vmm_import(int fd, hsa_emu_vmm_t **vmm_p)
{
    hsa_emu_vmm_t *vmm;
    struct stat st;
    int device, copy;

    if (!emu_memfd_device(fd, EMU_MEMFD_VMM, &device) ||
        (fstat(fd, &st) != 0) || (st.st_size <= 0)) {
        return -1;
    }
    copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    vmm  = calloc(1, sizeof(*vmm));
    if ((copy < 0) || (vmm == NULL)) {
        if (copy >= 0) {
            close(copy);
        }
        free(vmm);
        return -1;
    }
    vmm->magic        = EMU_VMM_MAGIC;
    vmm->refs         = 1;
    vmm->memfd        = copy;
    vmm->device       = device;
    vmm->imported     = 1;
    vmm->size         = st.st_size;
    vmm->handle_types = 1; /* hipMemHandleTypePosixFileDescriptor */
    *vmm_p = vmm;
    return 0;
}

int hsa_emu_vmm_valid(const hsa_emu_vmm_t *vmm)
{
    return (vmm != NULL) && (vmm->magic == EMU_VMM_MAGIC) && (vmm->refs > 0);
}

void hsa_emu_vmm_retain(hsa_emu_vmm_t *vmm)
{
    pthread_mutex_lock(&emu.lock);
    ++vmm->refs;
    pthread_mutex_unlock(&emu.lock);
}

static void emu_vmm_put_locked(hsa_emu_vmm_t *vmm)
{
    if (--vmm->refs > 0) {
        return;
    }
    if (!vmm->imported) {
        emu.used[vmm->device + 1] -= vmm->size;
    }
    close(vmm->memfd);
    vmm->magic = 0;
    free(vmm);
}

void hsa_emu_vmm_release(hsa_emu_vmm_t *vmm)
{
    pthread_mutex_lock(&emu.lock);
    emu_vmm_put_locked(vmm);
    pthread_mutex_unlock(&emu.lock);
}

int hsa_emu_vmm_export(hsa_emu_vmm_t *vmm)
{
    if (!(vmm->handle_types & 1)) {
        return -1;
    }
    return fcntl(vmm->memfd, F_DUPFD_CLOEXEC, 0);
}

void hsa_emu_vmm_props(const hsa_emu_vmm_t *vmm, int *device_p,
                       uint64_t *size_p, uint32_t *handle_types_p)
{
    *device_p       = vmm->device;
    *size_p         = vmm->size;
    *handle_types_p = vmm->handle_types;
}

int hsa_emu_reserve(uint64_t size, uint64_t alignment, uint64_t hint,
                    uint64_t *addr_p)
{
    emu_rec_t rec = {.kind = HSA_EMU_RESERVED, .device = -1, .memfd = -1};
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    rec.arena = EMU_ARENA_VMM;
    rec.size  = size;
    if (!emu_live() || (size == 0) || (size % EMU_PAGE) ||
        (alignment & (alignment - 1))) {
        ret = EINVAL;
    } else if ((emu_place(EMU_ARENA_VMM, size, alignment, &rec.base) != 0) ||
               (emu_grow(&emu.resv, emu.num_resv, &emu.max_resv) != 0)) {
        ret = ENOMEM;
    } else {
        emu.resv[emu.num_resv++] = rec;
        *addr_p = rec.base;
    }
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

static emu_rec_t *emu_resv_holding(uint64_t addr, uint64_t size)
{
    size_t i;

    for (i = 0; i < emu.num_resv; ++i) {
        if ((addr >= emu.resv[i].base) &&
            (addr + size <= emu.resv[i].base + emu.resv[i].size) &&
            (addr + size > addr)) {
            return &emu.resv[i];
        }
    }
    return NULL;
}

int hsa_emu_unreserve(uint64_t addr, uint64_t size)
{
    emu_rec_t *resv;
    size_t i;
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    resv = emu_resv_holding(addr, size);
    if ((resv == NULL) || (resv->base != addr) || (resv->size != size)) {
        ret = EINVAL;
    } else {
        for (i = 0; i < emu.num_recs; ++i) {
            if ((emu.recs[i].kind == HSA_EMU_VMM) &&
                (emu.recs[i].base >= addr) &&
                (emu.recs[i].base < addr + size)) {
                ret = EBUSY; /* still mapped there */
            }
        }
        if (ret == 0) {
            *resv = emu.resv[--emu.num_resv];
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

int hsa_emu_map(uint64_t addr, uint64_t size, uint64_t offset,
                hsa_emu_vmm_t *vmm)
{
    emu_rec_t rec = {.kind = HSA_EMU_VMM};
    uint64_t cur;
    void *mapped;
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    if (!emu_live() || (size == 0) || (size % EMU_PAGE) ||
        (offset % EMU_PAGE) || (offset + size > vmm->size) ||
        (emu_resv_holding(addr, size) == NULL)) {
        ret = EINVAL;
        goto out;
    }
    for (cur = addr; cur < addr + size; cur += EMU_PAGE) {
        if (emu_find(cur) != NULL) {
            ret = EEXIST;
            goto out;
        }
    }
    mapped = mmap((void*)addr, size, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_FIXED, vmm->memfd, offset);
    if (mapped == MAP_FAILED) {
        ret = ENOMEM;
        goto out;
    }
    rec.base      = addr;
    rec.size      = size;
    rec.arena     = EMU_ARENA_VMM;
    rec.device    = vmm->device;
    rec.memfd     = -1;
    rec.buffer_id = emu_next_buffer_id++;
    rec.vmm       = vmm;
    if (emu_insert(&rec) == NULL) {
        emu_release_va(addr, size);
        ret = ENOMEM;
        goto out;
    }
    ++vmm->refs; /* the mapping holds the memory */
out:
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

int hsa_emu_unmap(uint64_t addr, uint64_t size)
{
    uint64_t cur = addr, end = addr + size;
    emu_rec_t *rec;
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    /* whole mappings only */
    while (cur < end) {
        rec = emu_find(cur);
        if ((rec == NULL) || (rec->kind != HSA_EMU_VMM) || (rec->base != cur) ||
            (rec->base + rec->size > end)) {
            ret = EINVAL;
            goto out;
        }
        cur += rec->size;
    }
    while ((rec = emu_find(addr)) != NULL && (addr < end)) {
        emu_release_va(rec->base, rec->size);
        addr = rec->base + rec->size;
        emu_vmm_put_locked(rec->vmm);
        emu_remove(rec);
    }
out:
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

int hsa_emu_set_access(uint64_t addr, uint64_t size, int device, int flags)
{
    uint64_t cur = addr, end = addr + size;
    emu_rec_t *rec;
    int ret = 0;

    pthread_mutex_lock(&emu.lock);
    if ((device < 0) || (device >= emu.num_gpus)) {
        ret = EINVAL;
        goto out;
    }
    while (cur < end) {
        rec = emu_find(cur);
        if ((rec == NULL) || (rec->kind != HSA_EMU_VMM)) {
            ret = EINVAL;
            goto out;
        }
        cur = rec->base + rec->size;
    }
    for (cur = addr; cur < end; cur = rec->base + rec->size) {
        rec = emu_find(cur);
        if (flags) {
            rec->access |= 1u << device;
        } else {
            rec->access &= ~(1u << device);
        }
    }
out:
    pthread_mutex_unlock(&emu.lock);
    return ret;
}

hsa_emu_vmm_t *hsa_emu_vmm_at(uint64_t addr)
{
    hsa_emu_vmm_t *vmm = NULL;
    emu_rec_t *rec;

    pthread_mutex_lock(&emu.lock);
    rec = emu_find(addr);
    if ((rec != NULL) && (rec->kind == HSA_EMU_VMM)) {
        vmm = rec->vmm;
        ++vmm->refs;
    }
    pthread_mutex_unlock(&emu.lock);
    return vmm;
}
