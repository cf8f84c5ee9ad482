#!/usr/bin/env python3
"""test_layers.py: the layers of src/ depend on each other one way only, as built.

Each folder of src/ is a layer with a rank (src/README.md). A file may use what files of its own
layer or of lower-ranked layers define, never a higher one; server and tools share a rank and
use neither each other. Checked twice:
  - on the compiled objects: file A depends on file B when A's undefined symbols include one that
    B defines (nm), which also catches calls through declarations a file did not include;
  - on the sources' #include "layer/file.h" lines (headers never include each other in a
    circle); besides, outside src/cpu/ (and the CLI, whose
    bench drives the kernels directly) the CPU backend is reached through cpu/compute.h only,
    the Vulkan backend (src/vulkan/, the same rank as cpu: neither uses the other) through
    vulkan/backend.h only, and nothing outside src/cli/ includes a CLI header.
No two files may depend on each other through any chain (no circles, within a layer too).
The checker is first run on a made-up graph with each kind of fault, so a broken checker fails.
"""
import collections
import glob
import os
import re
import subprocess
import sys

RANK = {"io": 0, "formats": 1, "cpu": 2, "vulkan": 2, "model": 3, "vision": 3, "text": 4, "sample": 5, "dspark": 6,
        "generate": 7, "server": 8, "tools": 8, "cli": 9}


def layer_of(name):
    return name.split("/", 1)[0]


def allowed(a, b):
    la, lb = layer_of(a), layer_of(b)
    if la == lb:
        return True
    return RANK[la] > RANK[lb]


def cycles(graph):
    """Strongly connected components with more than one file (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    for root in list(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check_graph(graph, what):
    """Faults of a dependency graph {file: {file}} as readable lines."""
    faults = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if not allowed(a, b):
                faults.append(f"{what}: {a} -> {b} goes up or across ({layer_of(a)} may not use {layer_of(b)})")
    for comp in cycles(graph):
        faults.append(f"{what}: circle between {', '.join(comp)}")
    return faults


def self_test():
    bad = {"io/a": {"model/b"}, "model/b": set()}
    sideways = {"vulkan/a": {"cpu/b"}, "cpu/b": set()}
    assert check_graph(sideways, "t"), "vulkan -> cpu was not seen"
    circle = {"model/a": {"model/b"}, "model/b": {"model/c"}, "model/c": {"model/a"}}
    across = {"server/a": {"tools/b"}, "tools/b": set()}
    good = {"cli/a": {"generate/b", "io/c"}, "generate/b": {"model/d"}, "model/d": {"io/c"}, "io/c": set()}
    assert check_graph(bad, "t"), "an upward edge was not seen"
    assert len(check_graph(circle, "t")) == 1, "a circle was not seen"
    assert check_graph(across, "t"), "server -> tools was not seen"
    assert not check_graph(good, "t"), "a clean graph was flagged"


def symbol_graph(build, src):
    objs = glob.glob(os.path.join(build, "CMakeFiles", "bitspark_obj.dir", "src", "*", "*.c.o"))
    objs += glob.glob(os.path.join(build, "CMakeFiles", "bitspark.dir", "src", "cli", "*.c.o"))
    # objects of sources that still exist (a build tree keeps those of moved files)
    objs = [o for o in objs if os.path.exists(os.path.join(src, *o.split(os.sep)[-2:])[: -len(".o")])]
    defs, undef = {}, {}
    for o in objs:
        name = "/".join(o.split(os.sep)[-2:])[: -len(".c.o")]
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        u = set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRCV":
                defs[p[2]] = name
            elif len(p) == 2 and p[0] == "U":
                u.add(p[1])
        undef[name] = u
    graph = collections.defaultdict(set)
    for n, u in undef.items():
        graph[n]
        for s in u:
            if s in defs and defs[s] != n:
                graph[n].add(defs[s])
    return graph, len(objs)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([a-z0-9_]+)\.h"', re.M)


def include_graph(src):
    graph, faults = collections.defaultdict(set), []
    for path in glob.glob(os.path.join(src, "*", "*.[ch]")):
        rel = os.path.relpath(path, src)
        layer = rel.split(os.sep)[0]
        name = rel
        graph[name]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for inc_layer, inc_file in INCLUDE.findall(text):
            if inc_layer not in RANK:
                faults.append(f"includes: {rel} includes {inc_layer}/{inc_file}.h, not a layer")
                continue
            if inc_layer == "cli" and layer != "cli":
                faults.append(f"includes: {rel} includes a CLI header ({inc_file}.h)")
            if inc_layer == "cpu" and layer not in ("cpu", "cli") and inc_file != "compute":
                faults.append(f"includes: {rel} reaches into the CPU backend (cpu/{inc_file}.h, not cpu/compute.h)")
            if inc_layer == "vulkan" and layer != "vulkan" and inc_file != "backend":
                faults.append(f"includes: {rel} reaches into the Vulkan backend (vulkan/{inc_file}.h, not vulkan/backend.h)")
            graph[name].add(f"{inc_layer}/{inc_file}.h")
    return graph, faults


def main():
    self_test()
    build, src = os.environ.get("BS_BUILD"), os.path.join(os.environ.get("BS_SRC", "."), "src")
    if not build:
        print("BS_BUILD is not set (the build directory)")
        return 1
    faults = []
    graph, n_obj = symbol_graph(build, src)
    n_edges = sum(len(v) for v in graph.values())
    if n_obj < 80 or n_edges < 300:
        faults.append(f"symbols: only {n_obj} objects / {n_edges} edges found under {build}: nothing was checked")
    faults += check_graph(graph, "symbols")
    inc, inc_faults = include_graph(src)
    faults += inc_faults + check_graph(inc, "includes")
    loose = [f for f in glob.glob(os.path.join(src, "*.[ch]"))]
    if loose:
        faults.append(f"files directly in src/: {', '.join(sorted(map(os.path.basename, loose)))}")
    for f in faults:
        print("FAIL", f)
    layers = sorted({layer_of(n) for n in graph})
    print(f"{n_obj} objects, {n_edges} symbol edges, {sum(len(v) for v in inc.values())} include edges "
          f"over {len(layers)} layers ({' '.join(layers)}): {len(faults)} faults")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
