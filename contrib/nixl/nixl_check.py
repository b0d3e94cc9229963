#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""NIXL as the client: two processes, NIXL agents with the UCX backend.

The target registers one buffer; the initiator WRITEs and READs the whole
buffer, its second half from an odd offset (and from another odd offset on
its own side), and 8-byte and 4109-byte pieces across page boundaries of
the target. Every byte of both buffers is checked after every transfer
(the pieces' bytes and the bytes around them, which must be untouched);
GB/s is the median of 5 transfers. Only UCX_TLS differs between the rows
of a pair (native transport, then span's twin); everything else is NIXL's
and UCX's defaults.

  CPU mode (default): host buffers from numpy, 32 MiB, boundaries every
      4 MiB and the first 4 KiB page; UCX_TLS=cma,tcp vs cma+,tcp.
  GPU mode (--gpu): the target's buffer is a 300 MiB PyTorch tensor made
      under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (one VMM
      handle per 20 MiB page), then one from cudaMalloc (expandable
      segments off); boundaries every 20 MiB; bytes checked on the device;
      UCX_TLS=cuda_copy,cuda_ipc,tcp vs cuda_copy,cuda_ipc+,tcp. Also
      KV-cache pages: one transfer of 4096 blocks of 16 KiB, and one of
      1024 blocks of 256 KiB, at slots of both buffers picked apart and
      out of order (every byte checked, as in every row); the lines under
      the table give the twin on expandable memory against native
      cuda_ipc on cudaMalloc memory.

A twin row is right when NIXL says DONE, every byte is as expected and
the twin carried the op (UCP's choice, from UCX_PROTO_INFO, listed under
the table) wherever the native transport carried it in the native row and,
in GPU mode, always (get: where GPU 0 has an active NVLink): span's
cuda_ipc+ carries put and get of every device buffer, VMM ones too, also
where native cuda_ipc leaves get to software emulation. Before the first row, the initiator READs the whole buffer once
right after add_remote_agent: its time (cold start: metadata, rkey unpack,
IPC import and map, the copy) is printed under the table. GB/s is only as good as the machine: NIXL's progress thread
spins (one per agent), so on two cores the copying thread is preempted and
the medians scatter by 10x; the bytes do not.

The nixl package (nixl_cu13, or nixl) must import; UCX_MODULE_DIR must name
the directory that holds libuct_span (the caller's environment is passed
on, with UCX_TLS set per row). Prints one table; exits 0 only when every
twin row moved every byte right and is never worse in status than its
native row, 1 otherwise, 77 when NIXL does not import (the reason printed).

Across two nodes: `--serve HOST:PORT` on the target's node starts a target
for each pair that `--connect HOST:PORT` on the initiator's node asks for
(CPU mode; the server's environment, with the row's UCX_TLS, is the
target's; it serves until killed).

  nixl_check.py [--gpu] [--runs N] [--mib N] [--tls NATIVE TWIN]
                [--gpus INITIATOR,TARGET] [--connect HOST:PORT]
                [--prog-thread on|off] [--only TEXT] [--allocs LIST]
  nixl_check.py --serve HOST:PORT

"posting, ms" is how long NIXL's transfer() took to post the ops (the
median of the runs); with span's engine, UCX_LOG_LEVEL=info logs, per
engine, how its ops went: alone or in how many batches.
"""
import argparse
import gc
import os
import pickle
import select
import random
import re
import socket
import statistics
import struct
import subprocess
import sys
import time

PAGE_GPU = 20 << 20
# host pages are 4 KiB: the boundaries chosen in CPU mode are the first
# page boundary and every 4 MiB (a span chunk may end there)
STEP_CPU = 4 << 20
GOLDEN = 2654435761
XFER_TIMEOUT_S = 60.0
# GPU mode's KV-cache cases: (block bytes, blocks in one transfer)
KV_BLOCKS = ((16 << 10, 4096), (256 << 10, 1024))
# a server on another node may still be starting
CONNECT_TIMEOUT_S = 60.0


def import_nixl():
    try:
        import nixl_cu13 as nixl
    except ImportError as first:
        if first.name != "nixl_cu13":
            raise  # nixl_cu13 is there, but not what it needs (numpy)
        try:
            import nixl
        except ImportError:
            raise first from None
        if not hasattr(nixl, "nixl_agent"):  # older: the API in nixl._api
            import nixl._api as nixl
    return nixl


# --------------------------------------------------------------------------
# Memory: one class per mode, the same operations on numpy and on torch
# --------------------------------------------------------------------------

class HostMem:
    """numpy buffers in DRAM; the pattern is bits 24..31 of i * GOLDEN."""

    kind = "DRAM"

    def __init__(self):
        import numpy
        self.np = numpy
        self._base = None

    def alloc(self, size):
        return self.np.empty(size, dtype=self.np.uint8)

    def addr(self, buf):
        return buf.ctypes.data

    def devid(self, buf):
        return 0

    def base(self, size):
        if self._base is None or self._base.size < size:
            i = self.np.arange(size, dtype=self.np.uint32)
            i *= self.np.uint32(GOLDEN)
            i >>= self.np.uint32(24)
            self._base = i.astype(self.np.uint8)
        return self._base[:size]

    def pattern(self, size, seed):
        return self.base(size) ^ self.np.uint8(seed)

    def first_diff(self, got, want):
        """Offset of the first differing byte, or -1."""
        if self.np.array_equal(got, want):
            return -1
        return int(self.np.flatnonzero(got != want)[0])

    def sync(self):
        pass


class DeviceMem:
    """torch tensors on the GPU; the same pattern, computed on the device."""

    kind = "VRAM"

    def __init__(self, torch, device):
        self.torch = torch
        self._base = None
        torch.cuda.set_device(device)

    def alloc(self, size):
        return self.torch.empty(size, dtype=self.torch.uint8, device="cuda")

    def addr(self, buf):
        return buf.data_ptr()

    def devid(self, buf):
        return buf.get_device()

    def base(self, size):
        t = self.torch
        if self._base is None or self._base.numel() < size:
            self._base = None
            out = t.empty(size, dtype=t.uint8, device="cuda")
            step = 64 << 20  # int64 temporaries in slices, not 8x the buffer
            for a in range(0, size, step):
                i = t.arange(a, min(a + step, size), dtype=t.int64, device="cuda")
                out[a:a + i.numel()] = ((i * GOLDEN) >> 24).bitwise_and(0xff).to(t.uint8)
            self._base = out
        return self._base[:size]

    def pattern(self, size, seed):
        return self.base(size).bitwise_xor(seed)

    def first_diff(self, got, want):
        if self.torch.equal(got, want):
            return -1
        return int(self.torch.nonzero(got != want)[0, 0].item())

    def sync(self):
        self.torch.cuda.synchronize()


def check_layout(mem, buf, pieces, seed, bg_seed):
    """buf must hold pattern(seed) inside the pieces, at the offsets given
    by their other side, and pattern(bg_seed) everywhere else. pieces:
    sorted, disjoint (offset here, offset of the pattern, length). Returns
    (True, "") or (False, what differs)."""
    size = len(buf)
    pat = mem.pattern(size, seed)
    bg = mem.pattern(size, bg_seed)
    pos = 0
    for here, there, n in pieces + [(size, 0, 0)]:
        if here > pos:
            d = mem.first_diff(buf[pos:here], bg[pos:here])
            if d >= 0:
                return False, "byte %d outside the pieces changed" % (pos + d)
        if n:
            d = mem.first_diff(buf[here:here + n], pat[there:there + n])
            if d >= 0:
                return False, "byte %d of the piece at %d wrong" % (d, here)
        pos = here + n
    return True, ""


# --------------------------------------------------------------------------
# The pipe between the two processes: length-prefixed pickles
# --------------------------------------------------------------------------

def send(sock, obj):
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("peer closed the pipe")
        out += chunk
    return out


def recv(sock):
    (n,) = struct.unpack("!Q", recv_exact(sock, 8))
    return pickle.loads(recv_exact(sock, n))


def make_mem(args, role):
    if not args.gpu:
        return HostMem()
    import torch
    return DeviceMem(torch, args.gpus[role == "target"])


def make_agent(name, args):
    nixl = import_nixl()
    return nixl.nixl_agent(name, nixl.nixl_agent_config(
        enable_prog_thread=args.prog_thread == "on", backends=["UCX"]))


SPAN_EXPORT_TABLE = "/memfd:ucx-span-vmm"  # span_vmm_export.h
SPAN_EXPORT_FIRST = 64


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def span_exports():
    """Exports this process's span export table lists (its memfd, found by
    name; layout in span_vmm_export.h): entries with a serial."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink("/proc/self/fd/" + fd).startswith(
                    SPAN_EXPORT_TABLE):
                continue
            with open("/proc/self/fd/" + fd, "rb") as f:
                table = f.read()
        except OSError:
            continue
        n += sum(1 for off in range(SPAN_EXPORT_FIRST, len(table) - 15, 16)
                 if table[off:off + 8] != bytes(8))
    return n


