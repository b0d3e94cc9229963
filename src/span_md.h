/*
 * Twin memory domain: registers through an inner MD and packs span rkeys.
 */
#ifndef SPAN_MD_H_
#define SPAN_MD_H_

#include "span_component.h"

typedef struct span_md {
    uct_md_t         super;
    uct_md_h         inner;
    uct_component_t *inner_component;
    uint32_t         inner_id;         /* span_rkey_component_id() */
    uct_md_attr_v2_t inner_attr;
} span_md_t;

/* A registration through a twin MD */
typedef struct span_memh {
    uct_mem_h inner;  /* UCT_MEM_HANDLE_NULL where the inner MD does not register */
    uint64_t  base;
    uint64_t  length;
} span_memh_t;

ucs_status_t span_md_open(uct_component_t *component, const char *md_name,
                          const uct_md_config_t *config, uct_md_h *md_p);

/* The inner memory handle of a twin one; NULL stays NULL */
static UCS_F_ALWAYS_INLINE uct_mem_h span_memh_inner(uct_mem_h memh)
{
    return (memh == UCT_MEM_HANDLE_NULL) ? UCT_MEM_HANDLE_NULL :
           ((span_memh_t*)memh)->inner;
}

#endif
