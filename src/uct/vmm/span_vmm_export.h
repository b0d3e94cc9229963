/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Exports of VMM units, shared, and the export table that vouches for them.
 *
 * One exported descriptor per physical unit, found by the unit's buffer id
 * and refcounted across every registration that covers the unit: a segment
 * that grows and is registered again exports only its new handles. An
 * export is withdrawn (its descriptor closed) at its last release, or at
 * once when the unit is unmapped, whoever still holds it.
 *
 * A descriptor number means nothing once closed: the next export may get
 * it. Each export gets a serial, unique in the process, and the process
 * keeps a table (a memfd) that holds, at each exported descriptor's
 * number, the serial and size of its export, cleared before the descriptor
 * is closed. An importer reads the entry, takes the descriptor, and reads
 * the entry again: where both name the key's export, the descriptor it took
 * is that export.
 *
 * Table layout (this build's byte order, same node only): offset 0, the
 * header of base/span_memfd.h (magic "SSPTABLE", table id); entry of
 * descriptor fd at SPAN_VMM_TABLE_FIRST + 16 * fd: serial and size
 * (8 bytes each), zero where fd is not an export. The memfd is sealed
 * against shrinking, so that an importer may map it (a view): whether a
 * cached import is still exported is then a read of memory, not a system
 * call per unit for every rendezvous message.
 *
 * A child forked after exports shares the parent's table memfd: it forgets
 * the parent's exports at fork without clearing their entries (closing
 * only its own copies of the descriptors), so its releases and unmap
 * events leave them to the parent, and its own exports go into a table of
 * its own.
 */
#ifndef SPAN_VMM_EXPORT_H_
#define SPAN_VMM_EXPORT_H_

#include "span_vmm.h"
#include "base/span_chunk.h"

#include <ucs/type/status.h>
#include <stddef.h>

/* What an export asks of the driver; a fake one in the unit tests */
typedef struct span_vmm_export_ops {
    /* Process-wide unique id of the allocation at addr (BUFFER_ID) */
    ucs_status_t (*buffer_id)(uint64_t addr, uint64_t *id_p);
    /* A new descriptor that shares the unit at base */
    ucs_status_t (*export_fd)(uint64_t base, int *fd_p);
} span_vmm_export_ops_t;

typedef struct span_vmm_export span_vmm_export_t;

/* The export of the unit [base, base + size), shared or new, with one more
 * reference, in *exported_p, and its key; UCS_ERR_UNSUPPORTED where the unit
 * cannot be shared */
ucs_status_t span_vmm_export_get(const span_vmm_export_ops_t *ops,
                                 uint64_t base, uint64_t size,
                                 span_vmm_key_t *key,
                                 span_vmm_export_t **exported_p);

/* Drops a reference; the last withdraws the export */
void span_vmm_export_put(span_vmm_export_t *exported);

/* Withdraws the exports of units that overlap [start, start + length):
 * the memory is being unmapped (a memory event) */
void span_vmm_export_invalidate(uint64_t start, uint64_t length);

/* Importer: this process's copy of the exporter's table that keys name
 * (pidfd: of the exporter), checked to be one; the caller closes it */
ucs_status_t span_vmm_table_open(int pidfd, const span_vmm_key_t *key,
                                 int *table_p);

/* Importer: this process's copy of the unit descriptor key names, taken
 * only while the exporter's table says it is that export; the caller
 * closes it */
ucs_status_t span_vmm_table_take(int pidfd, int table,
                                 const span_vmm_key_t *key,
                                 int *fd_p);

/* Importer: a read-only mapping of an exporter's table, up to the entries
 * of the keys it was opened for */
typedef struct span_vmm_table_view {
    const void *base;
    size_t     length;
} span_vmm_table_view_t;

/* Maps the table of the exporter that the n keys name (checked to be one,
 * sealed against shrinking); UCS_ERR_UNREACHABLE where it cannot */
ucs_status_t span_vmm_table_view_open(const span_vmm_key_t *keys,
                                      uint32_t n,
                                      span_vmm_table_view_t *view);

void span_vmm_table_view_close(span_vmm_table_view_t *view);

/* Whether the table still says that key's descriptor is its export */
int span_vmm_table_view_holds(const span_vmm_table_view_t *view,
                              const span_vmm_key_t *key);

#endif
