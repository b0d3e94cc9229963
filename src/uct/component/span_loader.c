/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libuct_span.so: the file UCX loads from UCX_MODULE_DIR. It links nothing
 * of UCX and references no UCX symbol; the component itself is
 * libspan_impl.so beside it, whose UCX symbols stay unresolved until it is
 * loaded.
 *
 * Why two files: UCX loads modules RTLD_LOCAL, and a module's undefined
 * symbols resolve only in the global scope. Where UCX itself was loaded into
 * a local scope (NIXL: Python loads libnixl, which dlopens its UCX backend,
 * which links NIXL's renamed libucp), a plugin without DT_NEEDED on UCX
 * cannot load, and one with DT_NEEDED on libuct.so.0 would pull in another
 * UCX. So this loader finds the libucs that is loading it (the caller of
 * ucs_module_global_init), makes the UCX libraries of that installation
 * global (RTLD_NOLOAD: nothing is opened that is not loaded already), checks
 * that the global scope now resolves UCX to them and not to another UCX in
 * the process, and only then loads the implementation and hands over.
 */
#include "span_loader.h"
#include "ucx/span_dl_loaded.h"

#include <uct/api/uct.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPAN_LOADER_IMPL "libspan_impl.so"

/* UCX 1.22 and 1.23: ucs_log_dispatch(), and ucs_global_opts whose first
 * field is the default log component */
typedef void (*span_loader_log_func_t)(const char *file, unsigned line,
                                       const char *function, int level,
                                       void *component, const char *format,
                                       ...);

typedef struct span_loader_ucx {
    char       dir[PATH_MAX];     /* libucs's directory, canonical */
    void       *libuct;           /* RTLD_NOLOAD handle, or NULL */
    span_loader_log_func_t log;
    void       *log_component;
} span_loader_ucx_t;

#define SPAN_LOADER_LOG_WARN 2

#define span_loader_warn(_ucx, _fmt, ...) \
    do { \
        if ((_ucx)->log != NULL) { \
            (_ucx)->log(__FILE__, __LINE__, __func__, SPAN_LOADER_LOG_WARN, \
                        (_ucx)->log_component, _fmt, ## __VA_ARGS__); \
        } else { \
            fprintf(stderr, _fmt "\n", ## __VA_ARGS__); \
        } \
    } while (0)

/* The canonical directory of a library as the dynamic loader named it:
 * one library may be named by a relative path (LD_LIBRARY_PATH=lib) and
 * the next by an absolute one (an RPATH of $ORIGIN) */
static int span_loader_dir_of(const char *path, char *dir)
{
    const char *slash = strrchr(path, '/');
    char name[PATH_MAX];

    if ((slash == NULL) ||
        (snprintf(name, sizeof(name), "%.*s", (int)(slash - path) + 1,
                  path) >= (int)sizeof(name))) {
        return 0;
    }
    return realpath(name, dir) != NULL;
}

static int span_loader_in_dir(const span_loader_ucx_t *ucx, const char *path,
                              const char *prefix)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];

    return (slash != NULL) &&
           (strncmp(slash + 1, prefix, strlen(prefix)) == 0) &&
           span_loader_dir_of(path, dir) && (strcmp(dir, ucx->dir) == 0);
}

/* Makes each UCX library of libucs's directory global; keeps libuct.
 * Opened after the iteration that lists them (span_dl_loaded.h) */
static void span_loader_promote(span_loader_ucx_t *ucx)
{
    char **names = span_dl_loaded(), **name;
    void *dl;

    if (names == NULL) {
        return;
    }
    for (name = names; *name != NULL; ++name) {
        if (!span_loader_in_dir(ucx, *name, "libuc")) {
            continue;
        }
        dl = dlopen(*name, RTLD_LAZY | RTLD_NOLOAD | RTLD_GLOBAL);
        if ((dl != NULL) && (ucx->libuct == NULL) &&
            span_loader_in_dir(ucx, *name, "libuct")) {
            ucx->libuct = dl; /* the handle keeps it global */
        }
    }
    free(names);
}

static int span_loader_find_ucx(span_loader_ucx_t *ucx, const void *caller)
{
    Dl_info info;
    void *libucs;

    if (!dladdr(caller, &info) || (info.dli_fname == NULL) ||
        !span_loader_dir_of(info.dli_fname, ucx->dir)) {
        return 0;
    }

    libucs = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (libucs != NULL) {
        ucx->log           = (span_loader_log_func_t)dlsym(libucs,
                                                           "ucs_log_dispatch");
        ucx->log_component = dlsym(libucs, "ucs_global_opts");
        if (ucx->log_component == NULL) {
            ucx->log = NULL;
        }
        dlclose(libucs);
    }
    return 1;
}

static void span_loader_impl_path(char *path, size_t max)
{
    Dl_info info;
    const char *slash;

    path[0] = '\0';
    if (dladdr((void*)span_loader_impl_path, &info) &&
        (info.dli_fname != NULL) &&
        ((slash = strrchr(info.dli_fname, '/')) != NULL)) {
        snprintf(path, max, "%.*s/%s", (int)(slash - info.dli_fname),
                 info.dli_fname, SPAN_LOADER_IMPL);
    }
}

typedef ucs_status_t (*span_loader_query_func_t)(uct_component_h **components_p,
                                                 unsigned *count_p);
typedef void (*span_loader_release_func_t)(uct_component_h *components);

/* A UCX's uct_query_components and uct_release_component_list */
typedef struct span_loader_uct {
    span_loader_query_func_t   query;
    span_loader_release_func_t release;
} span_loader_uct_t;

/* UCX 1.21 and older register their own components as their first query
 * loads their modules: a query first, so that span registers after them,
 * never beside them (the list is not locked). Not for 1.22 and later,
 * which load span itself as one of those modules: the thread loading them
 * would wait for span's lock while this one waited for it */
static void span_loader_settle(const span_loader_ucx_t *ucx,
                               const span_loader_uct_t *uct)
{
    uct_component_h *components;
    unsigned count;

    if ((uct == NULL) || (uct->release == NULL) ||
        (dlsym(ucx->libuct, SPAN_LOADER_MODULES_SYMBOL) != NULL) ||
        (uct->query(&components, &count) != UCS_OK)) {
        return;
    }
    uct->release(components);
}

/* Registers span with the UCX installation whose library holds addr */
static ucs_status_t span_loader_register_now(const void *addr,
                                             const span_loader_uct_t *uct)
{
    span_loader_ucx_t ucx = {};
    span_impl_init_func_t init;
    char path[PATH_MAX];
    void *impl;

    if (!span_loader_find_ucx(&ucx, addr)) {
        fprintf(stderr, "span loader: cannot tell which UCX loads "
                "libuct_span; it does not register\n");
        return UCS_ERR_UNSUPPORTED;
    }

    span_loader_promote(&ucx);
    if ((ucx.libuct == NULL) ||
        (dlsym(RTLD_DEFAULT, "uct_md_open") != dlsym(ucx.libuct,
                                                     "uct_md_open"))) {
        span_loader_warn(&ucx, "span loader: no libuct in %s, or another "
                         "UCX's libuct comes first in the process's global "
                         "scope; libuct_span does not register", ucx.dir);
        return UCS_ERR_UNSUPPORTED;
    }

    span_loader_settle(&ucx, uct);
    span_loader_impl_path(path, sizeof(path));
    impl = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    if (impl == NULL) {
        span_loader_warn(&ucx, "span loader: cannot load %s: %s; libuct_span "
                         "does not register", path, dlerror());
        return UCS_ERR_UNSUPPORTED;
    }

    init = (span_impl_init_func_t)dlsym(impl, SPAN_IMPL_INIT);
    if ((init == NULL) || (init() != UCS_OK)) {
        /* the implementation said why */
        dlclose(impl);
        return UCS_ERR_UNSUPPORTED;
    }
    /* registered: the implementation stays loaded for the process */
    return UCS_OK;
}

/* Serializes registering span, whichever way in comes first */
static pthread_mutex_t span_loader_lock = PTHREAD_MUTEX_INITIALIZER;
/* the thread that registers (its tid; 0: none): UCX's calls from the
 * implementation's init may come back here. Not a thread-local variable:
 * that would link the loader to ld.so's __tls_get_addr, which the wheel
 * does not allow */
static pid_t span_loader_registering;

/* A child forked while another thread registers would inherit the lock
 * held by a thread it does not have: fork waits for the registration */
static void span_loader_fork_prepare(void)
{
    pthread_mutex_lock(&span_loader_lock);
}

static void span_loader_fork_done(void)
{
    pthread_mutex_unlock(&span_loader_lock);
}

/* Registers span once per process, whichever way in comes first (uct: the
 * caller's query, where it has one). A thread that comes while another
 * registers waits for it and gets its result: it must see span. The
 * thread that registers may come again from inside (UCX's calls of the
 * implementation's init): it goes on, as registering is under way. */
static ucs_status_t span_loader_register(const void *addr,
                                         const span_loader_uct_t *uct)
{
    static int done;
    static ucs_status_t result;
    ucs_status_t status;

    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        return result;
    }
    if (__atomic_load_n(&span_loader_registering, __ATOMIC_RELAXED) ==
        (pid_t)syscall(SYS_gettid)) {
        return UCS_OK;
    }
    pthread_mutex_lock(&span_loader_lock);
    if (!__atomic_load_n(&done, __ATOMIC_RELAXED)) {
        __atomic_store_n(&span_loader_registering, (pid_t)syscall(SYS_gettid),
                         __ATOMIC_RELAXED);
        result = span_loader_register_now(addr, uct);
        __atomic_store_n(&span_loader_registering, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    }
    status = result;
    pthread_mutex_unlock(&span_loader_lock);
    return status;
}

/*
 * UCX 1.22 and later call this, by name, after loading the module from
 * UCX_MODULE_DIR, from its libucs: the return address tells which UCX is
 * loading span.
 */
__attribute__((visibility("protected"), noinline)) ucs_status_t
ucs_module_global_init(void)
{
    return span_loader_register(__builtin_return_address(0), NULL);
}

/* The query and release calls of the loaded libuct at path, in *uct;
 * whether it has the query */
static int span_loader_uct_in(const char *path, span_loader_uct_t *uct)
{
    void *dl = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);

    if (dl == NULL) {
        return 0;
    }
    uct->query   = (span_loader_query_func_t)dlsym(dl, "uct_query_components");
    uct->release = (span_loader_release_func_t)dlsym(
            dl, "uct_release_component_list");
    dlclose(dl);
    return uct->query != NULL;
}

