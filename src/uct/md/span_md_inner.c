/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The inner MD of a twin MD, as others register with it (span_md_inner.h).
 */
#include "span_md_inner.h"
#include "base/span_fork.h"

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct span_md_inner_reg {
    uint64_t base;
    uint64_t length;
} span_md_inner_reg_t;

KHASH_MAP_INIT_INT64(span_md_inner_regs, span_md_inner_reg_t)

/* Transports extend uct_md_ops_t with ops of their own (mm's mappers, the
 * ib MD's), reached through md->ops: the copy takes this much of the table,
 * as far as it is readable */
#define SPAN_MD_INNER_OPS_MAX 64

struct span_md_inner {
    union {
        uct_md_ops_t      ops;  /* what the inner MD object points to */
        void              *slots[SPAN_MD_INNER_OPS_MAX];
    };
    const uct_md_ops_t    *orig;
    pthread_mutex_t       lock; /* registrations come from any thread */
    khash_t(span_md_inner_regs) regs;
    ucs_list_link_t       list; /* in span_md_inner_list */
};

/* Every inner MD wrapped, for fork to take their locks */
static UCS_LIST_HEAD(span_md_inner_list);
static pthread_mutex_t span_md_inner_list_lock = PTHREAD_MUTEX_INITIALIZER;

static void span_md_inner_fork_prepare(void)
{
    span_md_inner_t *wrap;

    ucs_list_for_each(wrap, &span_md_inner_list, list) {
        pthread_mutex_lock(&wrap->lock);
    }
}

static void span_md_inner_fork_release(void)
{
    span_md_inner_t *wrap;

    ucs_list_for_each(wrap, &span_md_inner_list, list) {
        pthread_mutex_unlock(&wrap->lock);
    }
}

static const span_fork_handlers_t span_md_inner_fork = {
    .lock    = &span_md_inner_list_lock,
    .prepare = span_md_inner_fork_prepare,
    .parent  = span_md_inner_fork_release,
    .child   = span_md_inner_fork_release
};

static void UCS_F_CTOR span_md_inner_fork_register(void)
{
    span_fork_register(SPAN_FORK_MD_INNER, &span_md_inner_fork);
}

static span_md_inner_t *span_md_inner_of(uct_md_h md)
{
    return ucs_container_of(md->ops, span_md_inner_t, ops);
}

static void span_md_inner_add(span_md_inner_t *wrap, uct_mem_h memh,
                              uint64_t base, uint64_t length)
{
    span_md_inner_reg_t reg = {base, length};
    khiter_t it;
    int ret;

    pthread_mutex_lock(&wrap->lock);
    it = kh_put(span_md_inner_regs, &wrap->regs, (uintptr_t)memh, &ret);
    if (ret >= 0) {
        kh_value(&wrap->regs, it) = reg;
    }
    pthread_mutex_unlock(&wrap->lock);
    if (ret < 0) {
        /* such a handle is refused when packed: nothing is lost */
        ucs_warn("span inner md %p: no memory to record memh %p of [0x%"
                 PRIx64 ", +%" PRIu64 ")", wrap, memh, base, length);
    }
}

static void span_md_inner_remove(span_md_inner_t *wrap, uct_mem_h memh)
{
    khiter_t it;

    pthread_mutex_lock(&wrap->lock);
    it = kh_get(span_md_inner_regs, &wrap->regs, (uintptr_t)memh);
    if (it != kh_end(&wrap->regs)) {
        kh_del(span_md_inner_regs, &wrap->regs, it);
    }
    pthread_mutex_unlock(&wrap->lock);
}

static ucs_status_t
span_md_inner_mem_reg(uct_md_h md, void *address, size_t length,
                      const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    span_md_inner_t *wrap = span_md_inner_of(md);
    ucs_status_t status;

    status = span_ucx_mem_reg(wrap->orig, md, address, length, params,
                              memh_p);
    if (status == UCS_OK) {
        span_md_inner_add(wrap, *memh_p, (uintptr_t)address, length);
    }
    return status;
}

/* span_md_inner_mem_reg as UCX 1.13 calls it: flags, no params */
static ucs_status_t span_md_inner_mem_reg_1_13(uct_md_h md, void *address,
                                               size_t length, unsigned flags,
                                               uct_mem_h *memh_p)
{
    uct_md_mem_reg_params_t params = {
        .field_mask = UCT_MD_MEM_REG_FIELD_FLAGS,
        .flags      = flags
    };

    return span_md_inner_mem_reg(md, address, length, &params, memh_p);
}

static ucs_status_t
span_md_inner_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    span_md_inner_t *wrap = span_md_inner_of(md);

    /* forgotten first: the handle's address may be handed out again */
    if (params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) {
        span_md_inner_remove(wrap, params->memh);
    }
    return wrap->orig->mem_dereg(md, params);
}

static ucs_status_t
span_md_inner_mem_alloc(uct_md_h md, size_t *length_p, void **address_p,
                        ucs_memory_type_t mem_type, ucs_sys_device_t sys_dev,
                        unsigned flags, const char *alloc_name,
                        uct_mem_h *memh_p)
{
    span_md_inner_t *wrap = span_md_inner_of(md);
    ucs_status_t status;

    status = span_ucx_mem_alloc(wrap->orig, md, length_p, address_p, mem_type,
                                sys_dev, flags, alloc_name, memh_p);
    if (status == UCS_OK) {
        span_md_inner_add(wrap, *memh_p, (uintptr_t)*address_p, *length_p);
    }
    return status;
}

