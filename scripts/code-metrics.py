#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Size figures for the production C code: lines per file and the longest
functions. Used to track the shape of the tree (docs/ARCHITECTURE.md).

usage: scripts/code-metrics.py [--files N] [--functions N] [--over LINES] [DIR...]
"""
import argparse
import os
import re
import sys

DEF = re.compile(r'^[A-Za-z_][^;=]*\b([A-Za-z_][A-Za-z0-9_]*)\s*\(')


def functions(path):
    """Yield (name, first line, length) of each function defined at column 0
    whose body closes with a '}' at column 0 (the project's style)."""
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    i = 0
    while i < len(lines):
        m = DEF.match(lines[i])
        if m and not lines[i].startswith(('typedef', 'struct', 'enum', 'union', 'static const', 'const')):
            # the opening brace is on this line or a following continuation line
            j = i
            while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith('{'):
                k = j + 1
                while k < len(lines) and lines[k] != '}':
                    k += 1
                if k < len(lines):
                    yield m.group(1), i + 1, k - i + 1
                    i = k + 1
                    continue
        i += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--files', type=int, default=15, help='largest files to list')
    ap.add_argument('--functions', type=int, default=25, help='longest functions to list')
    ap.add_argument('--over', type=int, default=80, help='count functions longer than this')
    ap.add_argument('dirs', nargs='*', default=['common', 'grpc', 'daemons', 'tools'])
    a = ap.parse_args()
    sizes, funcs = [], []
    for d in a.dirs:
        for root, _, names in os.walk(d):
            if '/proto' in root:
                continue
            for n in names:
                if not n.endswith(('.c', '.h')):
                    continue
                p = os.path.join(root, n)
                with open(p, encoding='utf-8', errors='replace') as f:
                    sizes.append((sum(1 for _ in f), p))
                if n.endswith('.c'):
                    funcs += [(ln, name, p, first) for name, first, ln in functions(p)]
    sizes.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f'files: {len(sizes)}, lines: {sum(s for s, _ in sizes)}, '
          f'over 800: {sum(1 for s, _ in sizes if s > 800)}, over 1000: {sum(1 for s, _ in sizes if s > 1000)}')
    for s, p in sizes[:a.files]:
        print(f'  {s:6d} {p}')
    print(f'functions: {len(funcs)}, over {a.over} lines: {sum(1 for f in funcs if f[0] > a.over)}')
    for ln, name, p, first in funcs[:a.functions]:
        print(f'  {ln:6d} {name} ({p}:{first})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
