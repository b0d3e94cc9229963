#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks that the sources of span depend on each other in one direction.

src is a stack of layers, one folder each but the device layer's four,
bottom first (LAYERS below; the README draws them): the UCM hooks, then
the layers of the plugin in src/uct. A module is a header and the source of the same name in one
folder. Module A depends on module B where A includes B's
header, or, given --objects, where A's object calls a function or reads
data that B's object defines (what `nm` says). The check fails where a
module depends on one in a higher layer, or where the dependencies of
modules form a cycle, even inside one layer; it prints each offending
edge and one cycle path of every cycle it finds.

  layers.py [--src DIR] [--objects DIR]   check DIR (default: src)
  layers.py --self-test                   the check finds what it must
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

LAYERS = ["ucm_hooks", "uct/ucx", "uct/base",
          # the device layer: one folder a job (vendor libraries and the
          # table of vendors, resolving an address to its allocation, VMM
          # export/import, copy engines), which use each other; its modules
          # form no cycle all the same
          ("uct/vendor", "uct/resolve", "uct/vmm", "uct/copy"),
          "uct/key", "uct/md", "uct/iface", "uct/component"]
# Where an include is looked for after the including file's folder, as the
# build's -I options (Makefile.am's AM_CPPFLAGS) name them below src
INCLUDE_DIRS = ["uct", ""]
SOURCE_EXT = (".c", ".h")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def module_of(src, path):
    return os.path.splitext(os.path.relpath(path, src))[0]


def layer_of(module):
    return os.path.dirname(module)


def rank(folder):
    """The place of folder in LAYERS, bottom first; None where it is in
    none (a tuple of LAYERS is one layer of several folders)"""
    for i, layer in enumerate(LAYERS):
        if folder == layer or (isinstance(layer, tuple) and folder in layer):
            return i
    return None


def folders():
    return [f for layer in LAYERS
            for f in (layer if isinstance(layer, tuple) else (layer,))]


def sources(src):
    for folder, _, names in sorted(os.walk(src)):
        for name in sorted(names):
            if name.endswith(SOURCE_EXT):
                yield os.path.join(folder, name)


def include_edges(src, path):
    """Modules whose headers path includes, resolved as the compiler does
    with the -I options of INCLUDE_DIRS: next to path first"""
    with open(path, encoding="utf-8") as f:
        for line in f:
            match = INCLUDE_RE.match(line)
            if not match:
                continue
            for base in [os.path.dirname(path)] + \
                        [os.path.join(src, d) for d in INCLUDE_DIRS]:
                target = os.path.normpath(os.path.join(base, match.group(1)))
                if os.path.exists(target) and target.startswith(src + os.sep):
                    yield module_of(src, target), "includes " + match.group(1)
                    break


def symbol_edges(src, objects):
    """(from, to, why) for every symbol one object takes from another; an
    object dir/.libs/name.o (libtool) or dir/name.o is of module dir/name,
    and so is one that automake names for its target (target-name.o)"""
    defined, undefined = {}, collections.defaultdict(set)
    for folder, _, names in os.walk(objects):
        for name in names:
            if not name.endswith(".o"):
                continue
            rel = os.path.relpath(folder, objects)
            rel = os.path.dirname(rel) if os.path.basename(rel) == ".libs" \
                else rel
            module = os.path.normpath(os.path.join(
                rel, name[:-2].rsplit("-", 1)[-1]))
            if not os.path.exists(os.path.join(src, module + ".c")):
                continue
            out = subprocess.run(["nm", os.path.join(folder, name)],
                                 check=True, capture_output=True,
                                 text=True).stdout
            for line in out.splitlines():
                fields = line.split()
                if len(fields) == 3 and fields[1] in "TDBR":
                    defined[fields[2]] = module
                elif len(fields) == 2 and fields[0] == "U":
                    undefined[module].add(fields[1])
    for module, symbols in undefined.items():
        for symbol in sorted(symbols):
            owner = defined.get(symbol)
            if owner is not None and owner != module:
                yield module, owner, "calls " + symbol


def graph(src, objects):
    edges = collections.defaultdict(dict)  # module -> {module: why}
    for path in sources(src):
        module = module_of(src, path)
        edges[module]
        for target, why in include_edges(src, path):
            if target != module:
                edges[module].setdefault(target, why)
    if objects is not None:
        for module, target, why in symbol_edges(src, objects):
            edges[module].setdefault(target, why)
    return edges


