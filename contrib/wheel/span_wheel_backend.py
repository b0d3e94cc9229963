# SPDX-License-Identifier: BSD-3-Clause
"""PEP 517 build backend of the ucx-span wheel (pyproject.toml names it).

`pip wheel .` (or `python -m build`) runs the project's autotools build of
the plugin in a copy of the sources in a temporary directory (the checkout
is not touched, and may be configured itself), and packs the plugin with
the Python package `ucx_span` (python/ucx_span):

    ucx_span/lib/libuct_span.so{,.0,.0.0.0}   what UCX loads: its libucs's
                                             name decides the suffix
    ucx_span/lib/libspan_impl.so             the component, loaded by it

The plugin links no UCX; building it needs the UCX 1.22 headers, from the
libucx-cu13 wheel, cuda.h for the CUDA resolver, from nvidia-cuda-runtime,
and nvcc for the copy kernel of CUDA batches, from nvidia-cuda-nvcc (with
the nvidia-nvvm and nvidia-cuda-crt it runs with), all asked for as build
requirements, so the frontend installs them into its build environment:
the wheel batches as a build from source with the CUDA toolkit does, with
no CUDA toolkit of the machine. SPAN_UCX_PREFIX and SPAN_CUDA_PREFIX (or
`no`) name installations to use instead (configure then takes the nvcc of
that CUDA, if it has one); SPAN_NVCC names another nvcc, or `no`: a wheel
without the copy kernel. Building needs gcc, make, autoconf, automake and
libtool (Debian packages).

The wheel is tagged py3-none-manylinux_2_28_x86_64, as NIXL's nixl-cu13:
it holds no Python extension, and the libraries are bound to the symbols
glibc 2.28 has, where it has them (contrib/wheel/glibc_2_28.h,
MOVED_TO_LIBC); the build fails when a library needs a newer glibc or links
anything but libc, libdl and libpthread.
"""
import base64
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

NAME = "ucx-span"
DIST = "ucx_span"
TAG = "py3-none-manylinux_2_28_x86_64"
GLIBC_MAX = (2, 28)
NEEDED_ALLOWED = {"libc.so.6", "libdl.so.2", "libpthread.so.0"}
# Functions of libdl.so.2 and libpthread.so.0 (GLIBC_2.2.5) that glibc 2.34
# moved into libc.so.6 (GLIBC_2.34, the old version kept as an alias). A
# reference must name the old library and version: glibc 2.28 looks for
# the symbol in the library its version needs, and fails when that library
# lacks it, so one bound to libc.so.6's GLIBC_2.2.5 alias resolves only
# where libdl happens to be searched before libc. The link sees stand-ins
# of these libraries that define the functions there (_link_stand_ins).
MOVED_TO_LIBC = {
    "libdl.so.2": ("dladdr", "dlclose", "dlerror", "dlopen", "dlsym"),
    "libpthread.so.0": ("pthread_create", "pthread_detach",
                        "pthread_getspecific", "pthread_join",
                        "pthread_key_create", "pthread_key_delete",
                        "pthread_mutex_trylock", "pthread_mutexattr_destroy",
                        "pthread_mutexattr_init", "pthread_mutexattr_settype",
                        "pthread_once", "pthread_rwlock_destroy",
                        "pthread_rwlock_init", "pthread_rwlock_rdlock",
                        "pthread_rwlock_unlock", "pthread_rwlock_wrlock",
                        "pthread_setspecific", "pthread_spin_destroy",
                        "pthread_spin_init", "pthread_spin_lock",
                        "pthread_spin_unlock"),
}
UCX_REQUIREMENT = "libucx-cu13==1.22.0"
CUDA_REQUIREMENT = "nvidia-cuda-runtime==13.0.96"
# nvcc of the same CUDA (13.0 update 2); it asks for nvvm (cicc) and crt
# (its headers) unpinned, so they are pinned here too
NVCC_REQUIREMENTS = ("nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88",
                     "nvidia-cuda-crt==13.0.88")
# what the wheel holds of $(libdir)/ucx after make install, as files
LIBS = ("libuct_span.so", "libuct_span.so.0", "libuct_span.so.0.0.0",
        "libspan_impl.so")
