# SPDX-License-Identifier: BSD-3-Clause
"""ucx_span.enable() in a Python process that loads UCX through libucx's
own loader (local, as UCXX does), span first or UCX first: a UCP context
whose UCX_TLS names twins only then opens (it fails where span is not
registered). Usage: enable.py span-first|ucx-first; PYTHONPATH names
ucx_span (its lib/ holding the plugin) and the libucx package."""
import ctypes
import sys

import ucx_span

order = sys.argv[1]
if order == "span-first":
    ucx_span.enable(tls="cma+,self+")
import libucx  # noqa: E402

libs = libucx.load_library()
if order == "ucx-first":
    ucx_span.enable(tls="cma+,self+")
# libucx's list of the libraries it loaded: its order differs by release
ucp = next(lib for lib in libs if "libucp" in lib._name)


class Params(ctypes.Structure):
    _fields_ = [("field_mask", ctypes.c_uint64), ("features", ctypes.c_uint64)]


# UCP_PARAM_FIELD_FEATURES, UCP_FEATURE_RMA
params = Params(1 << 0, 1 << 3)
major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
ucp.ucp_get_version(ctypes.byref(major), ctypes.byref(minor),
                    ctypes.byref(release))
context = ctypes.c_void_p()
status = ucp.ucp_init_version(major.value, minor.value, ctypes.byref(params),
                              None, ctypes.byref(context))
print("UCX %d.%d.%d, %s: ucp_init over cma+,self+: %d"
      % (major.value, minor.value, release.value, order, status))
if status != 0:
    sys.exit(1)
ucp.ucp_cleanup(context)
