#!/usr/bin/env bash
# Every reference the tree makes to its own files must exist: paths such as
# src/base/alloc.h, kernels/gemm.c, tools/bench_perf.sh, tests/test_*.c (a
# glob must match something), docs/performance.md#bf16-gemm (the heading
# must exist, under GitHub's anchor rule), Markdown links relative to their
# page, and include-style paths in C (model/head.h is src/model/head.h).
# A path that leaves the repository (../shared/...) is reported too: a
# reader of the repository does not have it.
#
# Scans the files git sees (tracked, or new and not ignored; build/ and
# data/ are neither): the *.md files, the comments of *.c and *.h files
# (their code and strings are the compiler's and the tests' business), and
# *.sh, *.py, *.cmake and CMakeLists.txt files whole. A {a,b} group names
# every alternative. A path with a <placeholder>
# is checked up to the placeholder; one followed by a shell variable ($k) is
# skipped. Paths in other projects that look like ours are listed in
# `external` below. Prints one line per stale reference,
# "file:line: reference: what is wrong", and exits 1 if there is any.
#
# A reference counts only a file git sees, never a local ignored one; outside
# a git checkout the script exits 77 (skipped).
#
# Usage: tools/check_refs.sh [repository root, default: this script's]
set -euo pipefail
# (an absolute path: the checks compare paths against it, so "." would put
# every relative link outside the repository)
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
git -C "$root" rev-parse --is-inside-work-tree > /dev/null 2>&1 \
  || { echo "check_refs: $root is not a git checkout: skipped"; exit 77; }
exec python3 - "$root" <<'PY'
import fnmatch, os, re, subprocess, sys

root = sys.argv[1]
# the files git sees (tracked, or new and not ignored): a reference is checked
# against these, so build/, data/ and other ignored local files never satisfy it
files = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                       check=True, capture_output=True, text=True).stdout.split("\n")
files = sorted({f for f in files if f and os.path.lexists(os.path.join(root, f))})
known = set(files)
for f in files:
    d = os.path.dirname(f)
    while d and d not in known:
        known.add(d); d = os.path.dirname(d)
exts = (".md", ".c", ".h", ".sh", ".py", ".cmake")
files = [f for f in files if f and (f.endswith(exts) or os.path.basename(f) == "CMakeLists.txt")]

TOP = r"(?:src|kernels|docs|tools|tests|include|configs|cmake|examples)"
SRC = r"(?:base|config|model|exec|mesh|dist|train|data|ckpt|hf|tokenizer|decode|sweep)"
# a path starts after a character that cannot be part of one
path_re = re.compile(r"(?<![\w./~$-])(" + TOP + r"/(?:[\w./*<>-]|\{[\w.,]*\})*(?:[\w*>/]|\{[\w.,]*\}))(#[\w-]+)?")
src_re = re.compile(r"(?<![\w./~$-])(" + SRC + r"/[\w-]+\.[ch])\b")
up_re = re.compile(r"(?<![\w.~$-])(\.\./[\w./-]*\.\w+)\b")
link_re = re.compile(r"\]\(([^)\s]+)\)")
head_re = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")

# paths named in the tree that belong to other repositories
external = ("src/transformers/",  # Hugging Face transformers
            "tests/utils/")       # MaxText's logit checker

def c_comments(text):
    """text with everything but C comments blanked (newlines kept)"""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(text[i:j]); i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j]); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1])); i = j + 1
        else:
            out.append(c if c == "\n" else " "); i += 1
    return "".join(out)

anchors = {}
def page_anchors(path):
    """GitHub's anchors of a Markdown page: headings lowercased, punctuation
    but '-' and '_' dropped, spaces to '-', repeats numbered."""
    if path in anchors: return anchors[path]
    seen, out = {}, set()
    fence = False
    try:
        lines = open(path, encoding="utf-8").read().split("\n")
    except OSError:
        lines = []
    for ln in lines:
        if ln.startswith("```"): fence = not fence
        m = None if fence else head_re.match(ln)
        if not m: continue
        t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2)).lower()
        t = re.sub(r"[^\w\- ]", "", t).replace(" ", "-")
        n = seen.get(t, 0)
        out.add(t if n == 0 else "%s-%d" % (t, n))
        seen[t] = n + 1
    anchors[path] = out
    return out