# the sources the plugin's build reads (an sdist holds these too)
SOURCE_FILES = ("configure.ac", "Makefile.am", "autogen.sh", "README.md",
                "pyproject.toml", "test/CTestTestfile.cmake.in")
SOURCE_TREES = (("src", (".c", ".h", ".cu")), ("python/ucx_span", (".py",)),
                ("contrib/wheel", (".py", ".h")))
# zip and tar entries get one fixed date: the same sources, the same archive
EPOCH = (1980, 1, 1, 0, 0, 0)
SUMMARY = ("span, a UCX transport plugin: twin transports (cma+, cuda_ipc+, "
           "rc_verbs+, ...) that check every remote access against the "
           "registered extent")
DESCRIPTION = """\
The span plugin for UCX 1.22 and 1.23 (libucx-cu13, NIXL's nixl-cu13),
with a small Python package that tells where it is and sets a process up:

    pip install ucx_span-*.whl
    eval "$(python -m ucx_span env)"          # UCX_MODULE_DIR for a shell
    python -c 'import ucx_span; ucx_span.enable(tls="cma+,tcp")'  # in Python

See README.md of the project for the twins and their options.
"""


# --------------------------------------------------------------------------
# Where the build's inputs are
# --------------------------------------------------------------------------

def _version(root):
    with open(os.path.join(root, "configure.ac")) as f:
        m = re.search(r"AC_INIT\(\[ucx-span\],\s*\[([^\]]+)\]", f.read())
    if m is None:
        raise RuntimeError("configure.ac: no AC_INIT([ucx-span], [VERSION])")
    return m.group(1)


def _prefix_from_env(name):
    value = os.environ.get(name, "")
    return value if value else None


def _site_dir_with(relative):
    """The directory of sys.path that holds `relative` (in the build
    environment: where the frontend installed a build requirement)."""
    for entry in sys.path:
        if entry and os.path.exists(os.path.join(entry, relative)):
            return entry
    return None


def _ucx_prefix():
    prefix = _prefix_from_env("SPAN_UCX_PREFIX")
    if prefix is None:
        site = _site_dir_with("libucx/include/uct/api/uct.h")
        if site is None:
            raise RuntimeError(
                "no UCX headers: install %s into the build environment or "
                "set SPAN_UCX_PREFIX" % UCX_REQUIREMENT)
        prefix = os.path.join(site, "libucx")
    return prefix


def _cuda_configure_args():
    """configure's arguments for CUDA: --with-cuda and NVCC (the nvcc of
    the build environment's nvidia-cuda-nvcc, named even where the machine
    has a CUDA toolkit of its own, so that the wheel is built alike
    everywhere)."""
    prefix = _prefix_from_env("SPAN_CUDA_PREFIX")
    nvcc = _prefix_from_env("SPAN_NVCC")
    if prefix == "no":
        return ["--without-cuda"]
    if prefix is None:
        site = _site_dir_with("nvidia/cu13/include/cuda.h")
        if site is None:
            raise RuntimeError(
                "no cuda.h: install %s into the build environment, or set "
                "SPAN_CUDA_PREFIX (no: without the CUDA resolver)"
                % CUDA_REQUIREMENT)
        prefix = os.path.join(site, "nvidia", "cu13")
        if nvcc is None:
            site = _site_dir_with("nvidia/cu13/bin/nvcc")
            if site is None:
                raise RuntimeError(
                    "no nvcc: install %s into the build environment, or "
                    "set SPAN_NVCC (no: without the copy kernel)"
                    % " ".join(NVCC_REQUIREMENTS))
            nvcc = os.path.join(site, "nvidia", "cu13", "bin", "nvcc")
    args = ["--with-cuda=" + prefix]
    if nvcc is not None:
        args.append("NVCC=" + nvcc)
    return args


def _source_paths(root):
    paths = list(SOURCE_FILES)
    for tree, suffixes in SOURCE_TREES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, tree)):
            # build outputs of a configured checkout (.libs, .deps) stay out
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(suffixes):
                    paths.append(os.path.relpath(
                        os.path.join(dirpath, name), root))
    return paths


# --------------------------------------------------------------------------
# The build
# --------------------------------------------------------------------------

def _run(cmd, cwd, env=None):
    print("ucx-span wheel: %s" % " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True,
                   stdout=sys.stderr.fileno())


