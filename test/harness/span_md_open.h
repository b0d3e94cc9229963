/*
 * Opens one MD of a named component, its config read from the environment:
 * for the benchmarks that drive an MD directly.
 */
#ifndef SPAN_MD_OPEN_H_
#define SPAN_MD_OPEN_H_

#include <uct/api/uct.h>
#include <string.h>

/* The MD, or NULL where the component or the MD is not there */
static inline uct_md_h span_md_open_by_name(const char *component_name,
                                            const char *md_name)
{
    uct_component_h *components;
    uct_component_attr_t attr;
    uct_md_config_t *config;
    uct_md_h md = NULL;
    unsigned i, count;

    if (uct_query_components(&components, &count) != UCS_OK) {
        return NULL;
    }
    for (i = 0; (i < count) && (md == NULL); ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) != UCS_OK) ||
            strcmp(attr.name, component_name) ||
            (uct_md_config_read(components[i], NULL, NULL, &config) !=
             UCS_OK)) {
            continue;
        }
        if (uct_md_open(components[i], md_name, config, &md) != UCS_OK) {
            md = NULL;
        }
        uct_config_release(config);
    }
    uct_release_component_list(components);
    return md;
}

#endif
