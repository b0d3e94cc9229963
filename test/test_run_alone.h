/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Runs each test of the program in a process of its own (this program
 * again, filtered to the test): GPU runtimes do not survive fork, and a
 * test forks its target after the test before it initialized the runtime
 * in this process. The child sees SPAN_GPU_TEST_ALONE set.
 */
#ifndef TEST_RUN_ALONE_H_
#define TEST_RUN_ALONE_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>

static inline bool glob_match(const char *pattern, const char *name)
{
    if (*pattern == '\0') {
        return *name == '\0';
    }
    if (*pattern == '*') {
        return glob_match(pattern + 1, name) ||
               ((*name != '\0') && glob_match(pattern, name + 1));
    }
    return (*name != '\0') && ((*pattern == '?') || (*pattern == *name)) &&
           glob_match(pattern + 1, name + 1);
}

/* GoogleTest's filter syntax: positive patterns, then '-' negative ones */
static inline bool filter_match(const std::string &filter,
                                const std::string &name)
{
    std::string positive = filter, negative;
    size_t dash          = filter.find('-');
    if (dash != std::string::npos) {
        positive = filter.substr(0, dash);
        negative = filter.substr(dash + 1);
    }
    auto any = [&name](const std::string &list) {
        size_t start = 0;
        while (start <= list.size()) {
            size_t end = list.find(':', start);
            end        = (end == std::string::npos) ? list.size() : end;
            if (glob_match(list.substr(start, end - start).c_str(),
                           name.c_str())) {
                return true;
            }
            start = end + 1;
        }
        return false;
    };
    return any(positive.empty() ? "*" : positive) &&
           (negative.empty() || !any(negative));
}

static inline int run_each_test_alone(const char *self)
{
    std::string filter = GTEST_FLAG_GET(filter);
    const ::testing::UnitTest *unit = ::testing::UnitTest::GetInstance();
    int failed = 0;

    for (int i = 0; i < unit->total_test_suite_count(); ++i) {
        const ::testing::TestSuite *suite = unit->GetTestSuite(i);
        for (int j = 0; j < suite->total_test_count(); ++j) {
            const ::testing::TestInfo *info = suite->GetTestInfo(j);
            std::string name = std::string(suite->name()) + "." +
                               info->name();
            if (!filter_match(filter, name)) {
                continue;
            }
            std::string arg = "--gtest_filter=" + name;
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                setenv("SPAN_GPU_TEST_ALONE", "1", 1);
                execl(self, self, arg.c_str(), (char*)NULL);
                _exit(127);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0)) {
                printf("GPU suite: %s.%s failed (status 0x%x)\n",
                       suite->name(), info->name(), status);
                ++failed;
            }
        }
    }
    printf("GPU suite: %d test(s) failed\n", failed);
    return failed ? 1 : 0;
}

#endif
