#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Module dependency check: no cycles among object files.

Usage: check-deps.py GROUP:OBJ... [GROUP:OBJ...]

Each argument names a group (the library, the tool, the demo) and the object
files that form it, separated by commas. An object depends on another when it
uses a symbol the other defines (from `nm`). A group passes when the graph of
its objects has no cycle; a cycle is printed with the symbol behind each edge,
so the fix is where it points.
"""
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True,
                         text=True, check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if len(l.split()) >= 3}
    out = subprocess.run(["nm", "-u", obj], capture_output=True, text=True,
                         check=True).stdout
    used = {l.split()[-1] for l in out.splitlines() if l.strip()}
    return defined, used


def name(obj):
    parts = obj.split("/")
    # the path below the build directory's first level names the module
    for i, p in enumerate(parts):
        if p in ("user", "tools"):
            return "/".join(parts[i + 1:])
    return obj


def cycles(objs, key=lambda o: o):
    syms = {}
    for o in objs:
        d, u = symbols(o)
        k = key(o)
        od, ou = syms.setdefault(k, (set(), set()))
        od |= d
        ou |= u
    objs = list(syms)
    owner = {}
    for o, (d, _) in syms.items():
        for s in d:
            owner.setdefault(s, o)
    edges = {o: {} for o in objs}
    for o, (_, u) in syms.items():
        for s in sorted(u):
            t = owner.get(s)
            if t and t != o:
                edges[o].setdefault(t, s)
    # Tarjan's strongly connected components, iteratively
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = n[0]; n[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        sccs.append(sorted(comp))

    for v in sorted(objs):
        if v not in index:
            visit(v)
    return sccs, edges


def main(argv):
    bad = 0
    for arg in argv:
        group, _, objs = arg.partition(":")
        objs = [o for o in objs.split(",") if o]
        # the objects, then the folders they live in (the modules)
        for what, key in (("objects", lambda o: o), ("folders", lambda o: o.rsplit("/", 1)[0])):
            bad |= report(group, what, *cycles(objs, key))
    return bad


def report(group, what, sccs, edges):
        if not sccs:
            print(f"  DEPS     {group}: {len(edges)} {what}, no cycle", flush=True)
            return 0
        for comp in sccs:
            print(f"check-deps: {group}: a dependency cycle through {len(comp)} {what}:",
                  file=sys.stderr)
            members = set(comp)
            for o in comp:
                for t, s in sorted(edges[o].items()):
                    if t in members:
                        print(f"    {name(o)} -> {name(t)}   ({s})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
