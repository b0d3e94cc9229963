/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Descriptors span makes do not reach a program this process executes
 * (issue 29, item 6): the spill arena, the VMM export table, a unit's
 * exported descriptor (from a driver that gives it without close-on-exec,
 * as CUDA's does), the pidfd of a peer and descriptors taken from it. A
 * child, forked or spawned, executes ls on its own /proc/self/fd, and none
 * of them may be in its list.
 */
extern "C" {
#include "base/span_peer.h"
#include "key/span_spill.h"
#include "vmm/span_vmm_export.h"
}
#include "test_fork.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr uint64_t unit_base = 0x7d0000000000ull, unit_size = 2ull << 20;

ucs_status_t driver_buffer_id(uint64_t addr, uint64_t *id_p)
{
    *id_p = 77;
    return (addr == unit_base) ? UCS_OK : UCS_ERR_INVALID_ADDR;
}

/* A driver's export comes as it comes: inheritable here */
ucs_status_t driver_export_fd(uint64_t base, int *fd_p)
{
    *fd_p = memfd_create("span-test-driver-unit", 0);
    return (*fd_p >= 0) ? UCS_OK : UCS_ERR_IO_ERROR;
}

const span_vmm_export_ops_t driver_ops = {driver_buffer_id,
                                          driver_export_fd};

std::string fd_target(int fd)
{
    char path[64], target[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    return std::string(target, (n > 0) ? n : 0);
}

/* What `ls -l /proc/self/fd` prints in a child that executes it, started
 * by fork and exec (fork handlers run in the child) or by posix_spawn
 * (they do not: system() and popen() start programs so) */
std::string fds_after_exec(bool spawn)
{
    const char *argv[] = {"ls", "-l", "/proc/self/fd", NULL};
    posix_spawn_file_actions_t actions;
    int out[2];
    pid_t pid;

    if (pipe2(out, O_CLOEXEC) != 0) {
        return "pipe2 failed";
    }
    if (spawn) {
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
        if (posix_spawn(&pid, "/bin/ls", &actions, NULL, (char**)argv,
                        environ) != 0) {
            pid = -1;
        }
        posix_spawn_file_actions_destroy(&actions);
    } else if ((pid = fork()) == 0) {
        dup2(out[1], 1);
        execv("/bin/ls", (char**)argv);
        _exit(127);
    }
    close(out[1]);
    std::string listing;
    struct pollfd pfd = {out[0], POLLIN, 0};
    char buf[4096];
    ssize_t n;
    while ((pid > 0) && (poll(&pfd, 1, 10000) == 1) &&
           ((n = read(out[0], buf, sizeof(buf))) > 0)) {
        listing.append(buf, n);
    }
    close(out[0]);
    EXPECT_EQ(0, test_fork_wait(pid, 10)) << "ls of the child's descriptors";
    return listing;
}

} // namespace

TEST(span_cloexec, no_descriptor_of_span_reaches_an_exec)
{
    std::map<std::string, int> made; /* what -> descriptor */

    std::vector<uint8_t> keys(4 * 192, 0x5a);
    span_rkey_spill_t spill;
    ASSERT_EQ(UCS_OK, span_spill_put(keys.data(), 4, 192, &spill));
    made["spill arena"] = spill.fd;

    span_vmm_key_t key;
    span_vmm_export_t *exported;
    ASSERT_EQ(UCS_OK, span_vmm_export_get(&driver_ops, unit_base, unit_size,
                                          &key, &exported));
    made["VMM export table"] = key.table_fd;
    made["VMM unit export"]  = key.fd;

    int pidfd = span_peer_pidfd_open(getpid());
    ASSERT_GE(pidfd, 0);
    made["pidfd"] = pidfd;

    int table, unit;
    ASSERT_EQ(UCS_OK, span_vmm_table_open(pidfd, &key, &table));
    made["imported table"] = table;
    ASSERT_EQ(UCS_OK, span_vmm_table_take(pidfd, table, &key, &unit));
    made["imported unit"] = unit;

    char path[64];
    int arena_path = span_peer_fd_path(getpid(), spill.fd, path,
                                       sizeof(path));
    ASSERT_GE(arena_path, 0);
    made["spill arena by path"] = arena_path;
    int arena = span_peer_fd_reopen(arena_path);
    ASSERT_GE(arena, 0);
    made["imported spill arena"] = arena;

    for (bool spawn : {false, true}) {
        std::string listing = fds_after_exec(spawn);
        ASSERT_NE(std::string::npos, listing.find(" 1 -> ")) << listing;
        for (auto &m : made) {
            std::string entry = " " + std::to_string(m.second) + " -> " +
                                fd_target(m.second);
            EXPECT_EQ(std::string::npos, listing.find(entry))
                    << m.first << " (" << entry << ") is open after "
                    << (spawn ? "posix_spawn" : "fork and exec");
        }
    }

    close(arena);
    close(arena_path);
    close(unit);
    close(table);
    close(pidfd);
    span_vmm_export_put(exported);
    span_spill_remove(&spill);
}
