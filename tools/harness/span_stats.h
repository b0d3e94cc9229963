/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Timing and medians for span-check and the benchmarks.
 */
#ifndef SPAN_STATS_H_
#define SPAN_STATS_H_

#include <stdlib.h>
#include <time.h>

static inline double span_stats_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

static inline int span_stats_cmp(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

/* Sorts v */
static inline double span_stats_median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), span_stats_cmp);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