def _link_stand_ins(tmp):
    """Stand-ins of libdl.so.2 and libpthread.so.0 that define the functions
    of MOVED_TO_LIBC under GLIBC_2.2.5, as glibc 2.28's do: linked before
    libc, they are where the libraries' references bind (the program runs
    with the real ones; after glibc 2.34 those define only the versions,
    and libc.so.6 the functions)."""
    out = os.path.join(tmp, "link")
    os.makedirs(out)
    paths = []
    for soname, funcs in sorted(MOVED_TO_LIBC.items()):
        base = os.path.join(out, soname)
        with open(base + ".c", "w") as f:
            f.writelines("void %s(void) {}\n" % fn for fn in funcs)
        with open(base + ".map", "w") as f:
            f.write("GLIBC_2.2.5 { global: %s; local: *; };\n" %
                    "; ".join(funcs))
        _run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-nostdlib",
              "-Wl,-soname," + soname, "-Wl,--version-script=" + base + ".map",
              "-o", base, base + ".c"], out)
        paths.append(base)
    return paths


def _build_plugin(root, tmp):
    """autogen, configure and make of the plugin alone in a copy of the
    sources; returns the directory of the built libraries."""
    src = os.path.join(tmp, "src")
    for rel in _source_paths(root):
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        shutil.copy2(os.path.join(root, rel), os.path.join(src, rel))
    compat = os.path.join(src, "contrib", "wheel", "glibc_2_28.h")
    stand_ins = _link_stand_ins(tmp)
    # make's jobserver of a calling make (make check) is not ours
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    _run(["sh", "autogen.sh"], src, env)
    _run(["./configure", "--with-ucx=" + _ucx_prefix()] +
         _cuda_configure_args() +
         ["--with-nixl-ucx=no", "--disable-static",
          "CFLAGS=-O2 -include " + compat,
          # before libc on the link line: their symbols bind to them
          "LDFLAGS=-Wl,--no-as-needed," + ",".join(stand_ins)], src, env)
    _run(["make", "-j%d" % (os.cpu_count() or 1), "src/uct/libuct_span.la",
          "src/uct/libspan_impl.la"], src, env)
    return os.path.join(src, "src", "uct", ".libs")


def _undefined_symbols(path):
    """[(symbol, version, library the version is needed from)] of a
    library's versioned undefined symbols."""
    text = subprocess.run(["readelf", "-V", "-W", path], check=True,
                          capture_output=True, text=True).stdout
    versions, lib = {}, None
    for line in text[text.find(".gnu.version_r"):].splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            lib = m.group(1)
        m = re.search(r"Name: (\S+)\s+Flags: \S+\s+Version: (\d+)", line)
        if m:
            versions[m.group(2)] = (m.group(1), lib)
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", path], check=True,
                          capture_output=True, text=True).stdout
    found = [(m.group(1),) + versions[m.group(2)]
             for m in re.finditer(r" UND (\S+?)@\S+ \((\d+)\)$", syms, re.M)
             if m.group(2) in versions]
    if not found:
        raise RuntimeError("%s: no symbol versions read (readelf older than "
                           "binutils 2.35?)" % path)
    return found


def _check_library(path):
    """Refuses a library that needs a glibc newer than GLIBC_MAX, a moved
    function from libc.so.6, or links anything but NEEDED_ALLOWED (span
    links no UCX)."""
    dyn = subprocess.run(["readelf", "-d", "-W", path], check=True,
                         capture_output=True, text=True).stdout
    needed = set(re.findall(r"\(NEEDED\).*\[(.*)\]", dyn))
    if needed - NEEDED_ALLOWED or re.search(r"\((RPATH|RUNPATH)\)", dyn):
        raise RuntimeError("%s links %s (or has a run path): the wheel may "
                           "hold only libraries that link %s" % (
                               path, sorted(needed),
                               sorted(NEEDED_ALLOWED)))
    wrong = []
    for sym, version, lib in _undefined_symbols(path):
        glibc = re.match(r"GLIBC_(\d+)\.(\d+)", version)
        too_new = glibc and ((int(glibc.group(1)), int(glibc.group(2))) >
                             GLIBC_MAX)
        moved = any((sym in funcs) and (lib != home)
                    for home, funcs in MOVED_TO_LIBC.items())
        if too_new or moved:
            wrong.append("%s@%s from %s" % (sym, version, lib))
    if wrong:
        raise RuntimeError(
            "%s would not run on glibc %d.%d: %s (bind fstat-like functions "
            "in contrib/wheel/glibc_2_28.h, functions that moved into libc "
            "in MOVED_TO_LIBC of contrib/wheel/span_wheel_backend.py)" % (
                path, GLIBC_MAX[0], GLIBC_MAX[1], ", ".join(sorted(wrong))))


