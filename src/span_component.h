/*
 * The span component: twins of other components' MDs and transports, the
 * unpacked span rkey, and span's configuration.
 */
#ifndef SPAN_COMPONENT_H_
#define SPAN_COMPONENT_H_

#include "ucx/span_ucx.h"

#include <ucs/sys/compiler_def.h>
#include <inttypes.h>
#include <ucs/debug/log_def.h>

/* A twin is named after its inner MD or transport with this suffix */
#define SPAN_TWIN_SUFFIX "+"

typedef struct span_md_config {
    uct_md_config_t super;
} span_md_config_t;

/* What uct_rkey_t points to for a twin */
typedef struct span_rkey {
    uct_rkey_t       inner;        /* inner component's rkey */
    uint64_t         base;         /* registered extent, exporter's addresses */
    uint64_t         length;
    void            *inner_handle;
    uct_component_t *inner_component;
    int              inner_unpacked; /* inner rkey must be released */
} span_rkey_t;

extern uct_component_t span_component;

/* The inner component whose name hashes to component_id, or NULL */
uct_component_t *span_component_find_inner(uint32_t component_id);

/* Whether [addr, addr+length) lies inside the rkey's extent; logs if not */
static UCS_F_ALWAYS_INLINE int
span_rkey_check(const span_rkey_t *rkey, uint64_t addr, size_t length)
{
    uint64_t offset = addr - rkey->base; /* wraps when addr < base */

    if (ucs_likely((offset <= rkey->length) &&
                   (length <= rkey->length - offset))) {
        return 1;
    }

    ucs_error("span: remote access [0x%" PRIx64 ", +%zu) is outside the "
              "registered extent [0x%" PRIx64 ", +%" PRIu64 ") of rkey %p",
              addr, length, rkey->base, rkey->length, rkey);
    return 0;
}

#endif
