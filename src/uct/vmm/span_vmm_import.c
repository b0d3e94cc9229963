/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The import of VMM units, one for every driver (span_vmm_import.h).
 */
#include "span_vmm_import.h"
#include "span_vmm_export.h"
#include "base/span_hash.h"
#include "base/span_peer.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

/* A mapping tracks the devices given access in one 64-bit word */
#define SPAN_VMM_IMPORT_MAX_DEVICES 64

/* The descriptor of unit i of size bytes, its key checked to be of the
 * driver's units, of the exporter of the first and of that size */
static ucs_status_t span_vmm_unit_take(const span_vmm_import_ops_t *ops,
                                       int pidfd, int table,
                                       const span_vmm_key_t *keys,
                                       const span_chunk_geom_t *geom,
                                       uint32_t i, uint64_t size, int *fd_p)
{
    const span_vmm_key_t *key = &keys[i];
    uint32_t pid              = keys[0].pid;
    ucs_status_t status;

    if ((key->magic != ops->magic) || (key->pid != pid) ||
        (key->size != size)) {
        ucs_error("span vmm import: unit %u/%u of process %u: its key does "
                  "not describe the %" PRIu64 "-byte %s unit the rkey's "
                  "geometry makes", i + 1, geom->num_chunks, pid, size,
                  ops->name);
        return UCS_ERR_INVALID_PARAM;
    }
    status = span_peer_check(pid, key->pid_ns, key->fd, "a VMM unit");
    if (status != UCS_OK) {
        return status;
    }
    return span_vmm_table_take(pidfd, table, key, fd_p);
}

/* Maps unit i at its place in the range at va */
static ucs_status_t span_vmm_unit_map(const span_vmm_import_ops_t *ops,
                                      int pidfd, int table,
                                      const span_vmm_key_t *keys,
                                      const span_chunk_geom_t *geom,
                                      uint64_t va, uint32_t i)
{
    uint64_t start, length, handle;
    ucs_status_t status;
    int fd;

    span_chunk_range(geom, i, &start, &length);
    status = span_vmm_unit_take(ops, pidfd, table, keys, geom, i, length,
                                &fd);
    if (status != UCS_OK) {
        return status;
    }
    status = ops->import(fd, &handle);
    close(fd); /* the handle holds the unit */
    if (status != UCS_OK) {
        ucs_error("span vmm import: unit %u/%u of process %u: %s cannot "
                  "import its descriptor", i + 1, geom->num_chunks,
                  keys[0].pid, ops->name);
        return UCS_ERR_UNREACHABLE;
    }
    status = ops->map(va + (start - geom->base), length, handle);
    ops->release(handle); /* a mapping holds it */
    if (status != UCS_OK) {
        ucs_error("span vmm import: unit %u/%u of process %u: cannot map its "
                  "%" PRIu64 " bytes at 0x%" PRIx64, i + 1, geom->num_chunks,
                  keys[0].pid, length, va + (start - geom->base));
        return UCS_ERR_NO_MEMORY;
    }
    return UCS_OK;
}

/* Unmaps the first count units mapped at va, the last first */
static void span_vmm_units_unmap(const span_vmm_import_ops_t *ops,
                                 const span_chunk_geom_t *geom, uint64_t va,
                                 uint32_t count)
{
    uint64_t start, length;

    while (count-- > 0) {
        span_chunk_range(geom, count, &start, &length);
        ops->unmap(va + (start - geom->base), length);
    }
}

/* Maps units [0, *mapped_p) at va, each taken from the exporter while its
 * table says it is the export its key names */
