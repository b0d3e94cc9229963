/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The second process of the emulated-runtime tests, and the program's main.
 */
#include "test_rocm_child.h"

#include <gtest/gtest.h>

#include <hip/hip_runtime_api.h>
#include <hsa/hsa.h>

extern "C" {
#include "resolve/span_rocm.h"
#include "vendor/span_vendor.h"
}

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

/* No child runs longer */
constexpr unsigned child_seconds = 30;

uint8_t pattern(uint8_t seed, size_t i)
{
    return (uint8_t)(seed + i * 7);
}

size_t mismatches(const void *ptr, size_t size, uint8_t seed)
{
    size_t bad = 0;

    for (size_t i = 0; i < size; ++i) {
        bad += ((const uint8_t*)ptr)[i] != pattern(seed, i);
    }
    return bad;
}

void fill(void *ptr, size_t size, uint8_t seed)
{
    for (size_t i = 0; i < size; ++i) {
        ((uint8_t*)ptr)[i] = pattern(seed, i);
    }
}

/* ipc_rw HANDLE SIZE: attach (after a refused attach of the wrong size),
 * check the exporter's pattern (seed 11), write seed 99 into the second
 * MiB, detach */
int child_ipc_rw(const std::vector<std::string> &args)
{
    hsa_amd_ipc_memory_t handle;
    hsa_amd_pointer_info_t info = {};
    size_t size = std::stoul(args[1]);
    void *mapped;

    if (!test_rocm_unhex(args[0], &handle, sizeof(handle)) ||
        (hsa_init() != HSA_STATUS_SUCCESS)) {
        return 10;
    }
    if (hsa_amd_ipc_memory_attach(&handle, size / 2, 0, nullptr, &mapped) !=
        HSA_STATUS_ERROR_INVALID_ARGUMENT) {
        return 11; /* "must be the full length" */
    }
    if (hsa_amd_ipc_memory_attach(&handle, size, 0, nullptr, &mapped) !=
        HSA_STATUS_SUCCESS) {
        return test_rocm_child_attach_fails;
    }
    info.size = sizeof(info);
    if ((hsa_amd_pointer_info((char*)mapped + 100, &info, nullptr, nullptr,
                              nullptr) != HSA_STATUS_SUCCESS) ||
        (info.type != HSA_EXT_POINTER_TYPE_IPC) ||
        (info.agentBaseAddress != mapped) || (info.sizeInBytes != size) ||
        (info.agentOwner.handle == 0)) {
        return 12;
    }
    if (mismatches(mapped, size, 11) != 0) {
        return 13;
    }
    fill((char*)mapped + (1ul << 20), 1ul << 20, 99);
    return (hsa_amd_ipc_memory_detach(mapped) == HSA_STATUS_SUCCESS) ? 0 : 14;
}

/* ipc_attach HANDLE SIZE */
int child_ipc_attach(const std::vector<std::string> &args)
{
    hsa_amd_ipc_memory_t handle;
    void *mapped;

    if (!test_rocm_unhex(args[0], &handle, sizeof(handle)) ||
        (hsa_init() != HSA_STATUS_SUCCESS)) {
        return 10;
    }
    if (hsa_amd_ipc_memory_attach(&handle, std::stoul(args[1]), 0, nullptr,
                                  &mapped) != HSA_STATUS_SUCCESS) {
        return test_rocm_child_attach_fails;
    }
    return (hsa_amd_ipc_memory_detach(mapped) == HSA_STATUS_SUCCESS) ? 0 : 14;
}

/* ipc_export SIZE: writes the handle to stdout, exits at EOF on stdin */
int child_ipc_export(const std::vector<std::string> &args)
{
    size_t size = std::stoul(args[0]);
    hsa_amd_ipc_memory_t handle;
    void *ptr;
    char byte;

    if ((hipSetDevice(0) != hipSuccess) ||
        (hipMalloc(&ptr, size) != hipSuccess)) {
        return 10;
    }
    fill(ptr, size, 5);
    if (hsa_amd_ipc_memory_create(ptr, size, &handle) != HSA_STATUS_SUCCESS) {
        return 11;
    }
    if (write(1, &handle, sizeof(handle)) != sizeof(handle)) {
        return 12;
    }
    while (read(0, &byte, 1) > 0) {
    }
    return 0; /* exits without freeing, as a peer that dies */
}