def leftover_counts(fds0):
    """(descriptors opened since fds0, exports listed) once the caller has
    dropped its agent (UCX's context and the twin MDs go with it)"""
    gc.collect()
    return open_fds() - fds0, span_exports()


# --------------------------------------------------------------------------
# Target: registers its buffer, fills and checks it when asked
# --------------------------------------------------------------------------

def target_main(sock, args):
    if args.gpu and args.alloc == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif args.gpu:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    mem = make_mem(args, "target")
    size = args.mib << 20
    # first, so that it starts a segment of its own
    buf = mem.alloc(size)
    mem.sync()
    fds0 = open_fds()
    try:
        agent = make_agent("target", args)
        if "UCX" not in agent.backends:
            raise RuntimeError("no UCX backend")
        regs = agent.register_memory(
            [(mem.addr(buf), size, mem.devid(buf), "")], mem.kind)
    except Exception as e:  # reported as the row's status
        send(sock, {"error": "%s: %s" % (type(e).__name__, e)})
        return 0
    send(sock, {"meta": agent.get_agent_metadata(), "addr": mem.addr(buf),
                "size": size, "devid": mem.devid(buf), "kind": mem.kind})
    while True:
        if args.prog_thread == "off":
            # no thread of NIXL's progresses the target's UCX (connections
            # it is asked for): its loop does, while nothing is asked
            while not select.select([sock], [], [], 0.001)[0]:
                agent.get_new_notifs()
        msg = recv(sock)
        if msg["cmd"] == "fill":
            buf[:] = mem.pattern(size, msg["seed"])
            mem.sync()
            send(sock, {"ok": True})
        elif msg["cmd"] == "check":
            mem.sync()
            send(sock, check_layout(mem, buf, msg["pieces"], msg["seed"],
                                    msg["bg"]))
        else:
            break
    agent.deregister_memory(regs)
    del agent, regs
    fds, exports = leftover_counts(fds0)
    send(sock, {"fds": fds, "exports": exports})
    return 0


