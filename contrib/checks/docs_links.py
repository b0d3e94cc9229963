#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks the links of the repository's markdown files.

The files are README.md, CONTRIBUTING.md and docs/*.md under ROOT. A link
is an inline link or image ([text](target), ![alt](target)), a reference
definition ([id]: target) or an HTML href/src, outside code spans and
code blocks. A link fails where it names a file or directory that does not
exist, a path outside the repository (an absolute path, or one whose ..
leave ROOT, through symbolic links too), a file: URL, or a #fragment that
no heading of the markdown file it names makes (GitHub's anchors). http(s)
and mailto links are not fetched. Each failure is one line,
FILE:LINE: TARGET: why, and the exit status is 1; 0 when every link
resolves.

  docs_links.py [ROOT]      check ROOT (default: the checkout this is in)
  docs_links.py --self-test the check finds what it must
"""
import argparse
import os
import re
import sys
import tempfile
import urllib.parse

DOCUMENTS = ["README.md", "CONTRIBUTING.md"]
DOCS_DIR = "docs"

FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title"): text may hold one level of brackets; target is
# <...> or has no spaces
INLINE_RE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^)\s]+)"
                       r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFDEF_RE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)")
HTML_RE = re.compile(r"<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']",
                     re.I)
HEADING_RE = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID_RE = re.compile(r"<a\s[^>]*?\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
NOT_FETCHED = ("http", "https", "mailto")


def documents(root):
    """The markdown files to check, relative to root, in order"""
    found = [name for name in DOCUMENTS
             if os.path.isfile(os.path.join(root, name))]
    docs = os.path.join(root, DOCS_DIR)
    if os.path.isdir(docs):
        found += [os.path.join(DOCS_DIR, name) for name in sorted(os.listdir(docs))
                  if name.endswith(".md")]
    return found


def prose_lines(text):
    """(line number, line, line with code spans blanked out) of text
    outside fenced and indented code blocks; an indented block starts
    after a blank line (it cannot interrupt a paragraph)"""
    fence = None
    previous_blank = True
    in_indented = False
    lines = text.split("\n")
    kept = []
    for number, line in enumerate(lines, 1):
        match = FENCE_RE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and \
                    len(match.group(1)) >= len(fence):
                fence = None
            previous_blank = False
            continue
        if match:
            fence = match.group(1)
            continue
        blank = line.strip() == ""
        indented = line.startswith("    ") or line.startswith("\t")
        if not blank and indented and (previous_blank or in_indented):
            in_indented = True
            previous_blank = False
            continue
        if not blank:
            in_indented = False
        previous_blank = blank
        kept.append((number, line))
    # code spans may run over lines of one paragraph: blank them in the
    # joined text, keeping the newlines
    joined = "\n".join(line for _, line in kept)
    joined = CODE_SPAN_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                              joined)
    return [(number, line, prose) for (number, line), prose in
            zip(kept, joined.split("\n"))]


def links(text):
    """(line number, target) of every link of a markdown text"""
    for number, _, prose in prose_lines(text):
        for regex in (INLINE_RE, REFDEF_RE, HTML_RE):
            for match in regex.finditer(prose):
                target = match.group(1)
                if target.startswith("<") and target.endswith(">"):
                    target = target[1:-1]
                yield number, target


def slug(heading):
    """GitHub's anchor of a heading: its text without markup, lower case,
    without punctuation but - and _, spaces made -"""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text):
    """Every anchor a markdown text makes: headings (a repeated one gets
    -1, -2, ...) and HTML name/id attributes"""
    made, seen = set(), {}
    for _, line, prose in prose_lines(text):
        match = HEADING_RE.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            made.add(base if count == 0 else "%s-%d" % (base, count))
        made.update(HTML_ID_RE.findall(prose))
    return made


def inside(root, path):
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return os.path.commonpath([root, path]) == root


def check_link(root, document, target, cache):
    """None where target resolves from document, else why not"""
    scheme = SCHEME_RE.match(target)
    if scheme:
        name = scheme.group(1).lower()
        if name == "file":
            return "a file: URL points outside the repository"
        return None  # http(s), mailto and other schemes are not fetched
    path, _, fragment = target.partition("#")
    path = urllib.parse.unquote(path.split("?", 1)[0])
    fragment = urllib.parse.unquote(fragment)
    if path.startswith("/"):
        return "an absolute path points outside the repository"
    here = os.path.join(root, document)
    resolved = os.path.normpath(os.path.join(os.path.dirname(here), path)) \
        if path else here
    if not inside(root, resolved):
        return "points outside the repository"
    if not os.path.exists(resolved):
        return "no such file in the repository"
    if fragment and resolved.endswith(".md") and os.path.isfile(resolved):
        if resolved not in cache:
            with open(resolved, encoding="utf-8") as f:
                cache[resolved] = anchors(f.read())
        if fragment.lower() not in cache[resolved]:
            return "no heading makes the anchor #%s in %s" % (
                fragment, os.path.relpath(resolved, root))
    return None


def check(root):
    """(bad lines, links checked, files checked)"""
    bad, count, cache = [], 0, {}
    names = documents(root)
    for document in names:
        with open(os.path.join(root, document), encoding="utf-8") as f:
            text = f.read()
        for number, target in links(text):
            count += 1
            why = check_link(root, document, target, cache)
            if why is not None:
                bad.append("%s:%d: %s: %s" % (document, number, target, why))
    return bad, count, len(names)


def self_test():
    """The check must pass good links and report every kind of bad one"""
    with tempfile.TemporaryDirectory() as top:
        root = os.path.join(top, "repo")
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "src"))
        with open(os.path.join(top, "outside.md"), "w") as f:
            f.write("# Outside\n")
        os.symlink(os.path.join(top, "outside.md"),
                   os.path.join(root, "docs", "link.txt"))
        with open(os.path.join(root, "src", "a.c"), "w") as f:
            f.write("")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# Top `name`: one\n\n"
                    "Good: [a](src/a.c), [b](docs/b.md#a-heading-s_x), "
                    "[c](#top-name-one), [d](https://example.invalid/x), "
                    "[e](<docs/b.md>), ![f](src/a.c \"title\"), [g](src/),\n"
                    "[h](docs/b.md#a-heading-s_x-1).\n\n"
                    "`[code](missing-in-span.md)` and\n\n"
                    "    [code](missing-in-block.md)\n\n"
                    "```\n[code](missing-in-fence.md)\n```\n\n"
                    "[ref]: docs/b.md\n")
        with open(os.path.join(root, "docs", "b.md"), "w") as f:
            f.write("# A heading: `s_x`\n\n## A heading: s_x\n\n"
                    "Bad: [1](../missing.md), [2](../../outside.md),\n"
                    "[3](/etc/passwd), [4](file:///etc/passwd), "
                    "[5](#nowhere),\n[6](link.txt), [7](../README.md#nope)\n"
                    "<a href=\"gone.md\">8</a>\n\n[r]: ../nothing.md\n")
        bad, count, files = check(root)
        expected = ["docs/b.md:5: ../missing.md: no such file",
                    "docs/b.md:5: ../../outside.md: points outside",
                    "docs/b.md:6: /etc/passwd: an absolute path",
                    "docs/b.md:6: file:///etc/passwd: a file: URL",
                    "docs/b.md:6: #nowhere: no heading",
                    "docs/b.md:7: link.txt: points outside",
                    "docs/b.md:7: ../README.md#nope: no heading",
                    "docs/b.md:8: gone.md: no such file",
                    "docs/b.md:10: ../nothing.md: no such file"]
        ok = (files == 2 and count == 18 and len(bad) == len(expected) and
              all(line.startswith(want) for line, want in zip(bad, expected)))
        if not ok:
            print("docs_links self-test FAILED: %d files, %d links, found:" %
                  (files, count))
            for line in bad:
                print("  " + line)
            return 1
    print("docs_links self-test: ok")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?",
                        default=os.path.dirname(os.path.dirname(
                            os.path.dirname(os.path.abspath(__file__)))))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    bad, count, files = check(root)
    for line in bad:
        print(line)
    if bad:
        print("docs_links: %d of %d links in %d files do not resolve" %
              (len(bad), count, files))
        return 1
    print("docs_links: %d links in %d files, every one resolves" %
          (count, files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