/* The query and release calls of a libuct loaded from dir, where there
 * is one */
static int span_loader_find_uct(const char *dir, span_loader_uct_t *uct)
{
    char **names = span_dl_loaded(), **name;
    span_loader_ucx_t ucx;

    if (names == NULL) {
        return 0;
    }
    memcpy(ucx.dir, dir, sizeof(ucx.dir));
    for (name = names; (*name != NULL) && (uct->query == NULL); ++name) {
        if (span_loader_in_dir(&ucx, *name, "libuct")) {
            span_loader_uct_in(*name, uct);
        }
    }
    free(names);
    return uct->query != NULL;
}

/* uct_query_components of the UCX the caller belongs to (its libucp, or
 * a program's own call: the next definition after this one) */
static void span_loader_uct_of(const void *caller, span_loader_uct_t *uct)
{
    char dir[PATH_MAX];
    Dl_info info;

    *uct = (span_loader_uct_t){};
    if (dladdr(caller, &info) && (info.dli_fname != NULL) &&
        span_loader_dir_of(info.dli_fname, dir)) {
        span_loader_find_uct(dir, uct);
    }
    if ((uct->query == NULL) || (uct->query == uct_query_components)) {
        uct->query   = (span_loader_query_func_t)dlsym(RTLD_NEXT,
                                                       "uct_query_components");
        uct->release = (span_loader_release_func_t)dlsym(
                RTLD_NEXT, "uct_release_component_list");
    }
}

