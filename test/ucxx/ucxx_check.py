# SPDX-License-Identifier: BSD-3-Clause
"""UCXX (the Python package ucxx, over the UCX its libucx wheel loads)
moving host memory through its async API, the way UCXX's own tests do:
tag send/recv of numpy arrays and bytearrays of several sizes (up to past
the rendezvous threshold), send_multi/recv_multi, send_obj/recv_obj,
active messages, an endpoint from a worker address with a forced tag, each
echoed by a listener in this process and by one in another process; every
byte checked.

    ucxx_check.py [--span before|after] [--no-error-handling] [--sizes N,...]

--span before: ucx_span.enable() before anything loads UCX (span first);
--span after: after `import ucxx` loaded UCX, before UCXX makes its UCP
context (UCX first). UCX_TLS comes from the environment. Prints one line
per case ("case: ok" or "case: FAIL ...") and one line "transports: ..."
(UCXX's get_active_transports()); exit status 0 when every case passed.
The peer process is this script with --serve."""
import argparse
import asyncio
import os
import subprocess
import sys

import numpy as np

# sizes in bytes; past 8 KiB tcp goes by rendezvous, past 16 KiB by its
# fragmented protocol
SIZES = [0, 1, 4095, 65536, 1 << 20, 16 << 20]
TIMEOUT = 60
# UCXX's endpoints handle peer errors by default, and then UCX 1.21 takes
# none of its shared-memory transports (tcp carries everything);
# --no-error-handling makes the endpoints from worker addresses without it,
# so that self, posix and cma carry theirs (a listener's endpoints keep it:
# UCX connects them by sockaddr only with error handling on both sides)
EH = True


def enable_span(when, stage):
    if when == stage:
        import ucx_span
        ucx_span.enable()


def pattern(n, seed):
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + seed)
            % 251).astype(np.uint8)


# What a listener serves: an echo of each message, in the order the client
# sends them (plan() below)
def plan(sizes):
    steps = []
    for n in sizes:
        steps.append(("tag", n))
    for n in sizes:
        steps.append(("tag_int64", n))
    steps.append(("multi", tuple(sizes)))
    steps.append(("obj", sizes[-1]))
    for n in sizes:
        steps.append(("am", n))
    return steps


