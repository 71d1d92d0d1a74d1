#!/usr/bin/env python3
"""Builds Public/index.html from Public/src/index.html, the readable source: edit that one.

The page must stay small (one request, < 16 KiB before translation), so its one inline <style>
and one inline <script> are minified with esbuild (Debian: `apt-get install esbuild`); the
markup only loses the quotes around simple attribute values (valid HTML). `build.py --check` exits 1 when Public/index.html is out of date.
Public/src/ is not served: the server serves only top-level files of Public/ and i18n/*.json.
"""
import os, re, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE, TARGET = os.path.join(HERE, 'index.html'), os.path.join(HERE, '..', 'index.html')


def minify(code, loader):
    run = subprocess.run(['esbuild', '--minify', '--charset=utf8', '--legal-comments=none', '--loader=' + loader],
                         input=code.encode(), capture_output=True, check=True)
    return run.stdout.decode().strip()


def build():
    html = open(SOURCE, encoding='utf-8').read()
    for tag, loader in (('style', 'css'), ('script', 'js')):
        blocks = re.findall(r'<%s>(.*?)</%s>' % (tag, tag), html, re.S)
        if len(blocks) != 1:
            sys.exit('expected exactly one inline <%s>' % tag)
        small = minify(blocks[0], loader)
        if '{{' in small:
            sys.exit('<%s> must not contain {{placeholders}}: the server hashes it once for the CSP' % tag)
        html = html.replace('<%s>%s</%s>' % (tag, blocks[0], tag), '<%s>%s</%s>' % (tag, small, tag))
    head, style, rest = re.split(r'(<style>.*?</style>)', html, flags=re.S)
    markup, script, tail = re.split(r'(<script>.*?</script>)', rest, flags=re.S)
    # "a" -> a when the value is a plain word; never around {{placeholders}} (they become free text),
    # nor before "/>" (r=9/> would read as r="9/").
    unquote = lambda part: re.sub(r'(\s[\w:-]+)="([\w.:#-]+)"(?!/)', r'\1=\2', part)
    return unquote(head) + style + unquote(markup) + script + tail


if __name__ == '__main__':
    page = build()
    if '--check' in sys.argv[1:]:
        current = open(TARGET, encoding='utf-8').read() if os.path.exists(TARGET) else ''
        sys.exit(0 if current == page else 'Public/index.html is out of date: run Public/src/build.py')
    with open(TARGET, 'w', encoding='utf-8') as f:
        f.write(page)
    print('Public/index.html: %d bytes' % len(page.encode()))
