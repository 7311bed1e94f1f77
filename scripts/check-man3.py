#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One man page per exported function, and each page true to the header.

    scripts/check-man3.py        (what make check-man3 runs, from the top of the tree)

The exported functions are those the linker version script lists
(user/libringpipe.map, as make check-map checks them against the shared
library). Every one of them has a page Documentation/man/NAME.3, whose NAME
section lists it; a page may be a ".so" link to the page of its family. Every
page of a function (every section 3 page but the overview, libringpipe.3)
documents exported functions only, and its SYNOPSIS gives each one's prototype
as the header it includes declares it (whitespace aside), and that header.
The overview's SEE ALSO names every function's page, and each page's .TH
names its function.

Exits 1, saying what is wrong, when any of that fails.
"""
import os
import re
import sys

MAP = 'user/libringpipe.map'
MANDIR = 'Documentation/man'
INCDIR = 'include'
OVERVIEW = 'libringpipe.3'

problems = []


def problem(msg):
    problems.append(msg)


def exported_functions(path):
    # the same reading as scripts/check-exports.sh
    with open(path) as f:
        return sorted(set(re.findall(r'^\s*(rp_[a-z0-9_]*);', f.read(), re.M)))


def normalize(proto):
    """A prototype with its whitespace made canonical: runs become one
    space, and none is left beside ( ) , * ; or at either end."""
    proto = re.sub(r'\s+', ' ', proto).strip()
    return re.sub(r' ?([(),*;]) ?', r'\1', proto)


def header_declarations(incdir):
    """{function: (header as included, normalized prototype)} for every
    RP_API declaration of the installed headers."""
    decls = {}
    top = os.path.join(incdir, 'ringpipe')
    for name in sorted(os.listdir(top)):
        if not name.endswith('.h'):
            continue
        with open(os.path.join(top, name)) as f:
            text = f.read()
        text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
        text = re.sub(r'//[^\n]*', ' ', text)
        text = re.sub(r'^\s*#[^\n]*(\\\n[^\n]*)*', ' ', text, flags=re.M)
        for stmt in re.split(r'[;{}]', text):
            if not re.search(r'\bRP_API\b', stmt):
                continue
            m = re.search(r'\b(rp_[a-z0-9_]+)\s*\(', stmt)
            if not m:
                continue
            proto = re.sub(r'\bRP_API\b', ' ', stmt)
            decls[m.group(1)] = ('ringpipe/' + name, normalize(proto + ';'))
    return decls


def troff_text(s):
    """What a line of troff prints, for the escapes the pages use."""
    s = re.sub(r'\\f(\(..|\[[^]]*\]|.)', '', s)
    for esc, ch in (('\\-', '-'), ('\\(dq', '"'), ('\\(aq', "'"), ('\\&', ''),
                    ('\\ ', ' '), ('\\e', '\\')):
        s = s.replace(esc, ch)
    return s


def macro_args(rest):
    """The arguments of a macro line, with troff's quoting ("" inside
    quotes is a quote)."""
    args, i = [], 0
    while i < len(rest):
        if rest[i] in ' \t':
            i += 1
            continue
        if rest[i] == '"':
            j, arg = i + 1, ''
            while j < len(rest):
                if rest[j] == '"' and rest[j + 1:j + 2] == '"':
                    arg, j = arg + '"', j + 2
                elif rest[j] == '"':
                    j += 1
                    break
                else:
                    arg, j = arg + rest[j], j + 1
            args.append(arg)
            i = j
        else:
            j = i
            while j < len(rest) and rest[j] not in ' \t':
                j += 1
            args.append(rest[i:j])
            i = j
    return args


FONT_ALTERNATING = {'BI', 'BR', 'IB', 'IR', 'RB', 'RI'}


def rendered_lines(lines):
    """Each line of a section as text, None for a macro that breaks the
    text (.PP, .nf, .fi, ...)."""
    out = []
    for line in lines:
        if line.startswith('.\\"'):
            continue
        if not line.startswith('.'):
            out.append(troff_text(line))
            continue
        macro, _, rest = line[1:].partition(' ')
        args = macro_args(rest)
        if macro in ('B', 'I'):
            out.append(troff_text(' '.join(args)))
        elif macro in FONT_ALTERNATING:
            out.append(troff_text(''.join(args)))
        else:
            out.append(None)
    return out


def sections(path):
    with open(path) as f:
        lines = f.read().split('\n')
    secs, name = {}, None
    for line in lines:
        m = re.match(r'\.SH\s+"?([^"]*)"?\s*$', line)
        if m:
            name = m.group(1)
            secs[name] = []
        elif name:
            secs[name].append(line)
    return lines, secs


def page_names(secs):
    text = ' '.join(l for l in rendered_lines(secs.get('NAME', [])) if l)
    names, sep, _ = text.partition(' - ')
    return [n.strip() for n in names.split(',') if n.strip()] if sep else []


def synopsis(secs):
    """The headers the SYNOPSIS includes, and its prototypes by function."""
    includes, protos, stmt = [], {}, ''
    for text in rendered_lines(secs.get('SYNOPSIS', [])):
        if text is None:
            stmt = ''
            continue
        m = re.match(r'\s*#include\s*<([^>]+)>', text)
        if m:
            includes.append(m.group(1))
            stmt = ''
            continue
        stmt += ' ' + text
        if stmt.rstrip().endswith(';'):
            m = re.search(r'\b(rp_[a-z0-9_]+)\s*\(', stmt)
            if m:
                protos[m.group(1)] = normalize(stmt)
            stmt = ''
    return includes, protos


def main():
    exported = exported_functions(MAP)
    decls = header_declarations(INCDIR)
    pages = sorted(p for p in os.listdir(MANDIR) if p.endswith('.3') and p != OVERVIEW)
    full = {}                           # page -> the functions its NAME lists

    for page in pages:
        path = os.path.join(MANDIR, page)
        stem = page[:-2]
        lines, secs = sections(path)
        first = next((l for l in lines if l and not l.startswith('.\\"')), '')
        if first.startswith('.so '):
            target = os.path.basename(first.split()[1])
            if target == page or not os.path.exists(os.path.join(MANDIR, target)):
                problem(f'{path}: .so {first.split()[1]}: no such page beside it')
            continue
        th = re.match(r'\.TH\s+(\S+)\s+3\b', first)
        if not th or th.group(1) != stem.upper():
            problem(f'{path}: its .TH line should name {stem.upper()}, section 3: {first}')
        names = page_names(secs)
        if not names:
            problem(f'{path}: no NAME section of the form "function, ... \\- what it does"')
        full[page] = names
        includes, protos = synopsis(secs)
        for fn in names:
            if fn not in exported:
                problem(f'{path}: documents {fn}(), which {MAP} does not export')
                continue
            if not os.path.exists(os.path.join(MANDIR, fn + '.3')):
                problem(f'{path}: lists {fn}() but there is no {MANDIR}/{fn}.3 '
                        f'(a page of its own or a .so link to {page})')
            if fn not in decls:
                problem(f'{fn}() is exported but no header of {INCDIR}/ringpipe declares '
                        f'it RP_API')
                continue
            header, want = decls[fn]
            if fn not in protos:
                problem(f'{path}: SYNOPSIS has no prototype of {fn}(); the header says\n'
                        f'    {want}')
            elif protos[fn] != want:
                problem(f'{path}: SYNOPSIS prototype of {fn}() differs from <{header}>\n'
                        f'    page:   {protos[fn]}\n    header: {want}')
            if header not in includes:
                problem(f'{path}: SYNOPSIS does not #include <{header}>, which declares {fn}()')
        if stem not in names:
            problem(f'{path}: its NAME section does not list {stem}')

    for page in pages:                  # .so links: the target must list the link's name
        path = os.path.join(MANDIR, page)
        with open(path) as f:
            first = f.readline()
        if first.startswith('.so '):
            target = os.path.basename(first.split()[1])
            if target in full and page[:-2] not in full[target]:
                problem(f'{path}: links to {target}, whose NAME does not list {page[:-2]}')

    for fn in exported:
        if fn + '.3' not in pages:
            problem(f'{fn}() is exported ({MAP}) but has no page {MANDIR}/{fn}.3')
    for page in pages:
        if page[:-2] not in exported:
            problem(f'{MANDIR}/{page}: {page[:-2]} is not an exported function '
                    f'(only {MAP} decides what is)')

    _, osecs = sections(os.path.join(MANDIR, OVERVIEW))
    see_also = ' '.join(l for l in rendered_lines(osecs.get('SEE ALSO', [])) if l)
    for fn in exported:
        if not re.search(r'\b' + fn + r' ?\(3\)', see_also):
            problem(f'{MANDIR}/{OVERVIEW}: SEE ALSO does not name {fn}(3)')

    if problems:
        for p in problems:
            print('check-man3: ' + p, file=sys.stderr)
        return 1
    print(f'  MAN3     {len(exported)} exported functions, {len(pages)} pages, '
          f'prototypes as the headers declare them')
    return 0


if __name__ == '__main__':
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    sys.exit(main())