async def serve_steps(ep, sizes):
    for kind, n in plan(sizes):
        if kind == "tag":
            buf = np.empty(n, dtype=np.uint8)
            await ep.recv(buf)
            await ep.send(buf)
        elif kind == "tag_int64":
            buf = np.empty(n // 8, dtype=np.int64)
            await ep.recv(buf)
            await ep.send(buf)
        elif kind == "multi":
            bufs = await ep.recv_multi()
            await ep.send_multi(bufs)
        elif kind == "obj":
            obj = await ep.recv_obj()
            await ep.send_obj(obj)
        elif kind == "am":
            buf = await ep.am_recv()
            await ep.am_send(buf)
    # the client has every reply: the peer may go
    fin = np.empty(1, dtype=np.uint8)
    await ep.recv(fin)


def same(got, want):
    got = np.frombuffer(memoryview(got).cast("B"), dtype=np.uint8)
    want = np.frombuffer(memoryview(want).cast("B"), dtype=np.uint8)
    if got.size != want.size:
        return "%d bytes, not %d" % (got.size, want.size)
    bad = np.flatnonzero(got != want)
    if bad.size:
        return "%d of %d bytes wrong, the first at %d" % (bad.size, got.size,
                                                         bad[0])
    return None


async def client_steps(ep, sizes, where, report):
    """Runs the plan against a listener that echoes it; one report per
    step: (case, error or None)."""
    seed = 0
    for kind, n in plan(sizes):
        seed += 1
        name = "%s %s %s" % (where, kind, n if kind != "multi" else
                             "x".join(str(s) for s in n))
        try:
            if kind == "tag":
                msg = pattern(n, seed)
                back = np.zeros(n, dtype=np.uint8)
                await asyncio.wait_for(ep.send(msg), TIMEOUT)
                await asyncio.wait_for(ep.recv(back), TIMEOUT)
            elif kind == "tag_int64":
                msg = pattern(n // 8 * 8, seed).view(np.int64)
                back = np.zeros(n // 8, dtype=np.int64)
                await asyncio.wait_for(ep.send(msg), TIMEOUT)
                await asyncio.wait_for(ep.recv(back), TIMEOUT)
            elif kind == "multi":
                msg = [pattern(s, seed + i) for i, s in enumerate(n)]
                await asyncio.wait_for(ep.send_multi(msg), TIMEOUT)
                got = await asyncio.wait_for(ep.recv_multi(), TIMEOUT)
                err = (None if len(got) == len(msg) else
                       "%d buffers, not %d" % (len(got), len(msg)))
                for g, m in zip(got, msg):
                    err = err or same(g, m)
                report(name, err)
                continue
            elif kind == "obj":
                msg = bytearray(pattern(n, seed).tobytes())
                await asyncio.wait_for(ep.send_obj(msg), TIMEOUT)
                back = await asyncio.wait_for(ep.recv_obj(), TIMEOUT)
            elif kind == "am":
                msg = pattern(n, seed)
                await asyncio.wait_for(ep.am_send(msg), TIMEOUT)
                back = await asyncio.wait_for(ep.am_recv(), TIMEOUT)
            report(name, same(back, msg))
        except Exception as e:  # the case fails, the next one runs
            report(name, "%s: %s" % (type(e).__name__, e))
            return False
    await asyncio.wait_for(ep.send(np.ones(1, dtype=np.uint8)), TIMEOUT)
    return True


async def local_cases(ucxx, sizes, report):
    """A listener in this process; then an endpoint from the worker's
    address, tag forced."""
    done = asyncio.Event()
    errors = []

    async def handler(ep):
        try:
            await serve_steps(ep, sizes)
        except Exception as e:
            errors.append(e)
        finally:
            done.set()

    listener = ucxx.create_listener(handler)
    ep = await ucxx.create_endpoint(ucxx.get_address(), listener.port)
    await client_steps(ep, sizes, "local", report)
    try:
        await asyncio.wait_for(done.wait(), TIMEOUT)
    except asyncio.TimeoutError:
        errors.append("the handler did not finish")
    report("local listener", "; ".join(str(e) for e in errors) or None)
    await ep.close()
    listener.close()

    # worker address: the peer is this worker, the tag forced
    address = ucxx.get_worker_address()
    ep = await ucxx.create_endpoint_from_worker_address(
        address, endpoint_error_handling=EH)
    for i, n in enumerate(sizes):
        msg = pattern(n, 100 + i)
        back = np.zeros(n, dtype=np.uint8)
        try:
            recv = asyncio.ensure_future(
                ep.recv(back, tag=1000 + i, force_tag=True))
            await asyncio.wait_for(
                ep.send(msg, tag=1000 + i, force_tag=True), TIMEOUT)
            await asyncio.wait_for(recv, TIMEOUT)
            report("local worker address tag %d" % n, same(back, msg))
        except Exception as e:
            report("local worker address tag %d" % n,
                   "%s: %s" % (type(e).__name__, e))
    await ep.close()


async def remote_cases(ucxx, args, report):
    cmd = [sys.executable, os.path.abspath(__file__), "--serve",
           "--sizes", ",".join(str(n) for n in args.sizes)]
    if args.span:
        cmd += ["--span", args.span]
    if not EH:
        cmd += ["--no-error-handling"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(
            asyncio.get_running_loop().run_in_executor(
                None, server.stdout.readline), TIMEOUT)
        if not line.startswith("port "):
            report("remote listener", "the server said %r" % line)
            return
        port = int(line.split()[1])
        ep = await ucxx.create_endpoint(ucxx.get_address(), port)
        await client_steps(ep, args.sizes, "remote", report)
        await ep.close()
        await remote_worker_address(
            ucxx, ucxx.get_ucx_address_from_buffer(
                np.frombuffer(bytes.fromhex(line.split()[3]), np.uint8)),
            args.sizes, report)
        out = await asyncio.wait_for(
            asyncio.get_running_loop().run_in_executor(
                None, server.stdout.read), TIMEOUT)
        rc = await asyncio.get_running_loop().run_in_executor(
            None, server.wait, TIMEOUT)
        report("remote listener",
               None if rc == 0 else "exit %d: %s" % (rc, out.strip()))
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


async def remote_worker_address(ucxx, address, sizes, report):
    """Tag messages to the peer's worker address, echoed to ours; the peer
    learns our address from the first two (tag 0)"""
    ep = await ucxx.create_endpoint_from_worker_address(
        address, endpoint_error_handling=EH)
    mine = ucxx.get_worker_address()
    await asyncio.wait_for(ep.send(np.array([mine.length], np.int64), tag=0,
                                   force_tag=True), TIMEOUT)
    await asyncio.wait_for(ep.send(mine, tag=0, force_tag=True), TIMEOUT)
    for i, n in enumerate(sizes):
        name = "remote worker address tag %d" % n
        msg = pattern(n, 200 + i)
        back = np.zeros(n, dtype=np.uint8)
        try:
            await asyncio.wait_for(
                ep.send(msg, tag=3000 + i, force_tag=True), TIMEOUT)
            await asyncio.wait_for(ucxx.recv(back, tag=4000 + i), TIMEOUT)
            report(name, same(back, msg))
        except Exception as e:
            report(name, "%s: %s" % (type(e).__name__, e))
            break
    await ep.close()


async def serve_worker_address(ucxx, sizes):
    size = np.empty(1, dtype=np.int64)
    await ucxx.recv(size, tag=0)
    peer = np.empty(size[0], dtype=np.uint8)
    await ucxx.recv(peer, tag=0)
    ep = await ucxx.create_endpoint_from_worker_address(
        ucxx.get_ucx_address_from_buffer(peer), endpoint_error_handling=EH)
    for i, n in enumerate(sizes):
        buf = np.empty(n, dtype=np.uint8)
        await ucxx.recv(buf, tag=3000 + i)
        await ep.send(buf, tag=4000 + i, force_tag=True)
    await ep.close()


async def serve(ucxx, sizes):
    done = asyncio.Event()
    errors = []

    async def handler(ep):
        try:
            await serve_steps(ep, sizes)
        except Exception as e:
            errors.append("%s: %s" % (type(e).__name__, e))
        finally:
            done.set()

    listener = ucxx.create_listener(handler)
    address = bytes(memoryview(ucxx.get_worker_address())).hex()
    print("port %d address %s" % (listener.port, address), flush=True)
    await asyncio.wait_for(done.wait(), 4 * TIMEOUT)
    listener.close()
    try:
        await asyncio.wait_for(serve_worker_address(ucxx, sizes), 2 * TIMEOUT)
    except Exception as e:
        errors.append("worker address: %s: %s" % (type(e).__name__, e))
    if errors:
        print("\n".join(errors), flush=True)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--span", choices=["before", "after"])
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    ap.add_argument("--no-error-handling", action="store_true")
    args = ap.parse_args()
    global EH
    EH = not args.no_error_handling
    args.sizes = [int(n) for n in args.sizes.split(",")]

    enable_span(args.span, "before")
    import ucxx
    enable_span(args.span, "after")
    ucxx.init()

    if args.serve:
        return asyncio.run(serve(ucxx, args.sizes))

    failed = []

    def report(case, err):
        print("%s: %s" % (case, "ok" if err is None else "FAIL " + err),
              flush=True)
        if err is not None:
            failed.append(case)

    async def run():
        await local_cases(ucxx, args.sizes, report)
        await remote_cases(ucxx, args, report)

    asyncio.run(run())
    print("transports: %s" % ",".join(sorted(ucxx.get_active_transports())),
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
