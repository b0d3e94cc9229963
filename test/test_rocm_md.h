/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A rocm_ipc+ twin MD's key packing on the emulated ROCm runtime, without
 * UCX's rocm module: the registration of [address, address + length) as
 * span makes it (the units under it, which span exports), and the key
 * UCP would pack for that range (test_rocm_md.c).
 */
#ifndef TEST_ROCM_MD_H_
#define TEST_ROCM_MD_H_

#include <ucs/type/status.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct test_rocm_md test_rocm_md_t;

/* Registers the units under the range and packs its key into rkey_buf
 * (SPAN_RKEY_MAX_SIZE bytes) */
ucs_status_t test_rocm_md_pack(void *address, size_t length, void *rkey_buf,
                               test_rocm_md_t **md_p);

/* Withdraws the exports and frees the registration */
void test_rocm_md_free(test_rocm_md_t *md);

#ifdef __cplusplus
}
#endif

#endif
