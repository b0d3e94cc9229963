#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""NIXL over span's twins, the smallest complete example: two processes,
one WRITE and one READ, every byte checked.

The target registers a buffer and hands its NIXL metadata and the buffer's
address to the initiator over a plain TCP socket; the initiator WRITEs its
own buffer into the target's, the target checks it when NIXL's
notification arrives, then the initiator READs the target's buffer back
into a second buffer and checks that.

  python3 nixl_example.py            both roles: the target is started
                                     as a second process on this machine
  python3 nixl_example.py --serve HOST:PORT     the target, on one node
  python3 nixl_example.py --connect HOST:PORT   the initiator, on another
  options: --gpu (a PyTorch tensor on the GPU instead of a numpy buffer),
           --mib N (buffer size, default 16), --tls UCX_TLS

Needs: pip install nixl-cu13 numpy, and the ucx-span wheel (docs/nixl.md,
"Install with pip"); --gpu: torch. Exits 0 when every byte arrived as written.
"""
import argparse
import os
import pickle
import socket
import struct
import subprocess
import sys
import time


def log(role, text):
    print("[%s] %s" % (role, text), flush=True)


# A length-prefixed pickle over TCP: how the two processes swap NIXL's
# metadata and the buffer's address (any channel does: NIXL only needs the
# bytes of get_agent_metadata() on the other side)
def send(sock, obj):
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def recv(sock):
    def exact(n):
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise EOFError("the other process closed the connection")
            out += chunk
        return out
    return pickle.loads(exact(struct.unpack("!Q", exact(8))[0]))


class Buffers:
    """numpy buffers in host memory ("DRAM"), or torch tensors ("VRAM")."""

    def __init__(self, gpu):
        self.gpu = gpu
        if gpu:
            import torch
            self.torch = torch
            self.mem_type = "VRAM"
        else:
            import numpy
            self.np = numpy
            self.mem_type = "DRAM"

    def pattern(self, size, seed):
        if self.gpu:
            t = self.torch
            i = t.arange(size, dtype=t.int64, device="cuda")
            return ((i * 2654435761 + seed) >> 13).bitwise_and(0xff).to(
                t.uint8)
        i = self.np.arange(size, dtype=self.np.uint64)
        return ((i * 2654435761 + seed) >> 13).astype(self.np.uint8)

    def zeros(self, size):
        if self.gpu:
            return self.torch.zeros(size, dtype=self.torch.uint8,
                                    device="cuda")
        return self.np.zeros(size, dtype=self.np.uint8)

    def addr(self, buf):
        return buf.data_ptr() if self.gpu else buf.ctypes.data

    def device(self, buf):
        # the device id of a descriptor: the GPU's index, 0 for host memory
        return buf.get_device() if self.gpu else 0

    def wrong_bytes(self, got, want):
        if self.gpu:
            self.torch.cuda.synchronize()
            return int((got != want).sum().item())
        return int((got != want).sum())

    def register(self, agent, buf):
        # The call users get wrong: register_memory(numpy_array) takes a
        # 1-D array for a table of descriptors and fails. A host buffer is
        # registered as a list of (address, length, device id, meta info)
        # with the memory type named; a torch tensor may be given as it is.
        if self.gpu:
            return agent.register_memory(buf)
        return agent.register_memory(
            [(self.addr(buf), buf.nbytes, 0, "")], "DRAM")

    def xfer_descs(self, agent, addr, length, device):
        # transfer descriptors: (address, length, device id), no meta info
        return agent.get_xfer_descs([(addr, length, device)], self.mem_type)


def make_agent(name, tls):
    # UCX reads its variables once, when NIXL's UCX backend loads it: set
    # them first. ucx_span.enable() sets UCX_MODULE_DIR (where span is) and
    # UCX_TLS; without the wheel, export UCX_MODULE_DIR yourself.
    try:
        import ucx_span
        ucx_span.enable(tls=tls)
    except ImportError:
        os.environ["UCX_TLS"] = tls
        if "UCX_MODULE_DIR" not in os.environ:
            sys.exit("nixl_example: ucx_span does not import (pip install "
                     "the ucx-span wheel) and UCX_MODULE_DIR is not set")
    # NIXL 1.5.1's UCX ends the process with SIGSEGV at exit once its efa
    # module has loaded the system's libefa (Debian's ibverbs-providers),
    # with or without span (docs/limitations.md, "Known limits of other projects"):
    # leave efa out unless you use AWS EFA
    os.environ.setdefault("UCX_MODULES", "^efa")
    try:
        import nixl_cu13 as nixl
    except ImportError:
        import nixl
    agent = nixl.nixl_agent(name, nixl.nixl_agent_config(backends=["UCX"]))
    # UCX skips a transport in UCX_TLS that it does not have (a twin
    # without span loaded) and carries on over the rest: say whether span
    # is in this process
    with open("/proc/self/maps") as maps:
        span = [line.split()[-1] for line in maps
                if line.rstrip().endswith("/libspan_impl.so")]
    log(name, "UCX_TLS=%s, span %s" % (
        os.environ["UCX_TLS"], "loaded from " + os.path.dirname(span[0])
        if span else "NOT loaded: the twins in UCX_TLS are not there"))
    return agent


def wait_done(agent, handle, state, role, what):
    deadline = time.monotonic() + 60
    while state == "PROC" and time.monotonic() < deadline:
        state = agent.check_xfer_state(handle)
    if state != "DONE":
        raise RuntimeError("%s ended %s" % (what, state))
    log(role, "%s: %s" % (what, state))


def target(sock, args):
    role = "target"
    bufs = Buffers(args.gpu)
    size = args.mib << 20
    buf = bufs.zeros(size)
    agent = make_agent("target", args.tls)
    reg = bufs.register(agent, buf)
    log(role, "registered %d MiB of %s at 0x%x" %
        (args.mib, bufs.mem_type, bufs.addr(buf)))
    send(sock, {"meta": agent.get_agent_metadata(), "addr": bufs.addr(buf),
                "size": size, "device": bufs.device(buf), "gpu": args.gpu})

    # 1. the initiator WRITEs; its notification says the bytes are here
    while not agent.check_remote_xfer_done("initiator", b"write done"):
        time.sleep(0.001)
    wrong = bufs.wrong_bytes(buf, bufs.pattern(size, 1))
    log(role, "notification 'write done' arrived; %d of %d bytes wrong" %
        (wrong, size))
    send(sock, wrong)

    # 2. the initiator READs this pattern back
    buf[:] = bufs.pattern(size, 2)
    if args.gpu:
        bufs.torch.cuda.synchronize()
    send(sock, "filled")
    recv(sock)  # the initiator is done with the buffer
    agent.deregister_memory(reg)
    return 0 if wrong == 0 else 1


def initiator(sock, args):
    role = "initiator"
    remote = recv(sock)
    if remote["gpu"] != args.gpu:
        raise RuntimeError("--gpu on one side only")
    bufs = Buffers(args.gpu)
    size = remote["size"]
    src = bufs.pattern(size, 1)
    dst = bufs.zeros(size)
    agent = make_agent("initiator", args.tls)
    regs = [bufs.register(agent, src), bufs.register(agent, dst)]
    name = agent.add_remote_agent(remote["meta"])
    rdescs = bufs.xfer_descs(agent, remote["addr"], size, remote["device"])

    # 1. WRITE src into the target's buffer; the target learns that the
    # bytes are there from a notification, a message delivered after
    # them. What NIXL 1.5.1 does with it: the handle keeps the message
    # given at initialize_xfer, and transfer(handle) sends it; a message
    # given to transfer(handle, msg) replaces it for this transfer and
    # every later one of the handle, and transfer(handle) or
    # transfer(handle, b"") then sends that one again (b"" does not turn
    # it off). A handle that should notify differently each time: pass the
    # message to every transfer() call.
    handle = agent.initialize_xfer(
        "WRITE", bufs.xfer_descs(agent, bufs.addr(src), size,
                                 bufs.device(src)),
        rdescs, name, b"write done")
    t0 = time.perf_counter()
    state = agent.transfer(handle)
    wait_done(agent, handle, state, role, "WRITE of %d MiB" % (size >> 20))
    dt = time.perf_counter() - t0
    agent.release_xfer_handle(handle)
    wrong = recv(sock)
    log(role, "the target found %d bytes wrong (%.2f GB/s)" %
        (wrong, size / dt / 1e9))
    ok = wrong == 0

    # 2. READ the target's buffer (which it refilled) into dst
    recv(sock)
    handle = agent.initialize_xfer(
        "READ", bufs.xfer_descs(agent, bufs.addr(dst), size,
                                bufs.device(dst)),
        rdescs, name)
    t0 = time.perf_counter()
    state = agent.transfer(handle)
    wait_done(agent, handle, state, role, "READ of %d MiB" % (size >> 20))
    dt = time.perf_counter() - t0
    agent.release_xfer_handle(handle)
    wrong = bufs.wrong_bytes(dst, bufs.pattern(size, 2))
    log(role, "%d of %d bytes read wrong (%.2f GB/s)" %
        (wrong, size, size / dt / 1e9))
    ok = ok and wrong == 0
    send(sock, "bye")
    for reg in regs:
        agent.deregister_memory(reg)
    agent.remove_remote_agent(name)
    return 0 if ok else 1


def host_port(text):
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--tls", help="UCX_TLS (default: cma+,tcp; with --gpu "
                   "cuda_copy,cuda_ipc+,tcp)")
    role = p.add_mutually_exclusive_group()
    role.add_argument("--serve", metavar="HOST:PORT")
    role.add_argument("--connect", metavar="HOST:PORT")
    args = p.parse_args()
    if args.tls is None:
        # NIXL's default error handling rules out posix and sysv
        args.tls = "cuda_copy,cuda_ipc+,tcp" if args.gpu else "cma+,tcp"

    if args.serve:
        with socket.create_server(host_port(args.serve)) as lsock:
            # port 0: the system picks one; the line says which
            print("nixl_example: listening on port %d" %
                  lsock.getsockname()[1], flush=True)
            sock, _ = lsock.accept()
        with sock:
            rc = target(sock, args)
    elif args.connect:
        with socket.create_connection(host_port(args.connect),
                                      timeout=60) as sock:
            sock.settimeout(None)
            rc = initiator(sock, args)
    else:
        # the target: this script again, --serve on a port of its choosing
        argv = [sys.executable, os.path.abspath(__file__), "--serve",
                "127.0.0.1:0", "--mib", str(args.mib), "--tls", args.tls]
        child = subprocess.Popen(argv + (["--gpu"] if args.gpu else []),
                                 stdout=subprocess.PIPE, text=True)
        port = int(child.stdout.readline().split()[-1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            rc = initiator(sock, args)
        for line in child.stdout:  # the target's lines, after ours
            print(line, end="", flush=True)
        rc = rc or child.wait()
        print("nixl_example: %s" % ("every byte as written" if rc == 0 else
                                    "FAILED"), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
