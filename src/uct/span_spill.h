/*
 * Spill table: inner keys too large for the 255 bytes of a span rkey (one
 * cuda_ipc key is 192 bytes) are kept by the exporting process and fetched
 * by an importer on the same node; the rkey carries a reference to them
 * (span_rkey.c). A child forked after spills spills into an arena of its
 * own, and releasing a reference it inherited leaves the parent's slot.
 */
#ifndef SPAN_SPILL_H_
#define SPAN_SPILL_H_

#include "span_rkey.h"

/* Stores n keys of K bytes, contiguous, and fills in the reference */
ucs_status_t span_spill_put(const void *keys, uint32_t n, size_t K,
                            span_rkey_spill_t *spill);

/* Releases the slot: a reference to it is refused from now on */
void span_spill_remove(const span_rkey_spill_t *spill);

/* Reads the n keys of K bytes a reference names into keys, validated */
ucs_status_t span_spill_fetch(const span_rkey_spill_t *spill, uint32_t n,
                              size_t K, void *keys);

/* This process's PID namespace, as keys carry it: 32 bits of UCX's system
 * id of this host, then the inode number of /proc/self/ns/pid, unique only
 * within one kernel */
uint64_t span_spill_pid_ns(void);

/* Whether a peer's reference to its descriptor fd, as process pid of PID
 * namespace pid_ns, can name that descriptor from here: a pid means nothing
 * on another host or in another PID namespace (UCS_ERR_UNREACHABLE, as
 * cuda_ipc refuses it),
 * and pid and fd must be values the kernel can have given
 * (UCS_ERR_INVALID_PARAM). Every import of a peer's descriptor checks it
 * first (spill arenas, span's VMM units); what: for the log. */
ucs_status_t span_spill_peer_check(uint32_t pid, uint64_t pid_ns, uint32_t fd,
                                   const char *what);

#endif
