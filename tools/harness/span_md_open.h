/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Finds a UCT component by name and opens one MD of it, its config read
 * from the environment: for the tests and benchmarks that drive an MD
 * directly.
 */
#ifndef SPAN_HARNESS_MD_OPEN_H_
#define SPAN_HARNESS_MD_OPEN_H_

#include <uct/api/uct.h>
#include <string.h>

/* The loaded UCT component of that name, or NULL */
static inline uct_component_h span_component_by_name(const char *name)
{
    uct_component_h *components, found = NULL;
    uct_component_attr_t attr;
    unsigned i, count;

    if (uct_query_components(&components, &count) != UCS_OK) {
        return NULL;
    }
    for (i = 0; (i < count) && (found == NULL); ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            !strcmp(attr.name, name)) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

/* The MD, or NULL where the component or the MD is not there */
static inline uct_md_h span_md_open_by_name(const char *component_name,
                                            const char *md_name)
{
    uct_component_h component = span_component_by_name(component_name);
    uct_md_config_t *config;
    uct_md_h md = NULL;

    if ((component == NULL) ||
        (uct_md_config_read(component, NULL, NULL, &config) != UCS_OK)) {
        return NULL;
    }
    if (uct_md_open(component, md_name, config, &md) != UCS_OK) {
        md = NULL;
    }
    uct_config_release(config);
    return md;
}

#endif
