/*
 * The span component: twins of other components' MDs and transports, the
 * unpacked span rkey, and span's configuration.
 */
#ifndef SPAN_COMPONENT_H_
#define SPAN_COMPONENT_H_

#include "span_chunk.h"
#include "resolvers/span_cuda_vmm.h"
#include "ucx/span_ucx.h"

#include <ucs/sys/compiler_def.h>
#include <inttypes.h>
#include <ucs/debug/log_def.h>

/* A twin is named after its inner MD or transport with this suffix */
#define SPAN_TWIN_SUFFIX "+"

/* What uct_rkey_t points to for a twin */
typedef struct span_rkey {
    span_chunk_geom_t geom;            /* extent, exporter's addresses */
    uct_component_t   *inner_component;
    int               inner_unpacked;  /* inner rkeys must be released */
    uint32_t          num_inner;       /* one per chunk, or one for all
                                          where the inner key is empty */
    int               vmm_mapped;      /* the units are mapped here: ops
                                          copy through vmm, no inner rkey */
    span_cuda_vmm_map_t vmm;
    struct {
        uct_rkey_t    rkey;
        void          *handle;
    } inner[];
} span_rkey_t;

extern uct_component_t span_component;

/* The inner component whose name hashes to component_id, or NULL */
uct_component_t *span_component_find_inner(uint32_t component_id);

/* Whether [addr, addr+length) lies inside the rkey's extent; logs if not */
static UCS_F_ALWAYS_INLINE int
span_rkey_check(const span_rkey_t *rkey, uint64_t addr, size_t length)
{
    uint64_t offset = addr - rkey->geom.base; /* wraps when addr < base */

    if (ucs_likely((offset <= rkey->geom.length) &&
                   (length <= rkey->geom.length - offset))) {
        return 1;
    }

    ucs_error("span: remote access [0x%" PRIx64 ", +%zu) is outside the "
              "registered extent [0x%" PRIx64 ", +%" PRIu64 ") of rkey %p",
              addr, length, rkey->geom.base, rkey->geom.length, rkey);
    return 0;
}

/* The inner rkey for an access at addr inside the extent, and in *avail_p
 * the bytes from addr that its chunk holds */
static UCS_F_ALWAYS_INLINE uct_rkey_t
span_rkey_inner(const span_rkey_t *rkey, uint64_t addr, uint64_t *avail_p)
{
    uint32_t index = span_chunk_find(&rkey->geom, addr, avail_p);

    return rkey->inner[(rkey->num_inner == 1) ? 0 : index].rkey;
}

void span_rkey_log_crossing(const span_rkey_t *rkey, uint64_t addr,
                            size_t length, uint64_t avail);

/* The inner rkey of an access that short, bcopy and atomic ops make: it
 * must lie in the extent (UCS_ERR_INVALID_ADDR) and in one chunk
 * (UCS_ERR_UNSUPPORTED: only zcopy ops are split) */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_rkey_whole(const span_rkey_t *rkey, uint64_t addr, size_t length,
                uct_rkey_t *inner_p)
{
    uint64_t avail;

    if (ucs_unlikely(!span_rkey_check(rkey, addr, length))) {
        return UCS_ERR_INVALID_ADDR;
    }
    *inner_p = span_rkey_inner(rkey, addr, &avail);
    if (ucs_unlikely(length > avail)) {
        span_rkey_log_crossing(rkey, addr, length, avail);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

#endif