/* span_md_inner_mem_alloc as UCX 1.18 and earlier call it: no sys_dev */
static ucs_status_t
span_md_inner_mem_alloc_1_18(uct_md_h md, size_t *length_p, void **address_p,
                             ucs_memory_type_t mem_type, unsigned flags,
                             const char *alloc_name, uct_mem_h *memh_p)
{
    return span_md_inner_mem_alloc(md, length_p, address_p, mem_type,
                                   UCS_SYS_DEVICE_ID_UNKNOWN, flags,
                                   alloc_name, memh_p);
}

static ucs_status_t span_md_inner_mem_free(uct_md_h md, uct_mem_h memh)
{
    span_md_inner_t *wrap = span_md_inner_of(md);

    span_md_inner_remove(wrap, memh);
    return wrap->orig->mem_free(md, memh);
}

/* Copies the inner MD's ops table with whatever a transport appended to
 * it. Its size is not known: the copy reads SPAN_MD_INNER_OPS_MAX slots or
 * up to the first unreadable page, whichever ends first (a read of this
 * process's own memory that fails instead of faulting), and at least what
 * the release the process loaded has of uct_md_ops_t. */
static ucs_status_t span_md_inner_copy_ops(span_md_inner_t *wrap,
                                           const uct_md_ops_t *ops)
{
    struct iovec local  = {wrap->slots, sizeof(wrap->slots)};
    struct iovec remote = {(void*)ops, sizeof(wrap->slots)};
    ssize_t copied;

    copied = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if ((copied < 0) || ((size_t)copied < span_ucx->md_ops_size)) {
        ucs_diag("span inner md ops %p: cannot copy them (%zd bytes read, "
                 "%zu needed): %m", ops, copied, span_ucx->md_ops_size);
        return UCS_ERR_UNSUPPORTED;
    }
    if ((size_t)copied < sizeof(uct_md_ops_t)) {
        /* an op the loaded release does not have */
        memset(UCS_PTR_BYTE_OFFSET(wrap->slots, copied), 0,
               sizeof(uct_md_ops_t) - copied);
    }
    return UCS_OK;
}

/* An MD object inside a loaded library is one every open of that MD hands
 * out (rocm_ipc's md_open returns a static object): UCP's own open of the
 * native MD shares it, and would call through an ops table the twin frees
 * when it closes. Heap objects belong to one open. */
static int span_md_inner_shared(uct_md_h inner)
{
    Dl_info info;

    return dladdr(inner, &info) != 0;
}

ucs_status_t span_md_inner_wrap(uct_md_h inner, span_md_inner_t **wrap_p,
                                const uct_md_ops_t **orig_p)
{
    span_md_inner_t *wrap;
    ucs_status_t status;

    if (span_md_inner_shared(inner)) {
        ucs_debug("span inner md %p: lies in a library (every open of it is "
                  "that object): its ops stay its own", inner);
        return UCS_ERR_UNSUPPORTED;
    }
    wrap = calloc(1, sizeof(*wrap));
    if (wrap == NULL) {
        ucs_error("span inner md %p: no memory for its ops table (%zu bytes)",
                  inner, sizeof(*wrap));
        return UCS_ERR_NO_MEMORY;
    }
    status = span_md_inner_copy_ops(wrap, inner->ops);
    if (status != UCS_OK) {
        free(wrap);
        return status;
    }
    wrap->orig = inner->ops;
    pthread_mutex_init(&wrap->lock, NULL);
    kh_init_inplace(span_md_inner_regs, &wrap->regs);
    if (wrap->orig->mem_reg != NULL) {
        wrap->ops.mem_reg   = span_ucx->mem_reg_flags ?
                              (void*)span_md_inner_mem_reg_1_13 :
                              span_md_inner_mem_reg;
        wrap->ops.mem_dereg = span_md_inner_mem_dereg;
    }
    if (wrap->orig->mem_alloc != NULL) {
        wrap->ops.mem_alloc = span_ucx->calls_1_18 ?
                              (void*)span_md_inner_mem_alloc_1_18 :
                              span_md_inner_mem_alloc;
        wrap->ops.mem_free  = span_md_inner_mem_free;
    }
    pthread_mutex_lock(&span_md_inner_list_lock);
    ucs_list_add_tail(&span_md_inner_list, &wrap->list);
    pthread_mutex_unlock(&span_md_inner_list_lock);
    inner->ops = &wrap->ops;
    *orig_p    = wrap->orig;
    *wrap_p    = wrap;
    return UCS_OK;
}

void span_md_inner_free(span_md_inner_t *wrap)
{
    pthread_mutex_lock(&span_md_inner_list_lock);
    ucs_list_del(&wrap->list);
    pthread_mutex_unlock(&span_md_inner_list_lock);
    if (kh_size(&wrap->regs) > 0) {
        ucs_debug("span inner md %p: closed with %u registrations of others "
                  "still recorded", wrap, kh_size(&wrap->regs));
    }
    kh_destroy_inplace(span_md_inner_regs, &wrap->regs);
    pthread_mutex_destroy(&wrap->lock);
    free(wrap);
}

ucs_status_t span_md_inner_find(span_md_inner_t *wrap, uct_mem_h memh,
                                uint64_t *base_p, uint64_t *length_p)
{
    ucs_status_t status = UCS_ERR_NO_ELEM;
    khiter_t it;

    pthread_mutex_lock(&wrap->lock);
    it = kh_get(span_md_inner_regs, &wrap->regs, (uintptr_t)memh);
    if (it != kh_end(&wrap->regs)) {
        if (base_p != NULL) {
            *base_p   = kh_value(&wrap->regs, it).base;
            *length_p = kh_value(&wrap->regs, it).length;
        }
        status = UCS_OK;
    }
    pthread_mutex_unlock(&wrap->lock);
    return status;
}
