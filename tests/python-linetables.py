#!/usr/bin/env python3
"""python-linetables.py - write, for test-python, the location tables of
every code object (functions, nested ones, comprehensions) of a few
standard-library modules, with the line of each instruction as the
interpreter itself reports it (code.co_lines()).

Output, one code object a line: FIRSTLINENO HEX_LINETABLE START:END:LINE ...
(START/END in bytes of instructions, LINE 0 where co_lines() says None).
Run by the build python; with a version other than 3.11 to 3.13 (one
format) the only line is "skip REASON"."""
import sys

if not (3, 11) <= sys.version_info[:2] <= (3, 13):
    print('skip the build python is %d.%d, the table format checked is that of 3.11 to 3.13'
          % sys.version_info[:2])
    sys.exit(0)

import argparse  # noqa: E402  (big modules with every kind of statement)
import asyncio.base_events  # noqa: E402
import json.decoder  # noqa: E402
import typing  # noqa: E402


def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, 'co_lines'):
            yield from codes(c)


def main():
    out = open(sys.argv[1], 'w') if len(sys.argv) > 1 else sys.stdout
    for mod in (argparse, asyncio.base_events, json.decoder, typing):
        with open(mod.__file__) as f:
            top = compile(f.read(), mod.__file__, 'exec')
        for co in codes(top):
            ranges = ' '.join('%d:%d:%d' % (s, e, line or 0) for s, e, line in co.co_lines())
            out.write('%d %s %s\n' % (co.co_firstlineno, co.co_linetable.hex() or '-', ranges))


main()
