/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The twin MDs' configuration table (span_md_config.h).
 *
 * One component, span, offers every twin MD, so one table serves them all:
 * span_md_config_table, then one sub-table per inner component, named by
 * the component's prefix, at an offset of its own. UCX's parser matches a
 * sub-table's fields under its name ("POSIX_" "DIR") and fills them from the
 * environment the same way (UCX_POSIX_DIR). A table is made as span loads,
 * of the components registered then, and again with the twins, where UCX
 * loaded others since; none is changed or freed while span is loaded:
 * uct_md_config_read() sizes a configuration by the newest, and releases
 * it by the one its bundle records, which also tells which inner parts it
 * holds.
 */
#include "span_md_config.h"

#include <stdlib.h>
#include <string.h>

/* span's own fields (UCX_SPAN_*), the start of every table made */
ucs_config_field_t span_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(span_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"MAX_CHUNK", "inf",
     "Largest inner registration, below what the inner MD reports it can\n"
     "register (its max_reg). A larger region is registered as chunks of\n"
     "this size, published together in one span rkey. Set it to exercise\n"
     "chunking on a transport without a limit, or below a NIC's real\n"
     "max_mr_size where the driver does not report it. Whole 4 KiB pages.",
     ucs_offsetof(span_md_config_t, max_chunk), UCS_CONFIG_TYPE_MEMUNITS},

    {"CHUNK_OVERLAP", "auto",
     "Bytes by which neighbour chunks overlap. Twin transports offer ops of\n"
     "at most this many bytes (max_short/bcopy/zcopy), so that an op never\n"
     "straddles a chunk end; larger transfers are cut by UCP. 'auto' is\n"
     "4 MiB or a quarter of the chunk, the smaller. Whole 4 KiB pages.",
     ucs_offsetof(span_md_config_t, chunk_overlap), UCS_CONFIG_TYPE_MEMUNITS},

    {"SPILL", "try",
     "Where the inner keys of a registration do not fit in the 255 bytes of\n"
     "a span rkey (one cuda_ipc key is 192 bytes: a buffer over several VMM\n"
     "handles needs more), keep them in this process and let the importer\n"
     "on the same node read them (through /proc/<pid>/fd, as the same user).\n"
     "try: when needed, on transports that reach only this node; yes: for\n"
     "every registration with inner keys (tests); no: never, such a\n"
     "registration fails.",
     ucs_offsetof(span_md_config_t, spill), UCS_CONFIG_TYPE_TERNARY},

    {"VMM_WIDEN", "64g",
     "With UCX's defaults (UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES=cuda) UCP cuts\n"
     "the registration of a buffer over several VMM handles (PyTorch's\n"
     "expandable segments, cuMemCreate pools) to the handle that holds its\n"
     "first byte, and every op past it would be refused. A registration of\n"
     "exactly one POSIX-fd VMM handle is therefore widened over the handles\n"
     "of its size mapped right after it on the same device, up to this many\n"
     "bytes and a quarter of RLIMIT_NOFILE handles (span may export one fd\n"
     "per handle). The peer may then access those neighbours too. 0: never\n"
     "widen (set UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES= so that UCP registers\n"
     "buffers as given).",
     ucs_offsetof(span_md_config_t, vmm_widen), UCS_CONFIG_TYPE_MEMUNITS},

    {"COPY_BATCH", "1024",
     "Device copies span makes itself (VMM memory it exported: PyTorch's\n"
     "expandable segments) that a process posts while earlier ones are\n"
     "queued on the device are gathered and queued together once the\n"
     "device is idle (at a progress), at a flush, or once this many ops\n"
     "(or UCX_SPAN_COPY_BATCH_SIZE bytes) are gathered: many small blocks (KV-cache pages) then cost one kernel\n"
     "launch, not one copy engine job each. An op posted while none are\n"
     "queued goes alone, at the latency of one copy. 0 or 1: every op\n"
     "alone, as cuda_ipc copies. At most 1024 (the pieces of the largest\n"
     "copy kernel); more fails the MD's open.",
     ucs_offsetof(span_md_config_t, copy_batch), UCS_CONFIG_TYPE_UINT},

    {"COPY_BATCH_SIZE", "16m",
     "A batch of UCX_SPAN_COPY_BATCH is also queued once its ops hold this\n"
     "many bytes, so that the device copies the first ones of a long burst\n"
     "while the process posts the rest. Each batch costs a kernel launch\n"
     "(several us of the posting thread): smaller is not faster. 'inf':\n"
     "only the count bounds a batch; 0 fails the MD's open.",
     ucs_offsetof(span_md_config_t, copy_batch_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"COPY_BURST_GAP", "20us",
     "While one thread posts a burst of the device copies span batches, a\n"
     "progress by another thread (a progress thread, as NIXL's) queues what\n"
     "was gathered, and completes what ran, only once the posting thread has\n"
     "posted nothing for this long; a progress by the posting thread itself,\n"
     "a full batch, a flush and a fence queue it at once. The burst then\n"
     "goes in a few large launches, not a launch per few ops. At most 1s;\n"
     "0: any progress queues it.",
     ucs_offsetof(span_md_config_t, copy_burst_gap), UCS_CONFIG_TYPE_TIME},

    {"COPY_KERNEL_MAX", "1m",
     "The largest piece of a batch that span's copy kernel moves (on the\n"
     "GPU's SMs, 64 KiB per thread block); larger pieces take the copy\n"
     "engine, as cuda_ipc's copies do. 0: no kernel, every op alone.",
     ucs_offsetof(span_md_config_t, copy_kernel_max),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"CMA_RMA", "y",
     "UCX 1.13 to 1.15 only: cma+ offers put short, put bcopy and get bcopy\n"
     "of its own, so that UCP takes it for small puts and gets, which are\n"
     "then checked and refused outside a registration. Each is a system\n"
     "call: small puts go slower than UCP's emulation over active messages\n"
     "(0.3-0.95x at 8 B to 8 KiB), which no transport checks. n: as cma,\n"
     "emulated and unchecked. Later releases use cma's zero-copy ops.",
     ucs_offsetof(span_md_config_t, cma_rma), UCS_CONFIG_TYPE_BOOL},

    {"TEST_UNIT_SIZE", "inf",
     "For tests: declare a hard boundary (a physical allocation boundary,\n"
     "which no inner registration or op may cross) at every multiple of\n"
     "this size. 'inf': none.",
     ucs_offsetof(span_md_config_t, test_unit_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"TEST_FAIL_REG", "0",
     "For tests: the inner registration of chunk N (1-based) of every\n"
     "registration fails with 'Out of memory'. 0: none.",
     ucs_offsetof(span_md_config_t, test_fail_reg), UCS_CONFIG_TYPE_UINT},

    {"TEST_FAIL_DEREG", "0",
     "For tests: the deregistration of chunk N (1-based) reports an I/O\n"
     "error after releasing it. 0: none.",
     ucs_offsetof(span_md_config_t, test_fail_dereg), UCS_CONFIG_TYPE_UINT},

    {"TEST_NO_RESOURCE", "0",
     "For tests: piece N (2 or more) of every op split at a chunk or unit\n"
     "end first meets 'no resource' once, as from a full send queue. 0: none.",
     ucs_offsetof(span_md_config_t, test_no_resource), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

/* What uct_md_config_read() puts before the configuration it returns
 * (UCX's uct_config_bundle_t, unchanged from 1.13 to 1.23) */
typedef struct {
    ucs_config_field_t *table;
    const char         *table_prefix;
} span_md_config_bundle_t;

typedef struct {
    const uct_component_t *component;
    size_t                offset;
} span_md_config_inner_t;

/* A table made: configurations read by it keep pointing at it */
typedef struct span_md_config_made {
    ucs_config_field_t         *fields;
    unsigned                   count;
    struct span_md_config_made *prev;
    span_md_config_inner_t     inners[];
} span_md_config_made_t;

/* The newest table made, NULL before the first */
static span_md_config_made_t *span_md_config_made;

/* Each part starts 16-byte aligned, as calloc's block does */
static size_t span_md_config_align(size_t size)
{
    return (size + 15) & ~(size_t)15;
}

/* Whether the MD configuration of component can be held */
static int span_md_config_has(const uct_component_t *component,
                              const uct_component_t *span)
{
    const ucs_config_global_list_entry_t *entry;

    if (component == span) {
        return 0;
    }
    entry = span_ucx_component_md_config(component);
    return (entry->table != NULL) && (entry->size > 0) &&
           (entry->prefix != NULL) && (entry->prefix[0] != '\0');
}

/* Fills made's fields (span's, then n_inner sub-tables) and returns the
 * size of a configuration read by them */
static size_t span_md_config_fill(span_md_config_made_t *made, unsigned n_own,
                                  const uct_component_t *span)
{
    size_t size = span_md_config_align(sizeof(span_md_config_t));
    const ucs_config_global_list_entry_t *entry;
    uct_component_t *component;
    unsigned i = 0;

    memcpy(made->fields, span_md_config_table,
           n_own * sizeof(*made->fields));
    span_ucx_components_for_each(component) {
        if (!span_md_config_has(component, span)) {
            continue;
        }
        entry                   = span_ucx_component_md_config(component);
        made->fields[n_own + i] = (ucs_config_field_t){
            entry->prefix, "",
            "The MD fields of this component, for its twin MDs.", size,
            UCS_CONFIG_TYPE_TABLE(entry->table)};
        made->inners[i].component = component;
        made->inners[i].offset    = size;
        size += span_md_config_align(entry->size);
        ++i;
    }
    return size;
}

ucs_status_t span_md_config_extend(uct_component_t *span)
{
    ucs_config_global_list_entry_t *own = span_ucx_component_md_config(span);
    span_md_config_made_t *made         = span_md_config_made;
    unsigned n_own = 0, n_inner = 0;
    uct_component_t *component;

    span_ucx_components_for_each(component) {
        n_inner += span_md_config_has(component, span);
    }
    if ((made != NULL) && (made->count == n_inner)) {
        return UCS_OK;
    }
    while (span_md_config_table[n_own].name != NULL) {
        ++n_own;
    }

    made = calloc(1, sizeof(*made) + (n_inner * sizeof(made->inners[0])));
    if (made != NULL) {
        made->fields = calloc(n_own + n_inner + 1, sizeof(*made->fields));
    }
    if ((made == NULL) || (made->fields == NULL)) {
        ucs_error("span md config: no memory for a table of %u fields; the "
                  "fields of %u inner MDs are not set through the twins' "
                  "configuration", n_own + n_inner, n_inner);
        free(made);
        return UCS_ERR_NO_MEMORY;
    }

    made->count           = n_inner;
    own->size             = span_md_config_fill(made, n_own, span);
    span_ucx_config_fit(made->fields);
    own->table            = made->fields;
    made->prev            = span_md_config_made;
    __atomic_store_n(&span_md_config_made, made, __ATOMIC_RELEASE);
    return UCS_OK;
}

const uct_md_config_t *span_md_config_inner(const uct_md_config_t *config,
                                            const uct_component_t *inner)
{
    const span_md_config_bundle_t *bundle =
            (const span_md_config_bundle_t*)config - 1;
    const span_md_config_made_t *made;
    unsigned i;

    for (made = __atomic_load_n(&span_md_config_made, __ATOMIC_ACQUIRE);
         (made != NULL) && (made->fields != bundle->table);
         made = made->prev) {
    }
    for (i = 0; (made != NULL) && (i < made->count); ++i) {
        if (made->inners[i].component == inner) {
            return UCS_PTR_BYTE_OFFSET(config, made->inners[i].offset);
        }
    }
    return NULL;
}

void span_md_config_cleanup(uct_component_t *span)
{
    ucs_config_global_list_entry_t *own = span_ucx_component_md_config(span);
    span_md_config_made_t *made;

    own->table = span_md_config_table;
    own->size  = sizeof(span_md_config_t);
    while (span_md_config_made != NULL) {
        made                = span_md_config_made;
        span_md_config_made = made->prev;
        free(made->fields);
        free(made);
    }
}