/* vmm_rw PID UNIT FD...: takes the exporter's descriptors, maps the units
 * back to back, checks seed 21, writes seed 121 */
int child_vmm_rw(const std::vector<std::string> &args)
{
    int pidfd = syscall(SYS_pidfd_open, std::stoi(args[0]), 0);
    size_t unit = std::stoul(args[1]), n = args.size() - 2;
    std::vector<hipMemGenericAllocationHandle_t> handles(n);
    hipMemAccessDesc access = {};
    char *va;
    int fd;

    if ((pidfd < 0) ||
        (hipMemAddressReserve((void**)&va, n * unit, 0, nullptr, 0) !=
         hipSuccess)) {
        return 10;
    }
    for (size_t i = 0; i < n; ++i) {
        fd = syscall(SYS_pidfd_getfd, pidfd, std::stoi(args[i + 2]), 0);
        if ((fd < 0) ||
            (hipMemImportFromShareableHandle(
                     &handles[i], (void*)(intptr_t)fd,
                     hipMemHandleTypePosixFileDescriptor) != hipSuccess) ||
            (hipMemMap(va + i * unit, unit, 0, handles[i], 0) != hipSuccess)) {
            return 11;
        }
        close(fd); /* the handle holds the memory */
    }
    access.location.type = hipMemLocationTypeDevice;
    access.location.id   = 0;
    access.flags         = hipMemAccessFlagsProtReadWrite;
    if (hipMemSetAccess(va, n * unit, &access, 1) != hipSuccess) {
        return 12;
    }
    if (mismatches(va, n * unit, 21) != 0) {
        return 13;
    }
    fill(va, n * unit, 121);
    if (hipMemUnmap(va, n * unit) != hipSuccess) {
        return 14;
    }
    for (auto h : handles) {
        (void)!hipMemRelease(h);
    }
    return (hipMemAddressFree(va, n * unit) == hipSuccess) ? 0 : 15;
}

/* vmm_export N UNIT (test_rocm_child.h) */
int child_vmm_export(const std::vector<std::string> &args)
{
    size_t n = std::stoul(args[0]), unit = std::stoul(args[1]);
    std::vector<span_vmm_export_t*> exports(n);
    std::vector<span_vmm_key_t> keys(n);
    hipMemAllocationProp prop = {};
    hipMemAccessDesc access   = {};
    hipMemGenericAllocationHandle_t h;
    char *base, cmd, answer;

    prop.type                = hipMemAllocationTypePinned;
    prop.location.type       = hipMemLocationTypeDevice;
    prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
    if ((span_vendor_driver(UCS_MEMORY_TYPE_ROCM) == nullptr) ||
        (hipMemAddressReserve((void**)&base, n * unit, 0, nullptr, 0) !=
         hipSuccess)) {
        return 10;
    }
    for (size_t i = 0; i < n; ++i) {
        if ((hipMemCreate(&h, unit, &prop, 0) != hipSuccess) ||
            (hipMemMap(base + i * unit, unit, 0, h, 0) != hipSuccess) ||
            (hipMemRelease(h) != hipSuccess)) {
            return 11;
        }
    }
    access.location.type = hipMemLocationTypeDevice;
    access.flags         = hipMemAccessFlagsProtReadWrite;
    if (hipMemSetAccess(base, n * unit, &access, 1) != hipSuccess) {
        return 12;
    }
    fill(base, n * unit, test_rocm_vmm_seed);
    for (size_t i = 0; i < n; ++i) {
        if (span_vmm_export_get(&span_rocm_vmm_export_ops,
                                (uintptr_t)base + i * unit, unit,
                                &keys[i], &exports[i]) != UCS_OK) {
            return 13;
        }
    }
    if ((write(1, keys.data(), n * sizeof(keys[0])) !=
         (ssize_t)(n * sizeof(keys[0]))) ||
        (write(1, &base, sizeof(base)) != sizeof(base))) {
        return 14;
    }
    while (read(0, &cmd, 1) == 1) {
        if (cmd == 'w') {
            for (auto e : exports) {
                span_vmm_export_put(e);
            }
            answer = 0;
        } else {
            answer = (mismatches(base, n * unit, test_rocm_vmm_put_seed) != 0);
        }
        if (write(1, &answer, 1) != 1) {
            return 15;
        }
    }
    return 0;
}

