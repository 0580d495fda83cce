#!/usr/bin/env python3
"""man2help.py - profctl's per-command help, made at build time from the
COMMANDS section of its man page (docs/man/profctl.1), so that the two
cannot drift.

    man2help.py profctl.1 OUTPUT.h

Each top-level .TP of COMMANDS whose tag starts with a command name is one
command: its text, and its options (the nested .TP list between .RS and
.RE) as "  TAG\\n      description" blocks, filled to 78 columns. Only the
subset of man(7) the page uses is understood: .TP .IP .PP .RS .RE .EX .EE
.nf .fi .br
and the font macros (.B .I .BI .IB .BR .RB .IR .RI), with the escapes
\\- \\f[BIRP] \\[uXXXX] \\(en \\(-> \\(dq \\(S2 \\& \\e. Anything else fails the
build, naming the line, so a new macro gets handled rather than printed
raw."""
import re
import sys
import textwrap

WIDTH = 78

ESCAPES = {'\\-': '-', '\\`': '`', '\\(en': '-', '\\(->': '->', '\\(dq': '"', '\\(S2': '2',
           '\\&': '', '\\e': '\\', '\\ ': ' '}


def unescape(s, lineno):
    s = re.sub(r'\\f[BIRP]', '', s)
    s = re.sub(r'\\\[u([0-9A-Fa-f]{4})\]', lambda m: chr(int(m.group(1), 16)), s)
    for k, v in ESCAPES.items():
        s = s.replace(k, v)
    if '\\' in s:
        sys.exit('man2help: line %d: unknown escape in %r' % (lineno, s))
    return s


def words(line):
    """The arguments of a macro line, as groff splits them (double quotes group)."""
    return [m.group(1) if m.group(1) is not None else m.group(2)
            for m in re.finditer(r'"((?:[^"]|"")*)"|(\S+)', line)]


def text_of(line, lineno):
    """One input line as plain text: a text line, or a font macro's joined arguments."""
    if not line.startswith('.'):
        return unescape(line, lineno)
    macro, _, rest = line.partition(' ')
    if macro in ('.B', '.I'):
        return unescape(rest.strip().strip('"'), lineno)
    if macro in ('.BI', '.IB', '.BR', '.RB', '.IR', '.RI'):
        # an escaped space stays inside its argument
        return unescape(''.join(words(rest.replace('\\ ', '\0'))), lineno).replace('\0', ' ')
    return None


def fill(para, indent):
    """@para's lines, filled to WIDTH: option names and words are never cut."""
    return textwrap.wrap(para, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def render(lines):
    """(command name, help text) for each command of the COMMANDS section."""
    out = []
    depth = 0
    cur = None          # [name, blocks]; a block is (indent, tag or None, [text])
    expect_tag = False
    in_example = False
    for lineno, line in lines:
        if in_example:
            if line.startswith('.EE') or line.startswith('.fi'):
                in_example = False
            else:
                cur[1].append((6 if depth else 2, None, [unescape(line, lineno)], True))
            continue
        if line.startswith('.\\"') or line == '.':
            continue
        macro = line.split(' ')[0] if line.startswith('.') else None
        if macro == '.TP':
            expect_tag = True
            continue
        if macro == '.RS':
            depth += 1
            continue
        if macro == '.RE':
            depth -= 1
            continue
        if macro in ('.PP', '.IP'):
            if cur:
                cur[1].append((6 if depth else 2, None, [], False))
            continue
        if macro in ('.EX', '.nf'):
            in_example = True
            continue
        if macro == '.br':
            if cur:
                indent = cur[1][-1][0]
                cur[1].append((indent, None, [], False))
            continue
        text = text_of(line, lineno)
        if text is None:
            sys.exit('man2help: line %d: unknown macro %r' % (lineno, line))
        if expect_tag:
            expect_tag = False
            if depth == 0:
                name = text.split(' ')[0]
                cur = [name, []]
                out.append(cur)
                cur[1].append((2, None, [], False))
            elif cur:
                cur[1].append((2, text, [], False))
            continue
        if cur:
            indent, tag, body, verbatim = cur[1][-1]
            if verbatim:
                cur[1].append((indent, None, [text], False))
            else:
                body.append(text)
    helps = []
    for name, blocks in out:
        parts = []
        for indent, tag, body, verbatim in blocks:
            if verbatim:
                parts.append(' ' * indent + ' '.join(body))
                continue
            para = ' '.join(t for t in body if t).strip()
            if tag is not None:
                parts.append('')
                parts.append('  ' + tag)
                if para:
                    parts.extend(fill(para, ' ' * 6))
            elif para:
                parts.append('')
                parts.extend(fill(para, ''))
        helps.append((name, '\n'.join(parts).strip('\n') + '\n'))
    return helps


def c_string(s):
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n"\n\t"') + '"'


def main():
    src, dst = sys.argv[1], sys.argv[2]
    lines = open(src, encoding='utf-8').read().split('\n')
    section = []
    inside = False
    for i, line in enumerate(lines, 1):
        if line.startswith('.SH'):
            inside = line.split(None, 1)[1].strip('"') == 'COMMANDS'
            continue
        if inside:
            section.append((i, line))
    helps = render(section)
    if not helps:
        sys.exit('man2help: no COMMANDS section in ' + src)
    with open(dst, 'w', encoding='utf-8') as f:
        f.write('/* Generated from docs/man/profctl.1 by client/man2help.py: do not edit. */\n')
        f.write('struct command_help {\n\tconst char *name;\n\tconst char *text;\n};\n\n')
        f.write('static const struct command_help command_helps[] = {\n')
        for name, text in helps:
            f.write('\t{ %s,\n\t  %s },\n' % (c_string(name), c_string(text)))
        f.write('};\n')


if __name__ == '__main__':
    main()
