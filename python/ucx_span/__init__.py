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
import os
import re

__all__ = ["module_dir", "env", "enable", "loaded_ucx",
           "UCXAlreadyLoadedError"]

# libucs, libucp, libuct as UCX installs them (libucs.so.0) and as
# auditwheel renames them in the wheels that bundle UCX
# (nixl_cu13.libs/libucs-14c218c5.so.0.0.0)
_UCX_LIBRARY = re.compile(r"^libuc[spt](-[0-9a-f]+)?\.so(\.|$)")


class UCXAlreadyLoadedError(RuntimeError):
    """UCX was loaded before enable(): it has read its configuration."""


def module_dir():
    """The directory holding libuct_span.so* and libspan_impl.so."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")


def loaded_ucx(maps="/proc/self/maps"):
    """Paths of the UCX libraries mapped into this process, sorted."""
    found = set()
    with open(maps) as f:
        for line in f:
            fields = line.split(None, 5)
            if (len(fields) == 6) and _UCX_LIBRARY.match(
                    os.path.basename(fields[5].rstrip("\n"))):
                found.add(fields[5].rstrip("\n"))
    return sorted(found)


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


def enable(tls=None):
    """Sets the variables of env(tls) in os.environ, for the UCX this
    process will load, and returns them. Raises UCXAlreadyLoadedError when
    UCX is loaded already (it would not see them)."""
    loaded = loaded_ucx()
    if loaded:
        raise UCXAlreadyLoadedError(
            "UCX is already loaded in this process (%s): it read its "
            "configuration then and would not see UCX_MODULE_DIR or UCX_TLS "
            "set now. Call ucx_span.enable() before anything that loads UCX "
            "(creating a NIXL agent, importing ucxx), or set the variables "
            "before Python starts: eval \"$(python -m ucx_span env)\""
            % ", ".join(loaded))
    variables = env(tls)
    os.environ.update(variables)
    return variables
