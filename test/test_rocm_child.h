/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The second process of the emulated-runtime tests: this program again
 * (/proc/self/exe --rocm-child MODE ARGS...), a fresh process with a
 * runtime of its own, as a peer is. Bounded: a child that hangs is killed.
 */
#ifndef TEST_ROCM_CHILD_H_
#define TEST_ROCM_CHILD_H_

#include <hsa/hsa_ext_amd.h>

#include <sys/types.h>

#include <string>
#include <vector>

/* A child's exit code when the attach it was asked for fails */
constexpr int test_rocm_child_attach_fails = 3;

/* Runs a child and returns its exit code; 128 + the signal where one
 * killed it */
int test_rocm_child_run(const std::vector<std::string> &args);

std::string test_rocm_hex(const void *data, size_t size);
bool test_rocm_unhex(const std::string &hex, void *data, size_t size);

/* A child that talks over pipes: its stdin and stdout */
struct test_rocm_peer_t {
    pid_t pid;
    int   to_child;
    int   from_child;
};

int test_rocm_peer_start(test_rocm_peer_t *peer,
                         const std::vector<std::string> &args);
/* Exactly size bytes from the child, or to it: 0, or -1 */
int test_rocm_peer_read(test_rocm_peer_t *peer, void *data, size_t size);
int test_rocm_peer_write(test_rocm_peer_t *peer, const void *data,
                         size_t size);
/* Closes its stdin and returns its exit code */
int test_rocm_peer_finish(test_rocm_peer_t *peer);

/* A child that allocates size bytes on device 0, filled with the pattern of
 * seed 5, exports them, and exits when told: an exporter that dies while
 * this process holds its memory */
typedef test_rocm_peer_t test_rocm_exporter_t;

int test_rocm_exporter_start(test_rocm_exporter_t *exporter, size_t size,
                             hsa_amd_ipc_memory_t *handle);
int test_rocm_exporter_finish(test_rocm_exporter_t *exporter);

/* vmm_export N UNIT: a child that maps N POSIX-fd handles of UNIT bytes on
 * device 0 back to back, filled with the pattern of seed 31, exports each
 * through span (span_vmm_export_get with the ROCm driver), and writes
 * the N span_vmm_key_t and the range's base. Then, per byte it reads:
 * 'w' withdraws the exports, 'c' checks the pattern of seed 131; it answers
 * one byte, 0 for done */
constexpr uint8_t test_rocm_vmm_seed = 31;
constexpr uint8_t test_rocm_vmm_put_seed = 131;

#endif
