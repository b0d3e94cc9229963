# SPDX-License-Identifier: BSD-3-Clause
"""span, a UCX transport plugin, for the UCX a Python process runs.

span adds twin transports to UCX (``cma+``, ``cuda_ipc+``, ``rc_verbs+``,
...) that check every remote access against the registered extent. UCX
1.22 and 1.23 (``libucx-cu13``, NIXL's ``nixl-cu13``) load it from a
directory named in the environment; the variables must be set before UCX is
loaded into the process, because libucs reads them once, when it is loaded.

    import ucx_span
    ucx_span.enable(tls="cma+,tcp")   # before anything loads UCX
    import nixl_cu13                  # or ucxx, ...

or, for a shell: ``eval "$(python -m ucx_span env)"``.
"""
import ctypes
import os
import re
import warnings

__all__ = ["module_dir", "env", "enable", "loaded_ucx",
           "UCXAlreadyLoadedError"]

# libucs, libucp, libuct as UCX installs them (libucs.so.0) and as
# auditwheel renames them in the wheels that bundle UCX
# (nixl_cu13.libs/libucs-14c218c5.so.0.0.0)
_UCX_LIBRARY = re.compile(r"^libuc[spt](-[0-9a-f]+)?\.so(\.|$)")


# UCX's modules (libuct_cma.so, libucm_cuda-HASH.so), which UCX loads at
# the first query of its components; span's own is not one of them
_UCX_MODULE = re.compile(r"^libuc[tm]_(?!span)[a-z0-9]+(-[0-9a-f]+)?\.so(\.|$)")


class UCXAlreadyLoadedError(RuntimeError):
    """UCX was loaded before enable(): it has read its configuration."""


def module_dir():
    """The directory holding libuct_span.so* and libspan_impl.so."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")


def _mapped(pattern, maps):
    found = set()
    with open(maps) as f:
        for line in f:
            fields = line.split(None, 5)
            if (len(fields) == 6) and pattern.match(
                    os.path.basename(fields[5].rstrip("\n"))):
                found.add(fields[5].rstrip("\n"))
    return sorted(found)


def loaded_ucx(maps="/proc/self/maps"):
    """Paths of the UCX libraries mapped into this process, sorted."""
    return _mapped(_UCX_LIBRARY, maps)


def _same_dir(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def env(tls=None, environ=None):
    """The variables that make UCX load span, merged with ``environ``
    (default: os.environ), as a dict.

    UCX_MODULE_DIR names one directory (UCX opens it as one path), so where
    it names another one already it is kept and span's directory goes first
    in UCX_PLUGIN_PATH, UCX's colon-separated list of extra module
    directories (searched before UCX_MODULE_DIR). ``tls``: UCX_TLS, a
    string or a list of transport names, e.g. "cuda_ipc+,cuda_copy,tcp".
    """
    environ = os.environ if environ is None else environ
    mdir = module_dir()
    out = {}
    current = environ.get("UCX_MODULE_DIR", "")
    if (current == "") or _same_dir(current, mdir):
        out["UCX_MODULE_DIR"] = mdir
    else:
        paths = [p for p in environ.get("UCX_PLUGIN_PATH", "").split(":")
                 if p and not _same_dir(p, mdir)]
        out["UCX_PLUGIN_PATH"] = ":".join([mdir] + paths)
    if tls is not None:
        if not isinstance(tls, str):
            tls = ",".join(tls)
        if not tls:
            raise ValueError("tls: empty transport list")
        out["UCX_TLS"] = tls
    return out


def _load_span():
    """libuct_span.so, loaded global: UCX 1.21 and older load no module by
    name, and a UCX loaded after it finds its uct_query_components first,
    whose first call registers span with that UCX."""
    lib = ctypes.CDLL(os.path.join(module_dir(), "libuct_span.so.0"),
                      mode=ctypes.RTLD_GLOBAL)
    lib.span_loader_enable.restype = ctypes.c_int
    return lib


def enable(tls=None):
    """Makes the UCX of this process load span, whichever comes first,
    span or UCX, in every release span supports: sets the variables of
    env(tls) in os.environ and loads span's library global, whose
    uct_query_components comes before UCX's: the first query of UCX's
    components (the first UCP context) registers span with the caller's
    UCX, which is how UCX 1.21 and older, which load no module by name,
    get it; 1.22 and later also load it from UCX_MODULE_DIR. Where UCX is
    loaded already (libucx.load_library(), NIXL), span registers with it
    now, for the UCP contexts made from now on (a warning says so where
    one may exist). UCX_TLS applies to the contexts made after. Returns the
    variables. Raises UCXAlreadyLoadedError where span cannot register with
    the UCX loaded (several, none global)."""
    loaded = loaded_ucx()
    variables = env(tls)
    os.environ.update(variables)
    lib = _load_span()
    if not loaded:
        return variables
    if lib.span_loader_enable() != 0:
        raise UCXAlreadyLoadedError(
            "UCX is already loaded in this process (%s), and span cannot "
            "register with it (several UCX installations, none of them "
            "global, or span refused it: see the warning above). Call "
            "ucx_span.enable() before anything that loads UCX, or set the "
            "variables before Python starts: eval \"$(python -m ucx_span "
            "env)\"" % ", ".join(loaded))
    queried = _mapped(_UCX_MODULE, "/proc/self/maps")
    if queried:
        warnings.warn(
            "ucx_span.enable(): UCX had queried its components already (its "
            "modules are loaded: %s): UCP contexts made before do not see "
            "span; those made from now on do" % ", ".join(queried))
    return variables