# --------------------------------------------------------------------------
# The archives
# --------------------------------------------------------------------------

def _metadata(version):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "Requires-Python: >=3.8\nDescription-Content-Type: text/plain\n"
            "\n%s" % (NAME, version, SUMMARY, DESCRIPTION))


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: ucx-span "
            "(contrib/wheel/span_wheel_backend.py)\nRoot-Is-Purelib: false\n"
            "Tag: %s\n" % TAG)


def _dist_info(version):
    return "%s-%s.dist-info" % (DIST, version)


def _write_wheel(wheel_directory, version, root, libdir):
    entries = []  # (archive name, bytes, mode)
    pkg = os.path.join(root, "python", DIST)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                entries.append(("%s/%s" % (DIST, name), f.read(), 0o644))
    for name in LIBS:
        with open(os.path.join(libdir, name), "rb") as f:  # links followed
            entries.append(("%s/lib/%s" % (DIST, name), f.read(), 0o755))
    info = _dist_info(version)
    entries.append((info + "/METADATA", _metadata(version).encode(), 0o644))
    entries.append((info + "/WHEEL", _wheel_file().encode(), 0o644))
    entries.append((info + "/top_level.txt", (DIST + "\n").encode(), 0o644))

    record = io.StringIO()
    for name, data, _ in entries:
        digest = base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write("%s,sha256=%s,%d\n" % (name, digest, len(data)))
    record.write("%s/RECORD,,\n" % info)
    entries.append((info + "/RECORD", record.getvalue().encode(), 0o644))

    wheel_name = "%s-%s-%s.whl" % (DIST, version, TAG)
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            zi = zipfile.ZipInfo(name, EPOCH)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(path + ".tmp", path)
    return wheel_name


# --------------------------------------------------------------------------
# PEP 517 hooks
# --------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    reqs = []
    if _prefix_from_env("SPAN_UCX_PREFIX") is None:
        reqs.append(UCX_REQUIREMENT)
    if _prefix_from_env("SPAN_CUDA_PREFIX") is None:
        reqs.append(CUDA_REQUIREMENT)
        if _prefix_from_env("SPAN_NVCC") is None:
            reqs.extend(NVCC_REQUIREMENTS)
    return reqs


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = _dist_info(_version(os.getcwd()))
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, text in (("METADATA", _metadata(_version(os.getcwd()))),
                       ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, info, name), "w") as f:
            f.write(text)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        raise RuntimeError("the ucx-span wheel is built for Linux on x86_64 "
                           "(%s %s here)" % (sys.platform, platform.machine()))
    root = os.getcwd()
    version = _version(root)
    with tempfile.TemporaryDirectory(prefix="ucx-span-wheel-") as tmp:
        libdir = _build_plugin(root, tmp)
        for name in LIBS:
            _check_library(os.path.join(libdir, name))
        return _write_wheel(wheel_directory, version, root, libdir)


def build_sdist(sdist_directory, config_settings=None):
    root = os.getcwd()
    version = _version(root)
    base = "%s-%s" % (DIST, version)
    path = os.path.join(sdist_directory, base + ".tar.gz")

    def add(tar, name, data, mode=0o644):
        ti = tarfile.TarInfo("%s/%s" % (base, name))
        ti.size, ti.mode, ti.mtime = len(data), mode, 315532800
        tar.addfile(ti, io.BytesIO(data))

    with tarfile.open(path + ".tmp", "w:gz", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "PKG-INFO", _metadata(version).encode())
        for rel in _source_paths(root):
            with open(os.path.join(root, rel), "rb") as f:
                mode = 0o755 if os.access(os.path.join(root, rel), os.X_OK) \
                    else 0o644
                add(tar, rel, f.read(), mode)
    os.replace(path + ".tmp", path)
    return base + ".tar.gz"
