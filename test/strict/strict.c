/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * "strict": a test-only UCT component that behaves like an RDMA NIC on a
 * machine without one. Its MD registers at most UCX_STRICT_MAX_MR_SIZE
 * bytes per region: larger registrations fail, or, with
 * UCX_STRICT_TRUNCATE=y, silently cover only the first MAX_MR_SIZE bytes
 * (the buggy engines' behaviour). Its rkey carries the extent really
 * registered, the access flags it was registered with and a key; its
 * transport moves bytes with cma, and fails an op whose remote range lies
 * outside the rkey's extent, whose key does not match it or which the
 * registration's access flags do not allow (an atomic on a region
 * registered for RMA only), with UCS_ERR_IO_ERROR as a NIC's remote access
 * error; a zero-copy op whose local memh is neither NULL nor one of its
 * registrations holding the entry fails too, as a NIC's local protection
 * error. Its 64-bit atomics act on this process's memory: they serve the
 * UCT tests (one process) and are not advertised, so that UCP between
 * processes never picks them.
 * UCX_STRICT_REPORT_MAX_REG=n makes the MD report no limit, as UCX's ib MD
 * does; UCX_STRICT_PIN=y pins what it registers, as a NIC driver does.
 * UCX_STRICT_RKEY_SIZE packs keys of that many bytes (24 carry the region,
 * the rest a pattern of the key the unpack checks), as transports whose
 * keys are larger than a span rkey holds inline (UCX 1.18's cuda_ipc: 200).
 */
#include "ucx/span_ucx.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/string.h>
#include <ucs/sys/stubs.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define STRICT_RKEY_SIZE  24  /* the bytes that carry the region */
#define STRICT_MAX_IFACES 64

typedef struct strict_md_config {
    uct_md_config_t super;
    size_t          max_mr_size;
    int             truncate;
    int             report_max_reg;
    int             pin;
    unsigned        rkey_size;
} strict_md_config_t;

typedef struct strict_md {
    uct_md_t  super;
    uct_md_h  cma_md;
    size_t    max_mr_size;
    int       truncate;
    int       report_max_reg;
    int       pin;
    unsigned  rkey_size;
} strict_md_t;

/* The key size of the MD opened last, which unpacking expects (the tests
 * open one size per process) */
static unsigned strict_rkey_size = STRICT_RKEY_SIZE;

/* A registration and, unpacked, a remote key: the extent, its key and what
 * it allows (UCT_MD_MEM_ACCESS_* flags) */
typedef struct strict_region {
    uint64_t base;
    uint64_t length;
    uint32_t key;
    uint32_t access;
} strict_region_t;

static uct_component_t strict_component;
static uct_component_t *strict_cma_component;
static uct_tl_t        *strict_cma_tl;
static long             strict_live_regs;
static long             strict_total_regs;

/* Registrations alive in this process: a test reads it to find leaks */
long __attribute__((visibility("default"))) strict_md_live_registrations(void)
{
    return __atomic_load_n(&strict_live_regs, __ATOMIC_RELAXED);
}

/* Registrations ever made: a test reads it to see a new one was made */
long __attribute__((visibility("default"))) strict_md_registrations(void)
{
    return __atomic_load_n(&strict_total_regs, __ATOMIC_RELAXED);
}

static uint32_t strict_key(uint64_t base, uint64_t length)
{
    uint64_t words[2] = {base, length};
    const uint8_t *p  = (const uint8_t*)words;
    uint32_t hash     = 2166136261u;
    size_t i;

    for (i = 0; i < sizeof(words); ++i) {
        hash = (hash ^ p[i]) * 16777619u;
    }
    return hash;
}

static ucs_config_field_t strict_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(strict_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"MAX_MR_SIZE", "64m", "Largest region one registration covers.",
     ucs_offsetof(strict_md_config_t, max_mr_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"TRUNCATE", "n",
     "Register only the first MAX_MR_SIZE bytes of a larger region, and say\n"
     "nothing, instead of failing.",
     ucs_offsetof(strict_md_config_t, truncate), UCS_CONFIG_TYPE_BOOL},

    {"REPORT_MAX_REG", "y",
     "Report MAX_MR_SIZE as the MD's max_reg; 'n' reports no limit.",
     ucs_offsetof(strict_md_config_t, report_max_reg), UCS_CONFIG_TYPE_BOOL},

    {"PIN", "n",
     "Lock the registered pages in memory (mlock), so that a registration\n"
     "costs what pinning costs a NIC driver: for benchmarks.",
     ucs_offsetof(strict_md_config_t, pin), UCS_CONFIG_TYPE_BOOL},

    {"RKEY_SIZE", "24",
     "Bytes of a packed key, 24 to 255: the first 24 carry the region, the\n"
     "rest a pattern that unpacking checks.",
     ucs_offsetof(strict_md_config_t, rkey_size), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

#ifdef __SANITIZE_ADDRESS__
/* UCX's list macros call this libucs function in ASan builds; libucs 1.16
 * and 1.17 have none (span_ucx.c does the same for the plugin) */
void __attribute__((weak))
ucs_debug_asan_validate_address(const char *ptr_name, void *address,
                                size_t size)
{
}
#endif

/* --- memory domain ------------------------------------------------------ */

/* Laid out once for the UCX in the process (ucs_module_global_init, which
 * selects that UCX's layouts as span does: span_ucx.c, built in here) */
static int strict_config_fit;
static int strict_component_fitted;

static ucs_status_t strict_md_query(uct_md_h md, uct_md_attr_v2_t *out)
{
    strict_md_t *smd = (strict_md_t*)md;
    uct_md_attr_v2_t full, *attr = &full;

    memset(attr, 0, sizeof(*attr));
    attr->max_reg          = smd->report_max_reg ? smd->max_mr_size : SIZE_MAX;
    attr->flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    attr->reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->rkey_packed_size = smd->rkey_size;
    attr->reg_alignment    = 1;
    ucs_strncpy_zero(attr->component_name, strict_component.name,
                     sizeof(attr->component_name));
    /* the caller's uct_md_attr_v2_t, as its UCX lays it out */
    span_ucx_md_attr_export(attr, out);
    return UCS_OK;
}

static ucs_status_t strict_md_mem_reg(uct_md_h md, void *address,
                                      size_t length,
                                      const uct_md_mem_reg_params_t *params,
                                      uct_mem_h *memh_p)
{
    strict_md_t *smd = (strict_md_t*)md;
    strict_region_t *region;

    if ((length > smd->max_mr_size) && !smd->truncate) {
        ucs_error("strict: cannot register %p +%zu, more than %zu bytes",
                  address, length, smd->max_mr_size);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    region = malloc(sizeof(*region));
    if (region == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    region->base   = (uintptr_t)address;
    region->length = ucs_min(length, smd->max_mr_size);
    region->key    = strict_key(region->base, region->length);
    region->access = (params->field_mask & UCT_MD_MEM_REG_FIELD_FLAGS) ?
                     (params->flags & UCT_MD_MEM_ACCESS_ALL) : 0;
    if (smd->pin && (mlock(address, region->length) != 0)) {
        ucs_error("strict: cannot pin %p +%" PRIu64 ": %m", address,
                  region->length);
        free(region);
        return UCS_ERR_IO_ERROR;
    }
    __atomic_add_fetch(&strict_live_regs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&strict_total_regs, 1, __ATOMIC_RELAXED);
    *memh_p = region;
    return UCS_OK;
}

static ucs_status_t strict_md_mem_dereg(uct_md_h md,
                                        const uct_md_mem_dereg_params_t *params)
{
    strict_region_t *region;

    if (!(params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) ||
        (params->memh == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }
    region = params->memh;
    if (((strict_md_t*)md)->pin) {
        munlock((void*)(uintptr_t)region->base, region->length);
    }
    free(region);
    __atomic_sub_fetch(&strict_live_regs, 1, __ATOMIC_RELAXED);
    return UCS_OK;
}

/* The bytes of a key past the region's: a pattern of its key */
static void strict_rkey_pad(uint8_t *p, unsigned size, uint32_t key)
{
    unsigned i;

    for (i = STRICT_RKEY_SIZE; i < size; ++i) {
        p[i] = (uint8_t)(key + i);
    }
}

static ucs_status_t strict_md_mkey_pack(uct_md_h md, uct_mem_h memh,
                                        void *address, size_t length,
                                        const uct_md_mkey_pack_params_t *params,
                                        void *buffer)
{
    const strict_region_t *region = memh;
    uint8_t *p                    = buffer;

    memcpy(p, &region->key, 4);
    memcpy(p + 4, &region->access, 4);
    memcpy(p + 8, &region->base, 8);
    memcpy(p + 16, &region->length, 8);
    strict_rkey_pad(p, ((strict_md_t*)md)->rkey_size, region->key);
    return UCS_OK;
}

/* strict_md_mkey_pack as UCX 1.15 and earlier call it: no range */
static ucs_status_t
strict_md_mkey_pack_1_15(uct_md_h md, uct_mem_h memh,
                         const uct_md_mkey_pack_params_t *params, void *buffer)
{
    return strict_md_mkey_pack(md, memh, NULL, SIZE_MAX, params, buffer);
}

/* strict_md_mem_reg as UCX 1.13 calls it: flags, no params */
static ucs_status_t strict_md_mem_reg_1_13(uct_md_h md, void *address,
                                           size_t length, unsigned flags,
                                           uct_mem_h *memh_p)
{
    uct_md_mem_reg_params_t params = {
        .field_mask = UCT_MD_MEM_REG_FIELD_FLAGS,
        .flags      = flags
    };

    return strict_md_mem_reg(md, address, length, &params, memh_p);
}

static int strict_md_is_sockaddr_accessible(void)
{
    return 0;
}

static ucs_status_t strict_md_unsupported(void)
{
    return UCS_ERR_UNSUPPORTED;
}

static void strict_md_close(uct_md_h md)
{
    strict_md_t *smd = (strict_md_t*)md;

    uct_md_close(smd->cma_md);
    free(smd);
}

static uct_md_ops_t strict_md_ops = {
    .close              = strict_md_close,
    .query              = strict_md_query,
    .mem_alloc          = (void*)strict_md_unsupported,
    .mem_free           = (void*)strict_md_unsupported,
    .mem_advise         = (void*)strict_md_unsupported,
    .mem_reg            = strict_md_mem_reg,
    .mem_dereg          = strict_md_mem_dereg,
    .mem_query          = (void*)strict_md_unsupported,
    .mkey_pack          = strict_md_mkey_pack,
    .mem_attach         = (void*)strict_md_unsupported,
    .detect_memory_type = (void*)strict_md_unsupported,
    .mem_elem_pack      = (void*)strict_md_unsupported
};

/* UCX 1.14 and 1.15 (span_ucx_1_15.h) */
static span_ucx_1_15_md_ops_t strict_md_ops_1_15 = {
    .close                  = (void*)strict_md_close,
    .query                  = (void*)strict_md_query,
    .mem_alloc              = (void*)strict_md_unsupported,
    .mem_free               = (void*)strict_md_unsupported,
    .mem_advise             = (void*)strict_md_unsupported,
    .mem_reg                = (void*)strict_md_mem_reg,
    .mem_dereg              = (void*)strict_md_mem_dereg,
    .mem_query              = (void*)strict_md_unsupported,
    .mkey_pack              = (void*)strict_md_mkey_pack_1_15,
    .mem_attach             = (void*)strict_md_unsupported,
    .is_sockaddr_accessible = (void*)strict_md_is_sockaddr_accessible,
    .detect_memory_type     = (void*)strict_md_unsupported
};

/* UCX 1.13: query writes uct_md_attr_t (span_ucx_md_attr_export), mem_reg
 * takes flags, no mem_attach */
static span_ucx_1_13_md_ops_t strict_md_ops_1_13 = {
    .close                  = (void*)strict_md_close,
    .query                  = (void*)strict_md_query,
    .mem_alloc              = (void*)strict_md_unsupported,
    .mem_free               = (void*)strict_md_unsupported,
    .mem_advise             = (void*)strict_md_unsupported,
    .mem_reg                = (void*)strict_md_mem_reg_1_13,
    .mem_dereg              = (void*)strict_md_mem_dereg,
    .mem_query              = (void*)strict_md_unsupported,
    .mkey_pack              = (void*)strict_md_mkey_pack_1_15,
    .is_sockaddr_accessible = (void*)strict_md_is_sockaddr_accessible,
    .detect_memory_type     = (void*)strict_md_unsupported
};

static ucs_status_t strict_md_open(uct_component_t *component,
                                   const char *md_name,
                                   const uct_md_config_t *config,
                                   uct_md_h *md_p)
{
    const strict_md_config_t *sconfig = (const strict_md_config_t*)config;
    uct_md_config_t *cma_config;
    strict_md_t *smd;
    ucs_status_t status;

    if ((sconfig->rkey_size < STRICT_RKEY_SIZE) || (sconfig->rkey_size > 255)) {
        ucs_error("strict md: UCX_STRICT_RKEY_SIZE=%u is not in [%d, 255]",
                  sconfig->rkey_size, STRICT_RKEY_SIZE);
        return UCS_ERR_INVALID_PARAM;
    }
    smd = calloc(1, sizeof(*smd));
    if (smd == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    status = uct_md_config_read(strict_cma_component, NULL, NULL, &cma_config);
    if (status != UCS_OK) {
        goto err_free;
    }
    status = uct_md_open(strict_cma_component, "cma", cma_config,
                         &smd->cma_md);
    uct_config_release(cma_config);
    if (status != UCS_OK) {
        goto err_free;
    }

    smd->super.ops       = span_ucx->mem_reg_flags ?
                           (uct_md_ops_t*)&strict_md_ops_1_13 :
                           span_ucx->pack_no_range ?
                           (uct_md_ops_t*)&strict_md_ops_1_15 : &strict_md_ops;
    smd->super.component = component;
    smd->max_mr_size     = sconfig->max_mr_size;
    smd->truncate        = sconfig->truncate;
    smd->report_max_reg  = sconfig->report_max_reg;
    smd->pin             = sconfig->pin;
    smd->rkey_size       = sconfig->rkey_size;
    strict_rkey_size     = sconfig->rkey_size;
    *md_p                = &smd->super;
    return UCS_OK;

err_free:
    free(smd);
    return status;
}

static ucs_status_t strict_query_md_resources(uct_component_t *component,
                                              uct_md_resource_desc_t **res_p,
                                              unsigned *count_p)
{
    uct_md_resource_desc_t *res = ucs_realloc(NULL, sizeof(*res),
                                              "strict_md");

    if (res == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ucs_strncpy_zero(res->md_name, "strict", sizeof(res->md_name));
    *res_p   = res;
    *count_p = 1;
    return UCS_OK;
}

/* --- remote keys -------------------------------------------------------- */

static ucs_status_t strict_rkey_unpack(uct_component_t *component,
                                       const void *buffer,
                                       const uct_rkey_unpack_params_t *params,
                                       uct_rkey_t *rkey_p, void **handle_p)
{
    const uint8_t *p = buffer;
    uint8_t pad[256];
    strict_region_t *region;
    uint32_t key;

    memcpy(&key, p, 4);
    strict_rkey_pad(pad, strict_rkey_size, key);
    if (memcmp(p + STRICT_RKEY_SIZE, pad + STRICT_RKEY_SIZE,
               strict_rkey_size - STRICT_RKEY_SIZE)) {
        ucs_error("strict rkey: the %u bytes past the region of key %u are "
                  "not as packed", strict_rkey_size - STRICT_RKEY_SIZE, key);
        return UCS_ERR_INVALID_PARAM;
    }
    region = malloc(sizeof(*region));
    if (region == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(&region->key, p, 4);
    memcpy(&region->access, p + 4, 4);
    memcpy(&region->base, p + 8, 8);
    memcpy(&region->length, p + 16, 8);
    *rkey_p   = (uintptr_t)region;
    *handle_p = NULL;
    return UCS_OK;
}

/* strict_rkey_unpack as UCX 1.18 and earlier call it: no params */
static ucs_status_t strict_rkey_unpack_1_18(uct_component_t *component,
                                            const void *buffer,
                                            uct_rkey_t *rkey_p,
                                            void **handle_p)
{
    return strict_rkey_unpack(component, buffer, NULL, rkey_p, handle_p);
}

static ucs_status_t strict_rkey_release(uct_component_t *component,
                                        uct_rkey_t rkey, void *handle)
{
    free((void*)rkey);
    return UCS_OK;
}

static ucs_status_t strict_rkey_compare(uct_component_t *component,
                                        uct_rkey_t rkey1, uct_rkey_t rkey2,
                                        const uct_rkey_compare_params_t *params,
                                        int *result)
{
    *result = memcmp((void*)rkey1, (void*)rkey2, sizeof(strict_region_t));
    return UCS_OK;
}

/* --- transport: cma's iface, its RMA ops checked like a NIC's ------------ */

typedef struct strict_iface {
    uct_iface_h     iface;
    uct_iface_ops_t ops; /* cma's */
} strict_iface_t;

static strict_iface_t  strict_ifaces[STRICT_MAX_IFACES];
static pthread_mutex_t strict_ifaces_lock = PTHREAD_MUTEX_INITIALIZER;

static strict_iface_t *strict_iface_find(uct_iface_h iface)
{
    int i;

    for (i = 0; i < STRICT_MAX_IFACES; ++i) {
        if (__atomic_load_n(&strict_ifaces[i].iface, __ATOMIC_ACQUIRE) ==
            iface) {
            return &strict_ifaces[i];
        }
    }
    return NULL;
}

static ucs_status_t strict_check(uint64_t addr, size_t length,
                                 uct_rkey_t rkey, uint32_t access,
                                 const char *op)
{
    const strict_region_t *region = (const strict_region_t*)rkey;

    /* a key value no registration has (UCT_INVALID_RKEY, 0): a NIC checks
     * no key for an empty access and fails any other */
    if ((rkey + 1) <= 1) {
        if (length == 0) {
            return UCS_OK;
        }
        ucs_error("strict: remote access error: %s of [0x%" PRIx64 ", +%zu) "
                  "with key 0x%lx, which no region has", op, addr, length,
                  (unsigned long)rkey);
        return UCS_ERR_IO_ERROR;
    }
    if (region->key != strict_key(region->base, region->length)) {
        ucs_error("strict: remote access error: key 0x%x does not match the "
                  "region [0x%" PRIx64 ", +%" PRIu64 ")", region->key,
                  region->base, region->length);
        return UCS_ERR_IO_ERROR;
    }
    if ((addr < region->base) || (length > region->length) ||
        (addr - region->base > region->length - length)) {
        ucs_error("strict: remote access error: [0x%" PRIx64 ", +%zu) is "
                  "outside the registered [0x%" PRIx64 ", +%" PRIu64 ")",
                  addr, length, region->base, region->length);
        return UCS_ERR_IO_ERROR;
    }
    if ((region->access & access) != access) {
        ucs_error("strict: remote access error: %s of [0x%" PRIx64 ", +%zu) "
                  "needs access 0x%x, the region [0x%" PRIx64 ", +%" PRIu64
                  ") was registered with 0x%x", op, addr, length, access,
                  region->base, region->length, region->access);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/* A NIC's local protection check: an entry's memh, where not NULL (the MD
 * needs none), must be one of this MD's registrations and hold the entry's
 * bytes: a handle of another MD (a twin's, untranslated) fails */
static ucs_status_t strict_check_local(const uct_iov_t *iov, const char *op)
{
    const strict_region_t *region = iov->memh;
    uint64_t start                = (uintptr_t)iov->buffer;
    uint64_t span                 = (iov->count == 0) ? 0 :
                                    (iov->stride * (iov->count - 1)) +
                                    iov->length;

    if ((region == NULL) ||
        ((region->key == strict_key(region->base, region->length)) &&
         (start >= region->base) && (span <= region->length) &&
         (start - region->base <= region->length - span))) {
        return UCS_OK;
    }
    ucs_error("strict: local protection error: %s of [%p, +%" PRIu64 ") "
              "with memh %p, which is not a registration of strict that "
              "holds it", op, iov->buffer, span, iov->memh);
    return UCS_ERR_IO_ERROR;
}

static ucs_status_t strict_check_iov(const uct_iov_t *iov, size_t iovcnt,
                                     uint64_t addr, uct_rkey_t rkey,
                                     uint32_t access, const char *op)
{
    size_t i, length = 0;
    ucs_status_t status;

    for (i = 0; i < iovcnt; ++i) {
        status = strict_check_local(&iov[i], op);
        if (status != UCS_OK) {
            return status;
        }
        length += iov[i].length * iov[i].count;
    }
    return strict_check(addr, length, rkey, access, op);
}

static ucs_status_t strict_ep_put_zcopy(uct_ep_h ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey, uct_completion_t *comp)
{
    ucs_status_t status = strict_check_iov(iov, iovcnt, remote_addr, rkey,
                                           UCT_MD_MEM_ACCESS_REMOTE_PUT,
                                           "put");

    if (status != UCS_OK) {
        return status;
    }
    return strict_iface_find(ep->iface)->ops.ep_put_zcopy(
            ep, iov, iovcnt, remote_addr, UCT_INVALID_RKEY, comp);
}

static ucs_status_t strict_ep_get_zcopy(uct_ep_h ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey, uct_completion_t *comp)
{
    ucs_status_t status = strict_check_iov(iov, iovcnt, remote_addr, rkey,
                                           UCT_MD_MEM_ACCESS_REMOTE_GET,
                                           "get");

    if (status != UCS_OK) {
        return status;
    }
    return strict_iface_find(ep->iface)->ops.ep_get_zcopy(
            ep, iov, iovcnt, remote_addr, UCT_INVALID_RKEY, comp);
}

/* Applies opcode (ADD, AND, OR, XOR or SWAP) to *addr; the value before */
static uint64_t strict_atomic(uint64_t *addr, unsigned opcode, uint64_t value)
{
    switch (opcode) {
    case UCT_ATOMIC_OP_ADD:
        return __atomic_fetch_add(addr, value, __ATOMIC_SEQ_CST);
    case UCT_ATOMIC_OP_AND:
        return __atomic_fetch_and(addr, value, __ATOMIC_SEQ_CST);
    case UCT_ATOMIC_OP_OR:
        return __atomic_fetch_or(addr, value, __ATOMIC_SEQ_CST);
    case UCT_ATOMIC_OP_XOR:
        return __atomic_fetch_xor(addr, value, __ATOMIC_SEQ_CST);
    default:
        return __atomic_exchange_n(addr, value, __ATOMIC_SEQ_CST);
    }
}

static ucs_status_t strict_ep_atomic64_post(uct_ep_h ep, unsigned opcode,
                                            uint64_t value,
                                            uint64_t remote_addr,
                                            uct_rkey_t rkey)
{
    ucs_status_t status = strict_check(remote_addr, sizeof(uint64_t), rkey,
                                       UCT_MD_MEM_ACCESS_REMOTE_ATOMIC,
                                       "atomic");

    if (status != UCS_OK) {
        return status;
    }
    if (opcode == UCT_ATOMIC_OP_SWAP) {
        return UCS_ERR_UNSUPPORTED;
    }
    strict_atomic((uint64_t*)(uintptr_t)remote_addr, opcode, value);
    return UCS_OK;
}

static ucs_status_t strict_ep_atomic64_fetch(uct_ep_h ep, unsigned opcode,
                                             uint64_t value, uint64_t *result,
                                             uint64_t remote_addr,
                                             uct_rkey_t rkey,
                                             uct_completion_t *comp)
{
    ucs_status_t status = strict_check(remote_addr, sizeof(uint64_t), rkey,
                                       UCT_MD_MEM_ACCESS_REMOTE_ATOMIC,
                                       "atomic");

    if (status != UCS_OK) {
        return status;
    }
    *result = strict_atomic((uint64_t*)(uintptr_t)remote_addr, opcode, value);
    return UCS_OK;
}

static void strict_iface_close(uct_iface_h iface)
{
    strict_iface_t *siface = strict_iface_find(iface);
    uct_iface_close_func_t close = siface->ops.iface_close;

    pthread_mutex_lock(&strict_ifaces_lock);
    __atomic_store_n(&siface->iface, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&strict_ifaces_lock);
    close(iface);
}

static ucs_status_t strict_iface_open(uct_md_h md, uct_worker_h worker,
                                      const uct_iface_params_t *params,
                                      const uct_iface_config_t *config,
                                      uct_iface_h *iface_p)
{
    strict_md_t *smd = (strict_md_t*)md;
    uct_iface_params_t cma_params = *params;
    strict_iface_t *siface;
    uct_iface_h iface;
    ucs_status_t status;

    cma_params.mode.device.tl_name = "cma";
    status = strict_cma_tl->iface_open(smd->cma_md, worker, &cma_params,
                                       config, &iface);
    if (status != UCS_OK) {
        return status;
    }

    pthread_mutex_lock(&strict_ifaces_lock);
    siface = strict_iface_find(NULL);
    if (siface != NULL) {
        siface->ops = iface->ops;
        __atomic_store_n(&siface->iface, iface, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&strict_ifaces_lock);
    if (siface == NULL) {
        iface->ops.iface_close(iface);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    iface->ops.ep_put_zcopy      = strict_ep_put_zcopy;
    iface->ops.ep_get_zcopy      = strict_ep_get_zcopy;
    iface->ops.ep_atomic64_post  = strict_ep_atomic64_post;
    iface->ops.ep_atomic64_fetch = strict_ep_atomic64_fetch;
    iface->ops.iface_close       = strict_iface_close;
    *iface_p                = iface;
    return UCS_OK;
}

static ucs_status_t strict_query_devices(uct_md_h md,
                                         uct_tl_device_resource_t **devices_p,
                                         unsigned *num_devices_p)
{
    return strict_cma_tl->query_devices(((strict_md_t*)md)->cma_md, devices_p,
                                        num_devices_p);
}

static uct_tl_t strict_tl = {
    .name          = "strict",
    .query_devices = strict_query_devices,
    .iface_open    = strict_iface_open,
};

static uct_component_t strict_component = {
    .name               = "strict",
    .query_md_resources = strict_query_md_resources,
    .md_open            = strict_md_open,
    .cm_open            = (void*)strict_md_unsupported,
    .rkey_unpack        = strict_rkey_unpack,
    .rkey_ptr           = (void*)strict_md_unsupported,
    .rkey_release       = strict_rkey_release,
    .rkey_compare       = strict_rkey_compare,
    .md_config          = {
        .name   = "Strict test memory domain",
        .prefix = "STRICT_",
        .table  = strict_md_config_table,
        .size   = sizeof(strict_md_config_t),
    },
    .cm_config          = {"", "", NULL, 0},
    .tl_list            = UCS_LIST_INITIALIZER(&strict_component.tl_list,
                                               &strict_component.tl_list),
    .flags              = 0,
    .md_vfs_init        = (void*)ucs_empty_function
};

/* cma may load after this module: load it now, beside libuct, so that its
 * component, transport and configuration are known */
static ucs_status_t strict_find_cma(void)
{
    char path[PATH_MAX], module[PATH_MAX + 32];
    uct_component_t *component;
    Dl_info info;

    if (dladdr((void*)uct_md_open, &info) && (info.dli_fname != NULL)) {
        ucs_strncpy_zero(path, info.dli_fname, sizeof(path));
        snprintf(module, sizeof(module), "%s/ucx/libuct_cma.so.0",
                 dirname(path));
        dlopen(module, RTLD_LAZY | RTLD_NODELETE);
    }

    span_ucx_components_for_each(component) {
        if (!strcmp(component->name, "cma") &&
            !ucs_list_is_empty(span_ucx_component_tls(component))) {
            strict_cma_component = component;
            strict_cma_tl = span_ucx_tl_next(span_ucx_component_tls(component),
                                             NULL);
            return UCS_OK;
        }
    }
    ucs_warn("strict: no cma transport in this UCX; not registered");
    return UCS_ERR_NO_DEVICE;
}

ucs_status_t __attribute__((visibility("protected")))
ucs_module_global_init(void)
{
    ucs_status_t status = span_ucx_select();

    if (status != UCS_OK) {
        return status;
    }
    status = strict_find_cma();
    if (status != UCS_OK) {
        return status;
    }
    /* UCX 1.16 and earlier parse fields with no doc (the table is laid
     * out once) */
    if (!strict_config_fit) {
        span_ucx_config_fit_table(strict_md_config_table,
                                  dlsym(RTLD_DEFAULT, "ucs_config_doc_nop") ==
                                  NULL);
        strict_config_fit = 1;
    }
    /* UCX 1.18 and earlier (no uct_rkey_unpack_v2) pass no params */
    if (dlsym(RTLD_DEFAULT, "uct_rkey_unpack_v2") == NULL) {
        strict_component.rkey_unpack = (void*)strict_rkey_unpack_1_18;
    }
    /* 1.15 and earlier: no rkey_compare, 1.14 and earlier shorter
     * configuration entries (span_ucx_component_fit) */
    if (!strict_component_fitted) {
        span_ucx_component_fit(&strict_component);
        strict_component_fitted = 1;
    }
    /* UCX_CMA_* configure it; an entry of the release's size */
    memcpy(&strict_tl.config, &strict_cma_tl->config,
           span_ucx->config_entry_size);
    ucs_list_head_init(&strict_tl.config.list);
    ucs_list_add_tail(span_ucx_component_tls(&strict_component),
                      span_ucx_tl_link(&strict_tl));
    uct_component_register(&strict_component);
    return UCS_OK;
}
