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

/* A child that allocates size bytes on device 0, filled with the pattern of
 * seed 5, exports them, and exits when told: an exporter that dies while
 * this process holds its memory */
struct test_rocm_exporter_t {
    pid_t pid;
    int   to_child;
};

int test_rocm_exporter_start(test_rocm_exporter_t *exporter, size_t size,
                             hsa_amd_ipc_memory_t *handle);
int test_rocm_exporter_finish(test_rocm_exporter_t *exporter);

#endif
