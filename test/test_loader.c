/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * How span registers when threads make their first query of UCX's
 * components at once (issue 48): 8 threads call uct_query_components
 * together, and each must find span among the components; and no library
 * is opened inside a dl_iterate_phdr callback, where glibc holds its load
 * lock (a thread loading a library at the same time takes the two locks in
 * the other order: a deadlock seen 1 in 30 runs). This program defines
 * dlopen and dl_iterate_phdr itself (exported: they come first for span
 * and UCX) to count the opens made inside an iteration, and holds the
 * load of span's implementation for 200 ms so that the other threads
 * arrive while span registers, every run. Run with span loaded as the
 * release loads it (UCX_MODULE_DIR, or LD_PRELOAD for 1.16-1.21). Exit 0
 * where every thread saw span and nothing was opened inside an iteration.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif
#include <uct/api/uct.h>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define THREADS 8

static int opened_inside; /* dlopens made inside an iteration */
static pthread_barrier_t start;
static int saw_span[THREADS];

/* TSan's runtime calls dl_iterate_phdr before it can serve the dlsym of
 * an interposer: there only the threads are checked (and TSan watches the
 * loader's locks) */
#if defined(__SANITIZE_THREAD__)
#  define SPAN_TEST_INTERPOSE 0
#else
#  define SPAN_TEST_INTERPOSE 1
#endif

#if SPAN_TEST_INTERPOSE
static __thread int in_iteration;

typedef void *(*dlopen_func_t)(const char *, int);
typedef int (*iterate_func_t)(int (*)(struct dl_phdr_info *, size_t, void *),
                              void *);

int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *),
                    void *arg)
{
    iterate_func_t real = (iterate_func_t)dlsym(RTLD_NEXT, "dl_iterate_phdr");
    int ret;

    ++in_iteration;
    ret = real(cb, arg);
    --in_iteration;
    return ret;
}

void *dlopen(const char *path, int flags)
{
    dlopen_func_t real = (dlopen_func_t)dlsym(RTLD_NEXT, "dlopen");

    if (in_iteration) {
        __atomic_add_fetch(&opened_inside, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "dlopen(%s) inside dl_iterate_phdr\n", path);
    }
    if ((path != NULL) && (strstr(path, "libspan_impl") != NULL)) {
        usleep(200 * 1000); /* the other threads arrive meanwhile */
    }
    return real(path, flags);
}
#endif

static int has_span(void)
{
    uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
    uct_component_h *components;
    unsigned i, count;
    int found = 0;

    if (uct_query_components(&components, &count) != UCS_OK) {
        return 0;
    }
    for (i = 0; i < count; ++i) {
        found |= (uct_component_query(components[i], &attr) == UCS_OK) &&
                 !strcmp(attr.name, "span");
    }
    uct_release_component_list(components);
    return found;
}

static void *thread_main(void *arg)
{
    int id = (int)(long)arg;

    pthread_barrier_wait(&start);
    saw_span[id] = has_span();
    return NULL;
}

int main(void)
{
    pthread_t threads[THREADS];
    int i, saw = 0;

    pthread_barrier_init(&start, NULL, THREADS);
    for (i = 0; i < THREADS; ++i) {
        pthread_create(&threads[i], NULL, thread_main, (void*)(long)i);
    }
    for (i = 0; i < THREADS; ++i) {
        pthread_join(threads[i], NULL);
        saw += saw_span[i];
    }
    printf("%d of %d threads saw span at their first query; %d libraries "
           "opened inside dl_iterate_phdr%s\n", saw, THREADS, opened_inside,
           SPAN_TEST_INTERPOSE ? "" : " (not counted under TSan)");
    return ((saw == THREADS) && (opened_inside == 0)) ? 0 : 1;
}