def section_named(page, name):
    """a heading, or a paragraph's bold lead-in, that starts with name"""
    key = re.sub(r"[^\w\- ]", "", name.lower()).replace(" ", "-").rstrip("-")
    if any(h.startswith(key) for h in page_anchors(page)): return True
    try: text = open(page, encoding="utf-8").read()
    except OSError: return False
    return re.search(r"(^|\n)\*\*" + re.escape(name), text) is not None

def exists(rel, base=root):
    p = os.path.normpath(os.path.join(base, rel))
    m = re.search(r"\{([^}]*)\}", p)
    if m:  # src/base/team.{c,h}: every alternative must exist
        return all(exists(p[:m.start()] + alt + p[m.end():]) for alt in m.group(1).split(","))
    r = os.path.relpath(p, root)
    if r == ".": return True
    if "*" in r:
        return any(fnmatch.fnmatchcase(k, r) for k in known)
    return r in known

bad = []
def report(f, n, ref, why):
    bad.append("%s:%d: %s: %s" % (f, n, ref, why))

def check_anchor(f, n, ref, page, anchor):
    if page.endswith(".md") and os.path.isfile(page) and anchor not in page_anchors(page):
        report(f, n, ref, "no heading with anchor #%s in %s" % (anchor, os.path.relpath(page, root)))

for f in files:
    full = os.path.join(root, f)
    try:
        text = open(full, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        continue
    is_c = f.endswith((".c", ".h"))
    is_md = f.endswith(".md")
    if is_c: text = c_comments(text)
    here = os.path.dirname(full)
    fence = False
    for n, ln in enumerate(text.split("\n"), 1):
        if is_md and ln.startswith("```"):
            fence = not fence
        for m in path_re.finditer(ln):
            p, anchor = m.group(1), m.group(2)
            if "..." in p or p.startswith(external): continue
            if ln[m.end():m.end() + 1] == "$": continue
            if "<" in p: p = p[:p.index("<")]
            if not exists(p):
                report(f, n, m.group(0), "no such file in the repository")
            elif anchor:
                check_anchor(f, n, m.group(0), os.path.join(root, p), anchor[1:])
            else:  # a section named after the page: docs/<page>.md "Threads"
                q = re.match(r',?\s*"([^"]+)', ln[m.end():])
                if q and p.endswith(".md") and not section_named(os.path.join(root, p), q.group(1)):
                    report(f, n, '%s "%s"' % (p, q.group(1)), "no such section")
        if is_c:
            for m in src_re.finditer(ln):
                if not exists(os.path.join("src", m.group(1))):
                    report(f, n, m.group(1), "no src/%s" % m.group(1))
        for m in up_re.finditer(ln):
            if is_md and ln[:m.start()].endswith("]("): continue  # a link: below
            inside = [os.path.normpath(os.path.join(b, m.group(1))) for b in (here, root)]
            inside = [p for p in inside if p.startswith(os.path.normpath(root) + os.sep)]
            if not inside:
                report(f, n, m.group(1), "outside the repository")
            elif not any(exists(p) for p in inside):
                report(f, n, m.group(1), "not in the repository")
        if is_md and not fence:
            for m in link_re.finditer(ln):
                t = m.group(1)
                if re.match(r"^[a-z]+:", t): continue
                page, _, anchor = t.partition("#")
                target = os.path.normpath(os.path.join(here, page)) if page else full
                if not target.startswith(os.path.normpath(root)):
                    report(f, n, t, "link outside the repository")
                elif page and not exists(target):
                    report(f, n, t, "link to a missing file")
                elif anchor:
                    check_anchor(f, n, t, target, anchor)

for b in bad: print(b)
sys.exit(1 if bad else 0)
PY