/*
 * UCX 1.21 and older load no module they were not built with: where
 * libuct_span.so is preloaded (LD_PRELOAD) or loaded global before UCX, this
 * definition comes first, and the first query of UCX's components, before
 * UCP or a program sees them, registers span with the caller's UCX. The
 * query itself is that UCX's.
 */
__attribute__((visibility("default"), noinline)) ucs_status_t
uct_query_components(uct_component_h **components_p, unsigned *count_p)
{
    span_loader_uct_t uct;

    span_loader_uct_of(__builtin_return_address(0), &uct);
    if (uct.query == NULL) {
        return UCS_ERR_NO_DEVICE; /* no UCX here, only span */
    }
    span_loader_register((const void*)uct.query, &uct);
    return uct.query(components_p, count_p);
}

/* uct_query_components of the UCX in the process's global scope, other
 * than this library's; NULL where there is none */
static void *span_loader_global_query(void)
{
    void *query = dlsym(RTLD_DEFAULT, "uct_query_components");

    return (query == (void*)uct_query_components) ? NULL : query;
}

/*
 * Loaded by a program after UCX (dlopen), a UCX older than 1.22 is
 * registered with now: its queries come from its own libuct. UCX 1.22 and
 * later load span as a module (ucs_module_global_init), and where this
 * definition is the global one, the first query registers.
 */
