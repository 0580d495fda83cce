#!/usr/bin/env python3
"""The SVG flame graph opened in headless Chromium: it renders (a screenshot
with many colors, no script errors), and holds hot_function with a hover
title whose share matches profctl top; --thread and --inverted work."""
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zlib

from profdtest import Profd, binary, check, require_root_bpf, run, skip, require_tool

SVG = '{http://www.w3.org/2000/svg}'


def png_colors(path):
    """Distinct pixel colors of an 8-bit RGB/RGBA PNG (Chromium's screenshots)."""
    data = open(path, 'rb').read()
    check(data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG')
    pos, idat, ihdr = 8, b'', None
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], 'big')
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            ihdr = body
        elif kind == b'IDAT':
            idat += body
        pos += 12 + n
    width, height, depth, ctype = int.from_bytes(ihdr[0:4], 'big'), int.from_bytes(ihdr[4:8], 'big'), ihdr[8], ihdr[9]
    check(depth == 8 and ctype in (2, 6), 'unexpected PNG type %d/%d' % (depth, ctype))
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, colors = zlib.decompress(idat), width * bpp, bytearray(width * bpp), set()
    for y in range(height):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:
            colors.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 4))
        prev = line
    return colors


def test():
    require_root_bpf()
    chromium = shutil.which('chromium-browser') or require_tool('chromium', 'chromium')
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        sid, _ = d.profile_run([spin, '--seconds', '4', '--weights', '1,2,3'], 4)
        top = d.json('top', sid, '--limit', '1')
        svg = os.path.join(d.dir, 'cpu.svg')
        d.ctl('flamegraph', sid, '-o', svg)

        root = ET.parse(svg).getroot()
        titles = [t.text for t in root.iter(SVG + 'title')]
        hot = [t for t in titles if t.startswith('hot_function ')]
        check(hot, 'no hot_function box in the SVG')
        # hot_function does not recurse: its boxes (one per call path) add up to its total.
        pct = sum(float(re.search(r'samples, ([\d.]+)%', t).group(1)) for t in hot)
        expect = top['functions'][0]['total_pct']
        check(abs(pct - expect) < 0.5, 'hot_function boxes %.2f%%, top says %.1f%%' % (pct, expect))
        check(root.find(SVG + 'script') is not None, 'no zoom script')

        png = os.path.join(d.dir, 'cpu.png')
        p = subprocess.run([chromium, '--headless', '--no-sandbox', '--disable-gpu', '--enable-logging=stderr',
                            '--window-size=1200,400', '--screenshot=' + png, 'file://' + svg],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, HOME=d.dir))
        check(p.returncode == 0 and os.path.exists(png), 'chromium failed (%d): %s' % (p.returncode, p.stderr[-2000:]))
        errors = [l for l in p.stderr.splitlines() if 'Uncaught' in l or 'XML' in l and 'error' in l.lower()]
        check(not errors, 'errors while rendering: %r' % errors)
        colors = png_colors(png)
        print('screenshot %s: %d bytes, %d colors' % (png, os.path.getsize(png), len(colors)))
        check(len(colors) >= 8, 'the screenshot is nearly blank (%d colors)' % len(colors))

        # Click to zoom: a click on warm_function's box (dispatched by a script added
        # to a copy) widens it to the full width; Chromium prints the DOM after it.
        zsvg = os.path.join(d.dir, 'zoom.svg')
        click = ('<script type="text/ecmascript"><![CDATA[\n'
                 'var gs = document.querySelectorAll("g.f");\n'
                 'for (var i = 0; i < gs.length; i++) if (gs[i].getAttribute("data-n") == "warm_function")'
                 ' { gs[i].dispatchEvent(new MouseEvent("click")); break; }\n]]></script>\n</svg>')
        with open(zsvg, 'w') as f:
            f.write(open(svg).read().replace('</svg>', click))
        p = subprocess.run([chromium, '--headless', '--no-sandbox', '--disable-gpu', '--dump-dom', 'file://' + zsvg],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, HOME=d.dir))
        m = re.search(r'data-n="warm_function".*?<rect x="([\d.]+)" [^>]*width="([\d.]+)"', p.stdout, re.S)
        check(m, 'warm_function box not in the DOM after the click')
        check(abs(float(m.group(2)) - 1180) < 1, 'after the click warm_function is %s px wide, not the full 1180'
              % m.group(2))
        check('id="reset"' in p.stdout and 'display: none' not in re.search(r'<text id="reset"[^>]*>', p.stdout).group(0),
              'Reset zoom not shown after zooming')

        # One thread, inverted: the leaves on top, the thread's samples only.
        th = d.json('threads', sid)
        w3 = [t for t in th['threads'] if t['name'] == 'worker-3'][0]
        d.ctl('flamegraph', sid, '--thread', w3['tid'], '--inverted', '-o', svg)
        text = open(svg).read()
        check('%d samples of' % w3['samples'] in text, 'inverted graph of worker-3 does not say %d samples' % w3['samples'])
        rc, _, err = d.ctl('flamegraph', sid, '--thread', '1', check_rc=False)
        check(rc == 1 and 'no samples of thread 1' in err, 'unknown thread: rc %d %r' % (rc, err))


run(test)