static ucs_status_t span_vmm_units_map(const span_vmm_import_ops_t *ops,
                                       const span_vmm_key_t *keys,
                                       const span_chunk_geom_t *geom,
                                       uint64_t va, uint32_t *mapped_p)
{
    ucs_status_t status;
    int pidfd, table;

    *mapped_p = 0;
    /* the first unit's key names the process and its table; every key is
     * checked */
    status = span_peer_check(keys[0].pid, keys[0].pid_ns, keys[0].table_fd,
                             "a VMM export table");
    if (status != UCS_OK) {
        return status;
    }
    pidfd = span_peer_pidfd_open(keys[0].pid);
    if (pidfd < 0) {
        ucs_error("span vmm import: pidfd_open(%u) failed: %m", keys[0].pid);
        return UCS_ERR_UNREACHABLE;
    }
    status = span_vmm_table_open(pidfd, &keys[0], &table);
    if (status != UCS_OK) {
        goto out_pidfd;
    }
    for (; *mapped_p < geom->num_chunks; ++*mapped_p) {
        status = span_vmm_unit_map(ops, pidfd, table, keys, geom, va,
                                   *mapped_p);
        if (status != UCS_OK) {
            break;
        }
    }
    close(table);
out_pidfd:
    close(pidfd);
    return status;
}

ucs_status_t span_vmm_import(const span_vmm_import_ops_t *ops,
                             const span_vmm_key_t *keys,
                             const span_chunk_geom_t *geom,
                             span_vmm_map_t *map)
{
    ucs_status_t status;
    uint32_t mapped;
    int entered;

    if (ops == NULL) {
        ucs_error("span vmm import: %u units of process %u: span was built "
                  "without the driver that maps them", geom->num_chunks,
                  keys[0].pid);
        return UCS_ERR_UNREACHABLE;
    }
    memset(map, 0, sizeof(*map));
    map->ops      = ops;
    map->rocm     = ops->rocm;
    map->length   = geom->length;
    map->pid      = keys[0].pid;
    map->pid_ns   = keys[0].pid_ns;
    map->keys_sum = span_hash_fnv(keys, geom->num_chunks * sizeof(*keys));

    if (ops->enter(&map->device, &entered) != UCS_OK) {
        ucs_error("span vmm import: no %s driver or device to map %u units "
                  "of process %u", ops->name, geom->num_chunks, map->pid);
        return UCS_ERR_UNREACHABLE;
    }
    if (ops->reserve(geom->length, &map->base) != UCS_OK) {
        ucs_error("span vmm import: cannot reserve %" PRIu64 " bytes to map "
                  "%u units of process %u", geom->length, geom->num_chunks,
                  map->pid);
        status = UCS_ERR_NO_MEMORY;
        goto err_leave;
    }
    status = span_vmm_units_map(ops, keys, geom, map->base, &mapped);
    if (status != UCS_OK) {
        goto err_unmap;
    }
    status = span_vmm_access(map, map->device);
    if (status != UCS_OK) {
        goto err_unmap;
    }
    ops->leave(map->device, entered);
    return UCS_OK;

err_unmap:
    span_vmm_units_unmap(ops, geom, map->base, mapped);
    ops->free(map->base, geom->length);
err_leave:
    ops->leave(map->device, entered);
    return status;
}

void span_vmm_unmap(span_vmm_map_t *map)
{
    map->ops->unmap(map->base, map->length);
    map->ops->free(map->base, map->length);
}

ucs_status_t span_vmm_access(span_vmm_map_t *map, int device)
{
    if ((device < 0) || (device >= SPAN_VMM_IMPORT_MAX_DEVICES)) {
        ucs_error("span vmm import: device %d is beyond the %d a mapping "
                  "tracks", device, SPAN_VMM_IMPORT_MAX_DEVICES);
        return UCS_ERR_NO_DEVICE;
    }
    if (map->devices & (1ull << device)) {
        return UCS_OK;
    }
    if (map->ops->set_access(map->base, map->length, device) != UCS_OK) {
        ucs_error("span vmm import: the %" PRIu64 "-byte mapping of process "
                  "%u: cannot give device %d access", map->length, map->pid,
                  device);
        return UCS_ERR_NO_DEVICE;
    }
    map->devices |= 1ull << device;
    return UCS_OK;
}
