#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Module dependency check: no cycles among object files, and no call or
include across the library's boundary.

Usage: check-deps.py [--private DIR:SRCDIR] [--includes SRCDIR:FOLDERS:SHARED]...
                     GROUP:OBJ... [GROUP:OBJ...]

Each GROUP argument names a group (the library, the internal archive, the
tool, the demo) and the object files that form it, separated by commas. An
object depends on another when it uses a symbol the other defines (from
`nm`). A group passes when the graph of its objects has no cycle; a cycle is
printed with the symbol behind each edge, so the fix is where it points.
The groups are layers in the order given: an object may use what a group
before its own defines, never what a later one does (the library calls
nothing of the internal archive's).

--private DIR:SRCDIR: no file below SRCDIR includes a header of DIR (the
library's sources and none of internal/'s headers).

--includes SRCDIR:FOLDERS:SHARED: every quoted include of a file below
SRCDIR (the tool, the demo) is a public header (include/), an internal one
(internal/), a BPF program's format header or skeleton, a header of its own
folder, of a folder of SRCDIR listed before its own in FOLDERS (commas; a
file directly in SRCDIR may include any), or a library header in SHARED
(commas, as "util/hmap.h"), by that path: never a library header by bare
name, and never one the library keeps to itself. More fields after SHARED
name further folders whose headers it may include by path (the demo: the
tool's).
"""
import os
import re
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
        if p in ("user", "tools", "internal"):
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


def layers(groups):
    """Uses of a later group's symbols by an earlier group's objects."""
    bad = 0
    defined = []
    for group, objs in groups:
        d = set()
        for o in objs:
            d |= symbols(o)[0]
        defined.append((group, d))
    for i, (group, objs) in enumerate(groups):
        for o in objs:
            used = symbols(o)[1]
            for later, d in defined[i + 1:]:
                for s in sorted(used & d):
                    print(f"check-deps: {name(o)} ({group}) uses {s}, which {later} defines: "
                          f"{group} comes before {later} and calls nothing of it",
                          file=sys.stderr)
                    bad = 1
    if not bad:
        print(f"  DEPS     {' < '.join(g for g, _ in groups)}: no call against the order",
              flush=True)
    return bad


INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def private_headers(hdr_dir, src_dir):
    """Files below src_dir that include a header of hdr_dir, by any path."""
    names = {f for f in os.listdir(hdr_dir) if f.endswith(".h")}
    bad = 0
    for root, _, files in os.walk(src_dir):
        for f in sorted(files):
            if not f.endswith((".c", ".h", ".inc")):
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                for inc in INCLUDE.findall(fh.read()):
                    if os.path.basename(inc) in names:
                        print(f"check-deps: {path} includes {inc}, a header of {hdr_dir}/, "
                              f"which {src_dir}/ never includes", file=sys.stderr)
                        bad = 1
    if not bad:
        print(f"  DEPS     {src_dir}/ includes no header of {hdr_dir}/", flush=True)
    return bad


def tool_includes(src_dir, folders, shared, extra_roots):
    """The includes of the files below src_dir against the rules above."""
    order = {f: i for i, f in enumerate(folders)}
    library = {}
    for root, _, files in os.walk("user"):
        for f in files:
            if f.endswith((".h", ".inc")):
                library.setdefault(f, os.path.relpath(os.path.join(root, f), "user"))
    bad = 0
    n = 0

    def fail(path, inc, why):
        nonlocal bad
        print(f"check-deps: {path} includes \"{inc}\": {why}", file=sys.stderr)
        bad = 1

    for root, _, files in os.walk(src_dir):
        here = os.path.relpath(root, src_dir)
        top = here.split(os.sep)[0] if here != "." else None
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
                n += 1
                head = inc.split("/")[0]
                if os.path.exists(os.path.join(root, inc)) and "/" not in inc:
                    continue                                # its own folder
                if head in order and os.path.exists(os.path.join(src_dir, inc)):
                    if top is not None and top in order and order[head] > order[top]:
                        fail(path, inc, f"{head}/ comes after {top}/ in the tool's layers "
                                        f"({' < '.join(folders)})")
                    continue
                if any(os.path.exists(os.path.join(r, inc)) for r in extra_roots) \
                        or inc.endswith(".skel.h"):
                    continue                                # public, internal, BPF
                if os.path.exists(os.path.join("user", inc)):
                    if inc not in shared:
                        fail(path, inc, "a header the library keeps to itself (not in the "
                                        "list of headers shared with the tools)")
                    continue
                if os.path.basename(inc) in library:
                    fail(path, inc, f"a library header by bare name: include "
                                    f"\"{library[os.path.basename(inc)]}\"")
                    continue
                fail(path, inc, "no such header in the places the tools may include from")
    if not bad:
        print(f"  DEPS     {src_dir}/: {n} includes, each public, internal, shared by path "
              f"or of a folder at or below its own", flush=True)
    return bad


def main(argv):
    bad = 0
    groups = []
    while argv and argv[0] in ("--private", "--includes"):
        if argv[0] == "--private":
            hdr_dir, _, src_dir = argv[1].partition(":")
            bad |= private_headers(hdr_dir, src_dir)
        else:
            src_dir, folders, shared, *more = argv[1].split(":")
            bad |= tool_includes(src_dir, [f for f in folders.split(",") if f],
                                 {h for h in shared.split(",") if h},
                                 ["include", "internal", "bpf"] + more)
        argv = argv[2:]
    for arg in argv:
        group, _, objs = arg.partition(":")
        objs = [o for o in objs.split(",") if o]
        groups.append((group, objs))
        # the objects, then the folders they live in (the modules)
        for what, key in (("objects", lambda o: o), ("folders", lambda o: o.rsplit("/", 1)[0])):
            if what == "folders" and len({key(o) for o in objs}) < 2:
                continue
            bad |= report(group, what, *cycles(objs, key))
    bad |= layers(groups)
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
