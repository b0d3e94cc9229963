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

/*
 * UCX calls this, by name, after loading the module, from its libucs: the
 * return address tells which UCX is loading span.
 */
__attribute__((visibility("protected"), noinline)) ucs_status_t
ucs_module_global_init(void)
{
    span_loader_ucx_t ucx = {};
    span_impl_init_func_t init;
    char path[PATH_MAX];
    void *impl;

    if (!span_loader_find_ucx(&ucx, __builtin_return_address(0))) {
        fprintf(stderr, "span loader: cannot tell which libucs loads "
                "libuct_span; it does not register\n");
        return UCS_ERR_UNSUPPORTED;
    }

    dl_iterate_phdr(span_loader_promote_cb, &ucx);
    if ((ucx.libuct == NULL) ||
        (dlsym(RTLD_DEFAULT, "uct_md_open") != dlsym(ucx.libuct,
                                                     "uct_md_open"))) {
        span_loader_warn(&ucx, "span loader: no libuct beside %s/libucs, or "
                         "another UCX's libuct comes first in the process's "
                         "global scope; libuct_span does not register",
                         ucx.dir);
        return UCS_ERR_UNSUPPORTED;
    }

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
