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

#include <uct/api/uct.h>

#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Makes each UCX library of libucs's directory global; keeps libuct */
static int span_loader_promote_cb(struct dl_phdr_info *info, size_t size,
                                  void *arg)
{
    span_loader_ucx_t *ucx = arg;
    void *dl;

    if ((info->dlpi_name == NULL) ||
        !span_loader_in_dir(ucx, info->dlpi_name, "libuc")) {
        return 0;
    }

    dl = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_GLOBAL);
    if ((dl != NULL) && (ucx->libuct == NULL) &&
        span_loader_in_dir(ucx, info->dlpi_name, "libuct")) {
        ucx->libuct = dl; /* the handle keeps it global */
    }
    return 0;
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

/* Registers span with the UCX installation whose library holds addr, once
 * per process, whichever way in comes first */
static ucs_status_t span_loader_register(const void *addr)
{
    static int state; /* 0: not tried, 1: being tried, 2: tried */
    static ucs_status_t result;
    span_loader_ucx_t ucx = {};
    span_impl_init_func_t init;
    ucs_status_t status;
    char path[PATH_MAX];
    int expected = 0;
    void *impl;

    if (!__atomic_compare_exchange_n(&state, &expected, 1, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        /* another way in was taken: its result, or OK while it is taken */
        return (expected == 2) ? result : UCS_OK;
    }

    status = UCS_ERR_UNSUPPORTED;
    if (!span_loader_find_ucx(&ucx, addr)) {
        fprintf(stderr, "span loader: cannot tell which UCX loads "
                "libuct_span; it does not register\n");
        goto out;
    }

    dl_iterate_phdr(span_loader_promote_cb, &ucx);
    if ((ucx.libuct == NULL) ||
        (dlsym(RTLD_DEFAULT, "uct_md_open") != dlsym(ucx.libuct,
                                                     "uct_md_open"))) {
        span_loader_warn(&ucx, "span loader: no libuct in %s, or another "
                         "UCX's libuct comes first in the process's global "
                         "scope; libuct_span does not register", ucx.dir);
        goto out;
    }

    span_loader_impl_path(path, sizeof(path));
    impl = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    if (impl == NULL) {
        span_loader_warn(&ucx, "span loader: cannot load %s: %s; libuct_span "
                         "does not register", path, dlerror());
        goto out;
    }

    init = (span_impl_init_func_t)dlsym(impl, SPAN_IMPL_INIT);
    if ((init == NULL) || (init() != UCS_OK)) {
        /* the implementation said why */
        dlclose(impl);
        goto out;
    }
    /* registered: the implementation stays loaded for the process */
    status = UCS_OK;
out:
    result = status;
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
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
    return span_loader_register(__builtin_return_address(0));
}

typedef ucs_status_t (*span_loader_query_func_t)(uct_component_h **components_p,
                                                 unsigned *count_p);

/* A libuct loaded from the directory of find->dir: its query function */
typedef struct {
    char                     dir[PATH_MAX];
    span_loader_query_func_t query;
} span_loader_find_uct_t;

static int span_loader_find_uct_cb(struct dl_phdr_info *info, size_t size,
                                   void *arg)
{
    span_loader_find_uct_t *find = arg;
    span_loader_ucx_t ucx;
    void *dl;

    memcpy(ucx.dir, find->dir, sizeof(ucx.dir));
    if ((info->dlpi_name == NULL) ||
        !span_loader_in_dir(&ucx, info->dlpi_name, "libuct") ||
        ((dl = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD)) == NULL)) {
        return 0;
    }
    find->query = (span_loader_query_func_t)dlsym(dl, "uct_query_components");
    dlclose(dl);
    return find->query != NULL;
}

/* uct_query_components of the UCX the caller belongs to (its libucp, or
 * a program's own call: the next definition after this one) */
static span_loader_query_func_t span_loader_query_of(const void *caller)
{
    span_loader_find_uct_t find = {};
    Dl_info info;

    if (dladdr(caller, &info) && (info.dli_fname != NULL) &&
        span_loader_dir_of(info.dli_fname, find.dir)) {
        dl_iterate_phdr(span_loader_find_uct_cb, &find);
    }
    if ((find.query == NULL) || (find.query == uct_query_components)) {
        find.query = (span_loader_query_func_t)dlsym(RTLD_NEXT,
                                                     "uct_query_components");
    }
    return find.query;
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
    span_loader_query_func_t query =
            span_loader_query_of(__builtin_return_address(0));

    if (query == NULL) {
        return UCS_ERR_NO_DEVICE; /* no UCX here, only span */
    }
    span_loader_register((const void*)query);
    return query(components_p, count_p);
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

    if ((query == NULL) || !dladdr(query, &info) ||
        (info.dli_fname == NULL) ||
        ((libuct = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) == NULL)) {
        return;
    }
    modules = dlsym(libuct, SPAN_LOADER_MODULES_SYMBOL) != NULL;
    dlclose(libuct);
    if (!modules) {
        span_loader_register(query);
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

typedef struct {
    void     *query;  /* uct_query_components of the one found */
    unsigned count;   /* libucts loaded */
} span_loader_local_t;

static int span_loader_local_cb(struct dl_phdr_info *info, size_t size,
                                void *arg)
{
    span_loader_local_t *local = arg;
    void *dl;

    if ((info->dlpi_name == NULL) || !span_loader_is_libuct(info->dlpi_name) ||
        ((dl = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD)) == NULL)) {
        return 0;
    }
    local->query = dlsym(dl, "uct_query_components");
    local->count += (local->query != NULL);
    dlclose(dl);
    return 0;
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
    span_loader_local_t local = {};
    void *query               = span_loader_global_query();

    if (query == NULL) {
        dl_iterate_phdr(span_loader_local_cb, &local);
        if (local.count != 1) {
            return UCS_ERR_NO_DEVICE;
        }
        query = local.query;
    }
    return span_loader_register(query);
}
