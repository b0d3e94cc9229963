/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memfd tables that peers on the node read: the spill arena
 * (key/span_spill.c) and the VMM export table (vmm/span_vmm_export.c). A
 * table is a memfd of a name of its kind whose first 16 bytes are a header
 * {magic, id}, the id random, so that a recycled pid or descriptor is
 * refused. A peer takes the descriptor (/proc/<pid>/fd/<fd>, pidfd_getfd)
 * and reads it only where it is a regular file whose link names a memfd of
 * that kind and whose header is the one its key names. Each caller keeps
 * its own layout after the header.
 */
#ifndef SPAN_MEMFD_H_
#define SPAN_MEMFD_H_

#include <ucs/type/status.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct span_memfd_kind {
    const char *name;  /* of the memfd, as its link reads "/memfd:<name> " */
    uint64_t   magic;  /* the header's first word */
    const char *log;   /* what the log lines start with: "span spill" */
    const char *what;  /* what they call a table: "spill arena" */
} span_memfd_kind_t;

/* A random 64-bit number (getrandom, else the time and the pid) */
uint64_t span_memfd_random(void);

/* A new table of kind, close-on-exec, its header written with a random id
 * (*id_p); seals (F_SEAL_*), where not 0, added after the header. Logs and
 * returns UCS_ERR_IO_ERROR where it cannot. */
ucs_status_t span_memfd_create(const span_memfd_kind_t *kind, unsigned seals,
                               int *fd_p, uint64_t *id_p);

/* Whether fd is a memfd of kind (a regular file whose link names it);
 * link (of size bytes) gets what the link reads, *mode_p its mode (0 where
 * fstat fails), for the caller's message */
int span_memfd_is(const span_memfd_kind_t *kind, int fd, char *link,
                  size_t size, mode_t *mode_p);

/* Whether fd carries every seal of seals (F_SEAL_*); not where they
 * cannot be read (not a memfd, or fcntl failed) */
int span_memfd_sealed(int fd, unsigned seals);

/* Whether fd's header is kind's with id */
int span_memfd_header_is(const span_memfd_kind_t *kind, int fd, uint64_t id);

#endif
