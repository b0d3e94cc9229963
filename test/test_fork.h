/* SPDX-License-Identifier: BSD-3-Clause */
/* Tests across fork: a body that runs in a child, which reports through its
 * exit status (GoogleTest's checks in a child would be lost, or reported
 * twice), and waits on the child and its pipes that end in a bound, so a
 * child that hangs fails the test instead of stalling it */
#ifndef SPAN_TEST_FORK_H_
#define SPAN_TEST_FORK_H_

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

/* In a child's body: a check that failed says which, and the child exits
 * with status 1 */
#define TEST_CHILD_CHECK(_cond) \
    do { \
        if (!(_cond)) { \
            fprintf(stderr, "child %d: %s:%d: failed: %s\n", getpid(), \
                    __FILE__, __LINE__, #_cond); \
            return 1; \
        } \
    } while (0)

/* Forks a child that runs body and exits with its return value */
static inline pid_t test_fork(const std::function<int()> &body)
{
    pid_t pid = fork();

    if (pid == 0) {
        int status = body();
        fflush(stderr);
        _exit(status);
    }
    return pid;
}

/* Prints the stacks of a child that hangs to stderr, where gdb is installed,
 * in a bound (issue 38: a child hung once under ASan and left no trace);
 * whether it waits inside a sanitizer's runtime: one of its four innermost
 * frames is in __sanitizer:: (a lock of its own, or a loop that yields for
 * one). GCC 12's libasan takes none of its allocator's locks around fork
 * (LLVM 18's does: llvm-project#75290), so a child forked while another
 * thread was inside malloc waits for ever in its first malloc: the
 * runtime's hang, not span's, and not on one of span's locks, which the
 * runtime does not wrap. */
static inline bool test_fork_print_stacks(pid_t pid)
{
    bool in_runtime = false;
    char cmd[256], line[1024];
    FILE *gdb;

    snprintf(cmd, sizeof(cmd),
             "command -v gdb >/dev/null 2>&1 && env -u LD_PRELOAD timeout 60 "
             "gdb -batch -nx -p %d -ex 'thread apply all bt 40' </dev/null "
             "2>&1",
             (int)pid);
    gdb = popen(cmd, "r");
    if (gdb == NULL) {
        fprintf(stderr, "child %d: no stacks (%m)\n", pid);
        return false;
    }
    while (fgets(line, sizeof(line), gdb) != NULL) {
        fputs(line, stderr);
        in_runtime |= (line[0] == '#') && (line[1] >= '0') &&
                      (line[1] <= '3') && (line[2] == ' ') &&
                      (strstr(line, " __sanitizer::") != NULL);
    }
    if (pclose(gdb) != 0) {
        fprintf(stderr, "child %d: no stacks (gdb missing or failed)\n", pid);
        return false;
    }
    return in_runtime;
}

/* A child that test_fork_wait found waiting inside a sanitizer's runtime */
#define TEST_FORK_HUNG_IN_SANITIZER (-4)

/* The child's exit status; -1 where it did not exit within seconds (its
 * stacks are printed, and it is killed then), TEST_FORK_HUNG_IN_SANITIZER
 * where its stacks show it waits inside a sanitizer's runtime, -2 where it
 * is no child of this process */
static inline int test_fork_wait(pid_t pid, unsigned seconds)
{
    auto end = std::chrono::steady_clock::now() +
               std::chrono::seconds(seconds);
    pid_t ret;
    int st;

    while ((ret = waitpid(pid, &st, WNOHANG)) == 0) {
        if (std::chrono::steady_clock::now() > end) {
            fprintf(stderr, "child %d did not exit in %u s: killed\n", pid,
                    seconds);
            bool in_runtime = test_fork_print_stacks(pid);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return in_runtime ? TEST_FORK_HUNG_IN_SANITIZER : -1;
        }
        usleep(1000);
    }
    if (ret != pid) {
        return -2;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Reads size bytes that the other end writes at once; false where they
 * did not come within seconds */
static inline bool test_pipe_read(int fd, void *buf, size_t size,
                                  unsigned seconds)
{
    struct pollfd pfd = {fd, POLLIN, 0};

    return (poll(&pfd, 1, seconds * 1000) == 1) &&
           (read(fd, buf, size) == (ssize_t)size);
}

/* Waits until the other end of the pipe is closed, at most seconds */
static inline bool test_pipe_wait_closed(int fd, unsigned seconds)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    char c;

    return (poll(&pfd, 1, seconds * 1000) == 1) && (read(fd, &c, 1) == 0);
}

/* Forks children one after another while other threads (workers of them)
 * run work over and over: each child runs body, in which a module must be
 * usable (it must not inherit a lock of it held by a thread the child does
 * not have, nor a half-made entry). The test fails at the first child that
 * does not exit with 0 within 5 s, but for one that hangs inside a
 * sanitizer's runtime (TEST_FORK_HUNG_IN_SANITIZER): two of those pass,
 * the third fails. */
static inline void test_fork_amid(const std::function<void()> &work,
                                  const std::function<int()> &body,
                                  int children = 20, int workers = 1)
{
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
        threads.emplace_back([&] {
            while (!stop) {
                work();
            }
        });
    }

    int in_runtime = 0;
    for (int c = 0; c < children; ++c) {
        pid_t child = test_fork(body);
        int status  = (child < 0) ? -3 : test_fork_wait(child, 5);
        if ((status == TEST_FORK_HUNG_IN_SANITIZER) && (++in_runtime < 3)) {
            fprintf(stderr, "child %d of %d hung inside the sanitizer's "
                    "runtime: not counted\n", c, children);
            continue;
        }
        if (status != 0) {
            ADD_FAILURE() << "child " << c << " of " << children
                          << ": status " << status;
            break;
        }
    }
    stop = true;
    for (auto &t : threads) {
        t.join();
    }
}

#endif