int child_main(int argc, char **argv)
{
    std::vector<std::string> args(argv + 3, argv + argc);
    std::string mode = argv[2];

    alarm(child_seconds);
    if (mode == "ipc_rw") {
        return child_ipc_rw(args);
    } else if (mode == "ipc_attach") {
        return child_ipc_attach(args);
    } else if (mode == "ipc_export") {
        return child_ipc_export(args);
    } else if (mode == "vmm_rw") {
        return child_vmm_rw(args);
    } else if (mode == "vmm_export") {
        return child_vmm_export(args);
    }
    fprintf(stderr, "rocm child: no mode '%s'\n", mode.c_str());
    return 2;
}

pid_t child_spawn(const std::vector<std::string> &args, int in, int out)
{
    std::vector<std::string> argv_s = {"span_rocm_test", "--rocm-child"};
    std::vector<char*> argv;
    pid_t pid;

    argv_s.insert(argv_s.end(), args.begin(), args.end());
    for (auto &a : argv_s) {
        argv.push_back(&a[0]);
    }
    argv.push_back(nullptr);
    pid = fork();
    if (pid == 0) {
        if (in >= 0) {
            dup2(in, 0);
        }
        if (out >= 0) {
            dup2(out, 1);
        }
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    return pid;
}

int child_wait(pid_t pid)
{
    int status;

    if (waitpid(pid, &status, 0) != pid) {
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

int test_rocm_child_run(const std::vector<std::string> &args)
{
    pid_t pid = child_spawn(args, -1, -1);

    return (pid < 0) ? -1 : child_wait(pid);
}

std::string test_rocm_hex(const void *data, size_t size)
{
    std::string hex;
    char byte[3];

    for (size_t i = 0; i < size; ++i) {
        snprintf(byte, sizeof(byte), "%02x", ((const uint8_t*)data)[i]);
        hex += byte;
    }
    return hex;
}

bool test_rocm_unhex(const std::string &hex, void *data, size_t size)
{
    if (hex.size() != 2 * size) {
        return false;
    }
    for (size_t i = 0; i < size; ++i) {
        ((uint8_t*)data)[i] = (uint8_t)std::stoul(hex.substr(2 * i, 2), nullptr,
                                                  16);
    }
    return true;
}

int test_rocm_peer_start(test_rocm_peer_t *peer,
                         const std::vector<std::string> &args)
{
    int to[2], from[2];

    if (pipe2(to, O_CLOEXEC) != 0) {
        return -1;
    }
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return -1;
    }
    peer->pid = child_spawn(args, to[0], from[1]);
    close(to[0]);
    close(from[1]);
    peer->to_child   = to[1];
    peer->from_child = from[0];
    return (peer->pid > 0) ? 0 : -1;
}

int test_rocm_peer_read(test_rocm_peer_t *peer, void *data, size_t size)
{
    size_t done = 0;
    ssize_t n;

    while (done < size) {
        n = read(peer->from_child, (char*)data + done, size - done);
        if (n <= 0) {
            return -1;
        }
        done += n;
    }
    return 0;
}

int test_rocm_peer_write(test_rocm_peer_t *peer, const void *data,
                         size_t size)
{
    return (write(peer->to_child, data, size) == (ssize_t)size) ? 0 : -1;
}

int test_rocm_peer_finish(test_rocm_peer_t *peer)
{
    close(peer->to_child);
    close(peer->from_child);
    return child_wait(peer->pid);
}

int test_rocm_exporter_start(test_rocm_exporter_t *exporter, size_t size,
                             hsa_amd_ipc_memory_t *handle)
{
    if (test_rocm_peer_start(exporter, {"ipc_export", std::to_string(size)}) !=
        0) {
        return -1;
    }
    return test_rocm_peer_read(exporter, handle, sizeof(*handle));
}

int test_rocm_exporter_finish(test_rocm_exporter_t *exporter)
{
    return test_rocm_peer_finish(exporter);
}

int main(int argc, char **argv)
{
    /* every process of the test, children too, sees two GPUs */
    setenv("HSA_EMU_GPUS", "2", 1);
    if ((argc >= 3) && !strcmp(argv[1], "--rocm-child")) {
        return child_main(argc, argv);
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
