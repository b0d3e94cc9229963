/* SPDX-License-Identifier: BSD-3-Clause */
/* Descriptors open in this process: a test that must leave none behind
 * counts them before and after */
#ifndef TEST_FDS_H_
#define TEST_FDS_H_

#include <dirent.h>

static inline int test_open_fds()
{
    DIR *dir = opendir("/proc/self/fd");
    int n    = 0;

    while (readdir(dir) != nullptr) {
        ++n;
    }
    closedir(dir);
    return n;
}

#endif