static void __attribute__((constructor)) span_loader_loaded(void)
{
    void *query = span_loader_global_query();
    Dl_info info;
    void *libuct;
    int modules;

    pthread_atfork(span_loader_fork_prepare, span_loader_fork_done,
                   span_loader_fork_done);

    if ((query == NULL) || !dladdr(query, &info) ||
        (info.dli_fname == NULL) ||
        ((libuct = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) == NULL)) {
        return;
    }
    modules = dlsym(libuct, SPAN_LOADER_MODULES_SYMBOL) != NULL;
    dlclose(libuct);
    if (!modules) {
        /* inside dlopen: no query of UCX's, which may load its modules */
        span_loader_register(query, NULL);
    }
}

/* A libuct as UCX installs it (libuct.so.0) or auditwheel renames it
 * (libuct-5f3c2a1b.so.0.0.0), not a module (libuct_cma.so) */
static int span_loader_is_libuct(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name  = (slash == NULL) ? path : slash + 1;

    return !strncmp(name, "libuct", 6) &&
           ((name[6] == '.') || (name[6] == '-'));
}

/* The query and release calls of the only libuct loaded, and how many
 * libucts are */
static unsigned span_loader_local(span_loader_uct_t *uct)
{
    char **names = span_dl_loaded(), **name;
    unsigned count = 0;

    if (names == NULL) {
        return 0;
    }
    for (name = names; *name != NULL; ++name) {
        count += span_loader_is_libuct(*name) &&
                 span_loader_uct_in(*name, uct);
    }
    free(names);
    return count;
}

/*
 * For a program that loaded UCX before span and wants span now, whatever
 * the release (ucx_span.enable() in Python): registers with the UCX of the
 * global scope, or with the only UCX loaded where it was loaded local
 * (libucx.load_library(): its UCP is bound to its own libuct, past this
 * library's uct_query_components). UCS_OK where span is registered (now or
 * before); UCS_ERR_NO_DEVICE where no UCX is loaded, or several are, none
 * global.
 */
__attribute__((visibility("default"))) ucs_status_t span_loader_enable(void)
{
    span_loader_uct_t uct = {};

    uct.query = (span_loader_query_func_t)span_loader_global_query();
    if (uct.query != NULL) {
        uct.release = (span_loader_release_func_t)dlsym(
                RTLD_DEFAULT, "uct_release_component_list");
    } else if (span_loader_local(&uct) != 1) {
        return UCS_ERR_NO_DEVICE;
    }
    return span_loader_register((const void*)uct.query, &uct);
}
