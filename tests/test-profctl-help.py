#!/usr/bin/env python3
"""profctl's help and its man page cannot drift: `profctl CMD --help` is
made from profctl(1) at build time (client/man2help.py), and this test
checks the other direction: every command that profctl's parser knows
(client/profctl.c's command table, whose .options name the long
options client/cmdline.c parses) has its entry in the man page's
COMMANDS and its line in SYNOPSIS, every entry and line there is a
command, and every long option a command accepts is described in its
entry (or in OPTIONS, for the common ones).

    test-profctl-help.py client/profctl.c docs/man/profctl.1 PROFCTL"""
import re
import subprocess
import sys

problems = []


def check(ok, what):
    """Note @what as a problem unless @ok; the test fails at the end if any were noted."""
    if not ok:
        problems.append(what)


def c_tables(src):
    """{command: [long options]} from the command table (.options: the long names)."""
    table = src[src.index('static const struct command commands[] = {'):]
    table = table[:table.index('\n};')]
    commands = {}
    for m in re.finditer(r'\.name = "([a-z-]+)"(.*?)(?=\.name = "|\Z)', table, re.S):
        lo = re.search(r'\.options = "([a-z0-9 -]*)"', m.group(2))
        commands[m.group(1)] = lo.group(1).split() if lo else []
    return commands


def man_sections(text):
    """{command: roff of its COMMANDS entry}, and the roff of OPTIONS."""
    sections = re.split(r'^\.SH ', text, flags=re.M)
    by_name = {s.split('\n', 1)[0].strip().strip('"'): s for s in sections}
    commands, depth, cur = {}, 0, None
    lines = by_name['COMMANDS'].split('\n')[1:]
    for i, line in enumerate(lines):
        if line.startswith('.RS'):
            depth += 1
        elif line.startswith('.RE'):
            depth -= 1
        elif line.startswith('.TP') and depth == 0 and i + 1 < len(lines):
            tag = re.sub(r'\\f[BIRP]|"', '', lines[i + 1]).split()
            cur = tag[1] if len(tag) > 1 else None
            if cur:
                commands[cur] = ''
        if cur:
            commands[cur] += line + '\n'
    return commands, by_name.get('OPTIONS', ''), by_name['SYNOPSIS']


def main():
    src = open(sys.argv[1]).read()
    man = open(sys.argv[2]).read()
    profctl = sys.argv[3]
    c_cmds = c_tables(src)
    m_cmds, m_common, m_synopsis = man_sections(man)
    synopsis = re.findall(r'^\.B profctl ([a-z-]+)$', m_synopsis, re.M)
    check(len(c_cmds) >= 15, 'the command table was read (%d commands)' % len(c_cmds))
    for name in c_cmds:
        check(name in m_cmds, 'command %s has no entry in profctl(1) COMMANDS' % name)
        check(name in synopsis, 'command %s has no line in profctl(1) SYNOPSIS' % name)
    for name in list(m_cmds) + synopsis:
        check(name in c_cmds, 'profctl(1) documents a command profctl does not have: %s' % name)
    common = ['socket', 'json', 'help']  # options__build() adds them to every command
    for name, opts in c_cmds.items():
        entry = m_cmds.get(name, '')
        for opt in opts:
            roff = '\\-\\-' + opt.replace('-', '\\-')
            check(roff in entry or (opt in common and roff in m_common),
                  'profctl %s --%s is not described in its profctl(1) entry' % (name, opt))
        # and what --help prints is that entry
        r = subprocess.run([profctl, name, '--help'], capture_output=True, text=True)
        check(r.returncode == 0 and r.stdout.startswith('Usage: profctl ' + name),
              'profctl %s --help: %r' % (name, r.stdout[:80]))
        for opt in opts:
            if opt not in common:
                check('--' + opt in r.stdout, 'profctl %s --help does not show --%s' % (name, opt))
    for p in problems:
        print('FAIL: ' + p)
    print('%d commands, %d failures' % (len(c_cmds), len(problems)))
    sys.exit(1 if problems else 0)


main()
