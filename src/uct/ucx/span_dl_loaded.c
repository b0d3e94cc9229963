/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Loaded objects by path (span_dl_loaded.h): one iteration sizes the
 * block, a second copies what still fits. Nothing is opened, and nothing
 * is allocated, inside an iteration.
 */
#include "span_dl_loaded.h"

#include <link.h>
#include <stdlib.h>
#include <string.h>

typedef struct span_dl_loaded_block {
    size_t count;  /* names seen (sizing) or copied */
    size_t bytes;  /* their bytes with NULs (sizing) or left */
    char   **names;
    char   *next;  /* where the next name goes */
} span_dl_loaded_block_t;

static int span_dl_loaded_size_cb(struct dl_phdr_info *info, size_t size,
                                  void *arg)
{
    span_dl_loaded_block_t *block = arg;

    if ((info->dlpi_name != NULL) && (info->dlpi_name[0] != '\0')) {
        ++block->count;
        block->bytes += strlen(info->dlpi_name) + 1;
    }
    return 0;
}

static int span_dl_loaded_copy_cb(struct dl_phdr_info *info, size_t size,
                                  void *arg)
{
    span_dl_loaded_block_t *block = arg;
    size_t length;

    if ((info->dlpi_name == NULL) || (info->dlpi_name[0] == '\0')) {
        return 0;
    }
    length = strlen(info->dlpi_name) + 1;
    if ((block->names[block->count] == NULL) || (length > block->bytes)) {
        return 1; /* loaded since the sizing: no room */
    }
    memcpy(block->next, info->dlpi_name, length);
    block->names[block->count++] = block->next;
    block->next                 += length;
    block->bytes                -= length;
    return 0;
}

char **span_dl_loaded(void)
{
    span_dl_loaded_block_t block = {};
    size_t i;
    char **names;

    dl_iterate_phdr(span_dl_loaded_size_cb, &block);
    names = malloc(((block.count + 1) * sizeof(char*)) + block.bytes);
    if (names == NULL) {
        return NULL;
    }
    /* a non-NULL slot marks room for a name; the last stays NULL */
    for (i = 0; i < block.count; ++i) {
        names[i] = (char*)names;
    }
    names[block.count] = NULL;
    block.next         = (char*)&names[block.count + 1];
    block.names        = names;
    block.count        = 0;
    dl_iterate_phdr(span_dl_loaded_copy_cb, &block);
    names[block.count] = NULL; /* fewer, where some were unloaded */
    return names;
}
