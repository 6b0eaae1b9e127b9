#!/usr/bin/env python3
"""Checks every relative link of the given Markdown files: the file exists
and, for a link with #anchor into a Markdown file, a heading with that
GitHub slug exists there. Prints each broken link; exit status 1 if any.

usage: scripts/check-doc-links.py FILE.md...   (make test-docs: every
tracked Markdown file)"""
import os, re, sys

def slug(h):
    h = h.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)   # drop punctuation (keeps letters, digits, _, -, space)
    return h.replace(' ', '-')

def anchors(path):
    out, seen = set(), {}
    fence = False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
        if fence:
            continue
        m = re.match(r'^#+\s+(.*)', line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0); seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out

bad = 0
for md in sys.argv[1:]:
    text = open(md, encoding='utf-8').read()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in re.finditer(r'\]\(([^)\s]+)\)', text):
        link = m.group(1)
        if re.match(r'^[a-z]+:', link):
            continue
        path, _, anchor = link.partition('#')
        target = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if not os.path.exists(target):
            print(f"{md}: {link}: no file {target}"); bad += 1; continue
        if anchor and target.endswith('.md') and anchor not in anchors(target):
            print(f"{md}: {link}: no heading #{anchor} in {target}"); bad += 1
print(f"{len(sys.argv) - 1} files, {bad} broken links", file=sys.stderr)
sys.exit(1 if bad else 0)