# --------------------------------------------------------------------------
# Initiator: the cases, timed and checked
# --------------------------------------------------------------------------

def boundaries(size, gpu):
    if gpu:
        return list(range(PAGE_GPU, size, PAGE_GPU))
    return [4096] + list(range(STEP_CPU, size, STEP_CPU))


def kv_blocks(size, block, count):
    """count blocks of block bytes as a KV cache lays out its pages: at
    slots of both buffers picked apart from each other and in no order
    (local slot i carries remote slot j), as [(local, remote, length)]."""
    slots = size // block
    local = random.Random(block).sample(range(slots), count)
    remote = random.Random(block + 1).sample(range(slots), count)
    return [(lo * block, ro * block, block) for lo, ro in zip(local, remote)]


def cases(size, gpu):
    """(name, [(local offset, remote offset, length)]); disjoint on each
    side."""
    half = size // 2 + 1  # odd
    out = [("whole", [(0, 0, size)]),
           ("2nd half @odd", [(3, half, size - half)])]
    for n in (8, 4109):
        # the local side keeps the pieces apart by the same distances, at
        # an odd shift, so a piece landing at its local offset shows
        out.append(("%dB x%d" % (n, len(boundaries(size, gpu))),
                    [(b - n // 2 + 1, b - n // 2, n)
                     for b in boundaries(size, gpu)]))
    # KV-cache pages, one transfer of many descriptors (GPU mode: what
    # disaggregated inference moves)
    for block, count in KV_BLOCKS if gpu else ():
        if block * count <= size:
            out.append(("KV %dKiB x%d" % (block >> 10, count),
                        kv_blocks(size, block, count)))
    return out


def wait_xfer(agent, handle, state):
    deadline = time.monotonic() + XFER_TIMEOUT_S
    while state == "PROC":
        if time.monotonic() > deadline:
            return "TIMEOUT"
        state = agent.check_xfer_state(handle)
    return state


def run_case(agent, mem, sock, local, remote, op, pieces, runs, tag):
    size = remote["size"]
    lbase = mem.addr(local)
    ldescs = agent.get_xfer_descs(
        [(lbase + lo, n, mem.devid(local)) for lo, _, n in pieces], mem.kind)
    rdescs = agent.get_xfer_descs(
        [(remote["addr"] + ro, n, remote["devid"]) for _, ro, n in pieces],
        remote["kind"])
    try:
        handle = agent.initialize_xfer(op, ldescs, rdescs, "target")
    except Exception as e:
        return {"status": "%s: %s" % (type(e).__name__, str(e)[:60]),
                "bytes_ok": None, "gbps": None}
    nbytes = sum(n for _, _, n in pieces)
    times, posted, status, bytes_ok, why = [], [], "DONE", True, ""
    for r in range(runs):
        seed = (tag * 16 + r * 2 + 1) & 0xff
        bg = seed ^ 0x5a
        # the side that is written starts with the background pattern,
        # the side that is read with the pattern the pieces must carry
        if op == "WRITE":
            send(sock, {"cmd": "fill", "seed": bg})
            recv(sock)
            pat = mem.pattern(size, seed)
            local[:] = mem.pattern(size, bg ^ 0xff)
            for lo, ro, n in pieces:
                local[lo:lo + n] = pat[ro:ro + n]
        else:
            send(sock, {"cmd": "fill", "seed": seed})
            recv(sock)
            local[:] = mem.pattern(size, bg)
        mem.sync()
        t0 = time.perf_counter()
        state = agent.transfer(handle)
        posted.append(time.perf_counter() - t0)
        state = wait_xfer(agent, handle, state)
        t1 = time.perf_counter()
        if state != "DONE":
            status = state
            bytes_ok = None
            break
        times.append(t1 - t0)
        if op == "WRITE":
            send(sock, {"cmd": "check", "seed": seed, "bg": bg,
                        "pieces": sorted((ro, ro, n) for _, ro, n in pieces)})
            ok, why = recv(sock)
        else:
            ok, why = check_layout(mem, local, sorted(pieces), seed, bg)
        if not ok:
            bytes_ok = False
            break
    if status == "DONE":
        handle.release()
    gbps = nbytes / statistics.median(times) / 1e9 if times else None
    post_ms = statistics.median(posted) * 1e3 if posted else None
    return {"status": status, "bytes_ok": bytes_ok, "gbps": gbps, "why": why,
            "post_ms": post_ms}


def emit(args, result):
    """The initiator's result, on a pipe of its own: UCX's C stdio writes
    UCX_PROTO_INFO to stdout in its own blocks, which may cut a line of
    ours where Python's stdout is not unbuffered."""
    with os.fdopen(args.result_fd, "wb") as out:
        pickle.dump(result, out)


def initiator_main(sock, args):
    remote = recv(sock)
    if "error" in remote:
        send(sock, {"cmd": "quit"})
        emit(args, {"error": "target: " + remote["error"]})
        return 0
    mem = make_mem(args, "initiator")
    size = remote["size"]
    local = mem.alloc(size)
    mem.sync()
    results = []
    fds0 = open_fds()
    try:
        agent = make_agent("initiator", args)
        if "UCX" not in agent.backends:
            raise RuntimeError("no UCX backend")
        regs = agent.register_memory(
            [(mem.addr(local), size, mem.devid(local), "")], mem.kind)
        t0 = time.perf_counter()
        agent.add_remote_agent(remote["meta"])
        cold = cold_read(agent, mem, local, remote)
        cold_ms = (time.perf_counter() - t0) * 1e3 if cold == "DONE" else None
    except Exception as e:
        send(sock, {"cmd": "quit"})
        emit(args, {"error": "%s: %s" % (type(e).__name__, e)})
        return 0
    tag = 0
    for name, pieces in cases(size, args.gpu):
        if args.only and args.only not in name:
            continue
        for op in ("WRITE", "READ"):
            tag += 1
            res = run_case(agent, mem, sock, local, remote, op, pieces,
                           args.runs, tag)
            res["op"] = "%s %s" % (op, name)
            results.append(res)
    send(sock, {"cmd": "quit"})
    left = recv(sock)
    agent.remove_remote_agent("target")
    agent.deregister_memory(regs)
    del agent, regs
    fds, exports = leftover_counts(fds0)
    left["fds"] = (left["fds"], fds)
    left["exports"] += exports
    emit(args, {"results": results, "cold_ms": cold_ms, "left": left})
    return 0


def cold_read(agent, mem, local, remote):
    """The first READ of the whole buffer after add_remote_agent; its
    state (the bytes are checked by the rows that follow)."""
    size = remote["size"]
    handle = agent.initialize_xfer(
        "READ", agent.get_xfer_descs([(mem.addr(local), size,
                                       mem.devid(local))], mem.kind),
        agent.get_xfer_descs([(remote["addr"], size, remote["devid"])],
                             remote["kind"]), "target")
    state = wait_xfer(agent, handle, agent.transfer(handle))
    if state == "DONE":
        handle.release()
    return state


# --------------------------------------------------------------------------
# Driver: one pair of processes per row, the table, the verdict
# --------------------------------------------------------------------------

def cudart_dir():
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for d in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(d, "cu13", "lib")
        if os.path.isdir(lib):
            return lib
    return ""


def proto_lanes(out, where="intra-node"):
    """What UCP chose for put and get between the two processes, from the
    initiator's UCX_PROTO_INFO tables: {"put": [...], "get": [...]};
    where: the endpoint configurations to read (inter-node: two nodes)."""
    lanes, op, intra = {"put": [], "get": []}, None, False
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 1:
            text = cells[0]
            if " cfg#" in text:
                intra = where in text
            elif " by ucp_" in text:
                op = ("put" if "write by ucp_put" in text else
                      "get" if "read by ucp_get" in text else None)
        elif len(cells) == 3 and op and intra and cells[0][:1].isdigit():
            lane = "%s %s" % (cells[1], cells[2])
            if lane not in lanes[op]:
                lanes[op].append(lane)
    return lanes


def via(lanes, op, tl):
    return any(tl + "/" in lane for lane in lanes.get(op, []))


def gpu_has_nvlink():
    """An active NVLink on GPU 0, as nvidia-smi reports it (cuda_ipc and
    its twin offer get zero-copy there)."""
    try:
        out = subprocess.run(["nvidia-smi", "nvlink", "--status", "-i", "0"],
                             capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "GB/s" in out


def host_port(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def target_env(tls):
    env = dict(os.environ, UCX_TLS=tls)
    # NIXL's UCX on a machine with Debian's libefa: see docs/limitations.md
    env.setdefault("UCX_MODULES", "^efa")
    return env


def role_argv(args, alloc, role, fd, result_fd=None):
    argv = [sys.executable, os.path.abspath(__file__), "--runs",
            str(args.runs), "--mib", str(args.mib), "--alloc", alloc,
            "--gpus", "%d,%d" % tuple(args.gpus),
            "--prog-thread", args.prog_thread,
            "--role", role, "--fd", str(fd)]
    if args.only:
        argv += ["--only", args.only]
    if result_fd is not None:
        argv += ["--result-fd", str(result_fd)]
    return argv + (["--gpu"] if args.gpu else [])


def serve(args):
    """Targets for --connect from another node, one pair at a time."""
    lsock = socket.create_server(host_port(args.serve), reuse_port=False)
    print("nixl_check: serving targets at %s" % args.serve, flush=True)
    while True:
        conn, peer = lsock.accept()
        try:
            conn.settimeout(CONNECT_TIMEOUT_S)
            ask = recv(conn)
            conn.settimeout(None)
            args.runs, args.mib = int(ask["runs"]), int(ask["mib"])
            tls, alloc = str(ask["tls"]), str(ask["alloc"])
        except Exception as e:  # not an initiator of ours
            print("nixl_check: refused %s: %s" % (peer, e), flush=True)
            conn.close()
            continue
        print("nixl_check: target for %s, UCX_TLS=%s" % (peer[0], tls),
              flush=True)
        p = subprocess.Popen(role_argv(args, alloc, "target", conn.fileno()),
                             pass_fds=[conn.fileno()], env=target_env(tls))
        conn.close()
        try:
            p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        print("nixl_check: target exit %s" % p.returncode, flush=True)


def connect(args, tls, alloc):
    """A socket to a target that a --serve on another node started."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            sock = socket.create_connection(host_port(args.connect),
                                            timeout=CONNECT_TIMEOUT_S)
            break
        except (ConnectionRefusedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    sock.settimeout(None)
    send(sock, {"tls": tls, "alloc": alloc, "runs": args.runs,
                "mib": args.mib})
    return sock


def run_pair(args, tls, alloc):
    if args.connect:
        try:
            b = connect(args, tls, alloc)
        except OSError as e:
            return {"error": "no target at %s: %s" % (args.connect, e)}
        return run_initiator(args, tls, alloc, [], b)
    a, b = socket.socketpair()
    target = subprocess.Popen(
        role_argv(args, alloc, "target", a.fileno()), pass_fds=[a.fileno()],
        env=pair_env(args, tls), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    a.close()
    return run_initiator(args, tls, alloc, [target], b)


def pair_env(args, tls):
    env = target_env(tls)
    # only printed: which transport carried the row
    env["UCX_PROTO_INFO"] = "y"
    if args.gpu:
        # NIXL's libucm_cuda links libcudart.so.13, which torch's wheels
        # bring in nvidia/cu13/lib
        env["LD_LIBRARY_PATH"] = ":".join(
            filter(None, [cudart_dir(), env.get("LD_LIBRARY_PATH")]))
    return env


def run_initiator(args, tls, alloc, procs, b):
    """The initiator on socket b, beside the local target in procs (none
    where it is on another node); its result."""
    result_r, result_w = os.pipe()
    procs.append(subprocess.Popen(
        role_argv(args, alloc, "initiator", b.fileno(), result_w),
        pass_fds=[b.fileno(), result_w], env=pair_env(args, tls),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    b.close()
    os.close(result_w)
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += "\n(killed after %d s)" % args.timeout
        outs.append((p.returncode, out, err))
    rc, out, err = outs[-1]
    # a result is a few KiB: the pipe held it while the initiator ran
    with os.fdopen(result_r, "rb") as f:
        result = f.read()
    try:
        res = pickle.loads(result)
        res["lanes"] = proto_lanes(
            out, "inter-node" if args.connect else "intra-node")
        # span's engine at its end (UCX_LOG_LEVEL=info): ops per launch
        res["engine"] = [l.split(" INFO ", 1)[-1].strip()
                         for l in out.splitlines()
                         if re.search(r"span \w+ copy 0x\w+: \d+ ops:", l)]
        return res
    except Exception:  # none, or cut short by a crash or the timeout
        pass
    tail = (err.strip().splitlines() or ["no output"])[-1]
    target = ("on %s (its node's log)" % args.connect if args.connect else
              "exit %s: %s" % (outs[0][0],
                               (outs[0][2].strip().splitlines() or [""])[-1][:120]))
    return {"error": "initiator exit %s: %s; target %s" %
            (rc, tail[:120], target)}


def leftovers(native, twin):
    """A line on what the pair left open, and whether the twin left more
    than UCX natively did (its own caches and threads) or any export."""
    if not twin or not native:
        return "- (a pair did not finish)", False
    bad = twin["exports"] > 0 or any(t > n for t, n in
                                     zip(twin["fds"], native["fds"]))
    return ("%+d/%+d fds, %d exports (native: %+d/%+d fds)%s" % (
        *twin["fds"], twin["exports"], *native["fds"],
        " FAIL: the twin left more" if bad else "")), bad


def one_line(text):
    return " ".join(str(text).split())[:160]


def fmt_gbps(v):
    return "-" if v is None else "%.4g" % v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mib", type=int, default=None)
    ap.add_argument("--tls", nargs=2, metavar=("NATIVE", "TWIN"))
    ap.add_argument("--gpus", default="0,0", metavar="INITIATOR,TARGET",
                    help="GPU mode: the initiator's and the target's GPU")
    ap.add_argument("--prog-thread", choices=("on", "off"), default="on",
                    help="NIXL's progress thread (default: on, NIXL's "
                    "default)")
    ap.add_argument("--only", metavar="TEXT",
                    help="only the cases whose name holds TEXT (KV: the "
                    "KV-cache pages)")
    ap.add_argument("--allocs", metavar="LIST",
                    help="GPU mode: of expandable,cudaMalloc (default: both)")
    ap.add_argument("--timeout", type=int, default=300,
                    help="seconds per pair of processes")
    ap.add_argument("--connect", metavar="HOST:PORT",
                    help="the target on another node, from its --serve")
    ap.add_argument("--serve", metavar="HOST:PORT",
                    help="start targets for --connect, until killed")
    ap.add_argument("--role", choices=("target", "initiator"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--alloc", default="host", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.gpus = [int(g) for g in args.gpus.split(",")]
    if len(args.gpus) != 2:
        ap.error("--gpus takes two GPU ordinals: INITIATOR,TARGET")
    if args.mib is None:
        args.mib = 300 if args.gpu else 32

    if args.role:
        sock = socket.socket(fileno=args.fd)
        return (target_main if args.role == "target" else initiator_main)(
            sock, args)
    if (args.connect or args.serve) and args.gpu:
        ap.error("--connect and --serve are CPU mode only")

    try:
        import_nixl()
    except ImportError as e:
        print("nixl_check: SKIP: the NIXL python package does not import "
              "(%s); contrib/setup/setup.sh installs it into .span-deps/nixl/py, "
              "contrib/nixl/nixl_bundle.sh packs it for the GPU suite" % e)
        return 77
    if args.tls:
        native, twin = args.tls
    elif args.gpu:
        native, twin = "cuda_copy,cuda_ipc,tcp", "cuda_copy,cuda_ipc+,tcp"
    else:
        native, twin = "cma,tcp", "cma+,tcp"
    allocs = ["expandable", "cudaMalloc"] if args.gpu else ["host"]
    if args.gpu and args.allocs:
        allocs = args.allocs.split(",")
    if args.serve:
        return serve(args)

    print("NIXL UCX backend, %d MiB target buffer, GB/s median of %d; "
          "UCX_MODULE_DIR=%s" % (args.mib, args.runs,
                                 os.environ.get("UCX_MODULE_DIR", "(unset)")))
    if args.gpu:
        print("initiator on GPU %d, target on GPU %d" % tuple(args.gpus))
    if args.connect:
        print("initiator here on %s, target on the node of %s" %
              (socket.gethostname(), args.connect))
    print("NIXL progress thread: %s" % args.prog_thread)
    print("| mode | UCX_TLS | op | status | bytes as expected | GB/s | "
          "posting, ms | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    rc = 0
    results = {}
    lanes, colds, lefts, engines = [], [], [], []
    # what the twin carries whatever the native transport did
    always = {"put"} | ({"get"} if gpu_has_nvlink() else set()) \
        if args.gpu else set()
    for alloc in allocs:
        mode = "gpu %s" % alloc if args.gpu else "cpu"
        rows, lanes_of, left_of = {}, {}, {}
        for tls in (native, twin):
            res = run_pair(args, tls, alloc)
            if "error" in res:
                res = {"results": [{"op": "(setup)", "status": res["error"],
                                    "bytes_ok": None, "gbps": None}]}
            rows[tls] = res["results"]
            lanes_of[tls] = res.get("lanes", {})
            left_of[tls] = res.get("left")
            colds.append("%s, UCX_TLS=%s: %s" % (
                mode, tls, "%.1f ms" % res["cold_ms"] if res.get("cold_ms")
                else "-"))
            lanes.append("%s, UCX_TLS=%s: put %s; get %s" % (
                mode, tls, *(", ".join(res.get("lanes", {}).get(op) or ["-"])
                             for op in ("put", "get"))))
            for r in rows[tls]:
                results[(alloc, tls, r["op"])] = r
            engines += ["%s, UCX_TLS=%s: %s" % (mode, tls, e)
                        for e in res.get("engine", [])]
        line, bad = leftovers(left_of[native], left_of[twin])
        lefts.append("%s, UCX_TLS=%s: %s" % (mode, twin, line))
        rc |= bad
        nat = {r["op"]: r for r in rows[native]}
        twins = [t for t in twin.split(",") if t.endswith("+")]
        for tls in (native, twin):
            for r in rows[tls]:
                ok = r["bytes_ok"]
                if tls == native:
                    verdict = "reference"
                else:
                    n = nat.get(r["op"]) or nat.get("(setup)") or {}
                    good = r["status"] == "DONE" and ok is True
                    # where the native transport carried this op (on a GPU:
                    # always), the twin must have carried it: not tcp
                    op = "put" if r["op"].startswith("WRITE") else "get"
                    through = [t for t in twins
                               if (op in always or
                                   via(lanes_of[native], op, t[:-1])) and
                               not via(lanes_of[twin], op, t)]
                    if good and through:
                        good = False
                        verdict = "FAIL (not through %s)" % through[0]
                    elif not good:
                        verdict = "FAIL"
                        if n and n.get("status") != "DONE":
                            verdict += " (native: %s)" % one_line(
                                n.get("status"))[:40]
                    elif n.get("gbps"):
                        verdict = "ok, %.2fx native" % (r["gbps"] / n["gbps"])
                    else:
                        verdict = "ok"
                    rc |= not good
                why = (" (%s)" % r["why"]) if ok is False and r.get("why") else ""
                print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    mode, tls, r["op"], one_line(r["status"]),
                    {True: "yes", False: "NO" + why, None: "-"}[ok],
                    fmt_gbps(r["gbps"]),
                    "%.2f" % r["post_ms"] if r.get("post_ms") else "-",
                    verdict))
    print("\nWhat UCP chose between the two %s (UCX_PROTO_INFO):" %
          ("nodes" if args.connect else "processes"))
    for line in lanes:
        print("- " + line)
    print("\nLeft once both agents are gone (descriptors opened since "
          "before the agent, target/initiator; exports still listed):")
    for line in lefts:
        print("- " + line)
    if engines:
        print("\nspan's copy engine in the initiator, every transfer of the "
              "pair (UCX_LOG_LEVEL=info):")
        for line in engines:
            print("- " + line)
    print("\nCold start: add_remote_agent to the first whole READ done:")
    for line in colds:
        print("- " + line)
    if args.gpu:
        # the goal: the twin on expandable memory as fast as native cuda_ipc
        # on cudaMalloc memory
        for op in ("WRITE whole", "READ whole"):
            t = results.get(("expandable", twin, op), {}).get("gbps")
            n = results.get(("cudaMalloc", native, op), {}).get("gbps")
            print("%s: twin on expandable / native on cudaMalloc: %s" % (
                op, "%.2f (goal >= 0.9)" % (t / n) if t and n else "-"))
        # KV pages: the twin batches the copies of VMM memory
        for block, count in KV_BLOCKS:
            for op in ("WRITE", "READ"):
                name = "%s KV %dKiB x%d" % (op, block >> 10, count)
                t = results.get(("expandable", twin, name), {}).get("gbps")
                n = results.get(("cudaMalloc", native, name), {}).get("gbps")
                print("%s: twin on expandable / native on cudaMalloc: %s" % (
                    name, "%.1fx" % (t / n) if t and n else "-"))
    print("nixl_check: %s" % ("every twin row right" if rc == 0 else
                              "a twin row is wrong"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