def cycles(edges):
    """One path per strongly connected component of more than one module
    (Tarjan's algorithm, iterative)"""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(cycle_path(edges, set(component)))
    return found


def cycle_path(edges, component):
    """A shortest way around from the first module of component, back to it"""
    start = min(component)
    previous, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node]):
                if child == start:
                    path = [start]
                    while node is not None:
                        path.append(node)
                        node = previous[node]
                    return path[::-1]
                if child in component and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return sorted(component)


def check(src, objects, out=sys.stdout):
    edges = graph(os.path.abspath(src), objects)
    errors = 0
    for module in sorted(edges):
        if rank(layer_of(module)) is None:
            print("layers: %s is in no layer (%s)" % (module,
                  ", ".join(folders())), file=out)
            errors += 1
    for module in sorted(edges):
        for target, why in sorted(edges[module].items()):
            if rank(layer_of(module)) is not None and \
               rank(layer_of(target)) is not None and \
               rank(layer_of(target)) > rank(layer_of(module)):
                print("layers: %s %s, of the higher layer %s" %
                      (module, why, layer_of(target)), file=out)
                errors += 1
    for path in cycles(edges):
        print("layers: cycle: " + " -> ".join(
            "%s (%s)" % (path[i], edges[path[i]][path[i + 1]])
            for i in range(len(path) - 1)) + " -> " + path[-1], file=out)
        errors += 1
    count = sum(len(targets) for targets in edges.values())
    print("layers: %d modules, %d dependencies%s, %d errors" %
          (len(edges), count, " (includes and calls)" if objects else
           " (includes)", errors), file=out)
    return errors == 0


def self_test():
    """A tree with upward includes (one from the UCM hooks, the lowest
    layer) and a cycle inside one layer fails, naming them; the same tree
    without them passes, includes of the hooks from above and between two
    folders of one layer included"""
    with tempfile.TemporaryDirectory() as top:
        files = {
            "ucm_hooks/span_h.h": "",
            "ucm_hooks/span_h.c": '#include "span_h.h"\n'
                                  '#include "base/span_a.h"\n',
            "uct/base/span_a.h": "",
            "uct/base/span_b.h": '#include "span_c.h"\n',
            "uct/base/span_c.h": '#include "span_b.h"\n',
            "uct/key/span_k.h": '#include "base/span_a.h"\n',
            "uct/md/span_m.c": '#include "ucm_hooks/span_h.h"\n',
            "uct/vmm/span_v.c": '#include "copy/span_x.h"\n',
            "uct/copy/span_x.h": "",
            "uct/base/span_up.c": '#include "key/span_k.h"\n',
        }
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(top, name)),
                        exist_ok=True)
            with open(os.path.join(top, name), "w") as f:
                f.write(text)
        report = tempfile.TemporaryFile("w+")
        bad_ok = check(top, None, report)
        report.seek(0)
        text = report.read()
        for name in ("uct/base/span_b.h", "uct/base/span_c.h",
                     "uct/base/span_up.c"):
            os.remove(os.path.join(top, name))
        with open(os.path.join(top, "ucm_hooks/span_h.c"), "w") as f:
            f.write('#include "span_h.h"\n')
        good = tempfile.TemporaryFile("w+")
        good_ok = check(top, None, good)
        good.seek(0)
        good_text = good.read()
    expected = ["uct/base/span_up includes key/span_k.h, of the higher "
                "layer uct/key",
                "ucm_hooks/span_h includes base/span_a.h, of the higher "
                "layer uct/base",
                "cycle: uct/base/span_b (includes span_c.h) -> "
                "uct/base/span_c (includes span_b.h) -> uct/base/span_b"]
    missing = [e for e in expected if e not in text]
    if "3 dependencies" not in good_text:
        missing.append("good tree: " + good_text)
    if bad_ok or missing or not good_ok:
        print("layers self-test failed: bad tree %s, good tree %s, not "
              "reported: %s\n%s" % ("passed" if bad_ok else "failed",
              "passed" if good_ok else "failed", missing, text))
        return False
    print("layers self-test: upward includes and a cycle are reported")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
    parser.add_argument("--objects", help="build directory of src: "
                        "add what the objects call")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return 0 if self_test() else 1
    return 0 if check(os.path.normpath(args.src), args.objects) else 1


if __name__ == "__main__":
    sys.exit(main())
