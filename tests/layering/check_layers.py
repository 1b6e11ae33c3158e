#!/usr/bin/env python3
"""Checks every `#include "ttmoe/..."` of every header under include/ttmoe against the layer table in
docs/design.md (section "Floors"): a header may include headers of its own folder or of folders on a
strictly lower floor. Folders on the same floor are independent of each other. Every folder (and every
top-level header) must have a row in the table, so a new folder fails until it is placed.

It also checks the namespace table (section "Namespaces"): every namespace a header opens must belong
to its folder's namespace (that namespace or one nested in it that no other folder owns), or be named
in the folder's "also opens" cell; `detail`-style sub-namespaces (a name ending in `detail`) and
anonymous namespaces are always allowed.

usage: check_layers.py <repo root>            check the tree; exit 1 naming file:line and both floors
       check_layers.py --graph <repo root>    print folder-level include edge counts
       check_layers.py --self-test <repo root>  run the checker on temp copies with injected faults
"""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")
NAME = re.compile(r"`([^`]+)`")
INCLUDE = re.compile(r'^\s*#\s*include\s*["<](ttmoe/[^">]+)[">]')


class TableError(Exception):
    pass


def table_rows(design_md, section, row):
    """The matches of regex `row` among the lines of section `## <section>` of design.md."""
    in_section = False
    with open(design_md, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_section = line.strip() == f"## {section}"
                continue
            m = row.match(line) if in_section else None
            if m:
                yield m


def parse_table(design_md):
    """Returns {folder or top-level header: floor} from the table under '## Floors'."""
    floors = {}
    for m in table_rows(design_md, "Floors", ROW):
        for name in NAME.findall(m.group(2)):
            name = name.strip().rstrip("/")
            if name in floors:
                raise TableError(f"{design_md}: `{name}` appears twice in the layer table")
            floors[name] = int(m.group(1))
    if not floors:
        raise TableError(f"{design_md}: no layer table (rows `| floor | `folder`, ... | ... |`) under '## Floors'")
    return floors


NS_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|([^|]*)\|")
NS_TOKEN = re.compile(r""""(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|\bnamespace\s+([A-Za-z_][\w:]*)?\s*(\{|=)?|\bnamespace\s*(\{)|[{}]""")


def parse_namespaces(design_md):
    """Returns {folder or top-level header: (namespace, {also-opened namespaces})} from the table under
    '## Namespaces' (rows `| `folder` | `ttmoe::x` | `ttmoe::y` (why), ... |`)."""
    table = {}
    for m in table_rows(design_md, "Namespaces", NS_ROW):
        unit = m.group(1).strip().rstrip("/")
        if unit in table:
            raise TableError(f"{design_md}: `{unit}` appears twice in the namespace table")
        table[unit] = (m.group(2).strip(), set(NAME.findall(m.group(3))))
    if not table:
        raise TableError(f"{design_md}: no namespace table (rows `| `folder` | `namespace` | ... |`) under '## Namespaces'")
    return table


def strip_comments_and_directives(text):
    """The text with comments and preprocessor lines (with their continuations) blanked, line breaks
    kept so line numbers stay right. String and character literals are left for the tokenizer."""
    out, i, n = [], 0, len(text)
    at_line_start, in_directive = True, False
    while i < n:
        c = text[i]
        if c == "\n":
            in_directive = in_directive and i > 0 and text[i - 1] == "\\"
            at_line_start = True
            out.append(c)
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        if at_line_start and c == "#":
            in_directive = True
        if not c.isspace():
            at_line_start = False
        out.append(" " if in_directive else c)
        i += 1
    return "".join(out)


def opened_namespaces(path):
    """Yields (line, full namespace name) for every `namespace X {` in the header (nesting resolved,
    `ttmoe { namespace op {` gives ttmoe::op); aliases (`namespace R = ...`) are not openings."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments_and_directives(f.read())
    stack = []  # (brace depth at which it closes, full name or None for an ordinary brace)
    for m in NS_TOKEN.finditer(text):
        tok = m.group(0)
        if tok == "{":
            stack.append(None)
        elif tok == "}":
            if stack:
                stack.pop()
        elif tok.startswith("namespace") and "{" in (m.group(2), m.group(3)):
            outer = next((s for s in reversed(stack) if s is not None), "")
            name = m.group(1) or "(anonymous)"
            full = f"{outer}::{name}" if outer else name
            stack.append(full)
            yield text.count("\n", 0, m.start()) + 1, full


def owner(ns, table):
    """The folders whose namespace is the longest table namespace equal to or enclosing `ns`."""
    best, folders = -1, set()
    for unit, (home, _) in table.items():
        if ns == home or ns.startswith(home + "::"):
            if len(home) > best:
                best, folders = len(home), {unit}
            elif len(home) == best:
                folders.add(unit)
    return folders


def exempt(ns):
    """detail-style helpers and anonymous namespaces belong to whatever encloses them."""
    return any(part.endswith("detail") or part == "(anonymous)" for part in ns.split("::"))


def check_namespaces(root):
    """Returns the list of namespace problems (empty when every folder keeps to its row)."""
    table = parse_namespaces(os.path.join(root, "docs", "design.md"))
    problems = []
    for path, rel in headers(root):
        unit, shown = unit_of(rel), os.path.relpath(path, root)
        if unit not in table:
            problems.append(f"{shown}:1: `{unit}` has no row in the namespace table of docs/design.md; add one")
            continue
        home, also = table[unit]
        for lineno, ns in opened_namespaces(path):
            if exempt(ns) or unit in owner(ns, table) or ns in also:
                continue
            others = ", ".join(f"`{u}`" for u in sorted(owner(ns, table))) or "no folder"
            problems.append(f"{shown}:{lineno}: `{unit}` (namespace {home}) opens namespace {ns}, which belongs to "
                            f"{others}; declare it in {home} or name it under 'also opens' in the table")
    return problems


def unit_of(rel):
    """The table key of a header path relative to include/: its folder under ttmoe/, or the file name
    for a top-level header (an umbrella such as ttmoe.hpp)."""
    parts = rel.split("/")[1:]  # drop "ttmoe"
    return parts[0] if len(parts) == 1 else "/".join(parts[:-1])


def headers(root):
    inc = os.path.join(root, "include")
    for dirpath, _, files in os.walk(os.path.join(inc, "ttmoe")):
        for name in sorted(files):
            if name.endswith((".hpp", ".cuh", ".h")):
                path = os.path.join(dirpath, name)
                yield path, os.path.relpath(path, inc).replace(os.sep, "/")


def includes(path):
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1)


def check(root):
    """Returns the list of problems (empty when the tree follows the table)."""
    floors = parse_table(os.path.join(root, "docs", "design.md"))
    problems, seen = [], set()
    inc = os.path.join(root, "include")
    for path, rel in headers(root):
        unit = unit_of(rel)
        seen.add(unit)
        shown = os.path.relpath(path, root)
        if unit not in floors:
            problems.append(f"{shown}:1: `{unit}` has no floor in the layer table of docs/design.md; add a row")
            continue
        for lineno, target in includes(path):
            tunit = unit_of(target)
            if not os.path.exists(os.path.join(inc, target)):
                problems.append(f"{shown}:{lineno}: includes {target}, which does not exist")
            elif tunit not in floors:
                problems.append(f"{shown}:{lineno}: includes {target} from `{tunit}`, which has no floor in the layer table")
            elif tunit != unit and floors[tunit] >= floors[unit]:
                kind = "a higher" if floors[tunit] > floors[unit] else "the same"
                problems.append(f"{shown}:{lineno}: `{unit}` (floor {floors[unit]}) includes {target} from `{tunit}` "
                                f"(floor {floors[tunit]}), {kind} floor")
    return problems


XSIMD_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]xsimd/')
XSIMD_GATE = "ttmoe/simd/xsimd.hpp"


def check_xsimd(root):
    """xsimd comes in through simd/xsimd.hpp only: it repairs GCC 12's -O0 AVX512BW intrinsics before
    xsimd is read (docs/design.md, CPU backend), which a direct include elsewhere would bypass."""
    problems = []
    for path, rel in headers(root):
        if rel == XSIMD_GATE:
            continue
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if XSIMD_INCLUDE.match(line):
                    problems.append(f"{os.path.relpath(path, root)}:{lineno}: includes xsimd directly; "
                                    f"include \"{XSIMD_GATE}\" instead")
    return problems


def planned(root):
    """Table rows with no header yet (folders the table reserves a floor for)."""
    floors = parse_table(os.path.join(root, "docs", "design.md"))
    return sorted(set(floors) - {unit_of(rel) for _, rel in headers(root)})


def graph(root):
    edges = collections.Counter()
    for path, rel in headers(root):
        for _, target in includes(path):
            a, b = unit_of(rel), unit_of(target)
            if a != b:
                edges[(a, b)] += 1
    return edges


def self_test(root):
    """Runs this script on temp copies of include/ and docs/design.md: the copy as is must pass, and
    each injected fault must fail with the expected message."""
    failures = []

    def run(mutate, expect_ok, expect_text=()):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(os.path.join(root, "include"), os.path.join(tmp, "include"))
            os.makedirs(os.path.join(tmp, "docs"))
            shutil.copy(os.path.join(root, "docs", "design.md"), os.path.join(tmp, "docs", "design.md"))
            label = mutate(tmp)
            r = subprocess.run([sys.executable, os.path.abspath(__file__), tmp], capture_output=True, text=True)
            out = r.stdout + r.stderr
            if (r.returncode == 0) != expect_ok:
                failures.append(f"{label}: exit {r.returncode}, expected {'0' if expect_ok else 'non-zero'}\n{out}")
            for text in expect_text:
                if text not in out:
                    failures.append(f"{label}: output lacks {text!r}\n{out}")
            print(f"self-test: {label}: exit {r.returncode}" + (f": {out.strip().splitlines()[0]}" if out.strip() else ""))

    def append_line(tmp, rel, line):
        path = os.path.join(tmp, rel)
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return n + 1

    run(lambda tmp: "unchanged copy", True)

    def upward(tmp):
        n = append_line(tmp, "include/ttmoe/core/shape.hpp", '#include "ttmoe/ops/matmul.hpp"')
        upward.line = n
        return "core/shape.hpp including ops/matmul.hpp"
    floors = parse_table(os.path.join(root, "docs", "design.md"))
    run(upward, False, (f"include/ttmoe/core/shape.hpp:", f"`core` (floor {floors['core']})",
                        f"`ops` (floor {floors['ops']}), a higher floor"))

    def sideways(tmp):
        append_line(tmp, "include/ttmoe/expr/ops.hpp", "#include <ttmoe/autograd/tape.hpp>")
        return "expr/ops.hpp including autograd/tape.hpp (same floor, angle brackets)"
    run(sideways, False, ("include/ttmoe/expr/ops.hpp:", "`autograd`", "the same floor"))

    def new_folder(tmp):
        os.makedirs(os.path.join(tmp, "include/ttmoe/newfloor"))
        with open(os.path.join(tmp, "include/ttmoe/newfloor/thing.hpp"), "w") as f:
            f.write('#pragma once\n#include "ttmoe/core/shape.hpp"\n')
        return "a folder missing from the table"
    run(new_folder, False, ("`newfloor` has no floor in the layer table",))

    def missing_target(tmp):
        append_line(tmp, "include/ttmoe/nn/linear.hpp", '#include "ttmoe/nn/no_such_header.hpp"')
        return "an include of a header that does not exist"
    run(missing_target, False, ("no_such_header.hpp, which does not exist",))

    def direct_xsimd(tmp):
        append_line(tmp, "include/ttmoe/nn/linear.hpp", "#include <xsimd/xsimd.hpp>")
        return "nn/linear.hpp including xsimd directly"
    run(direct_xsimd, False, ("include/ttmoe/nn/linear.hpp:", "includes xsimd directly"))

    # Namespaces: (header, text appended to it, label, whether the check passes, expected output).
    namespace_cases = [
        ("include/ttmoe/nn/linear.hpp", "namespace ttmoe::io {\nstruct Stray {};\n}", "nn/linear.hpp opening ttmoe::io",
         False, ("include/ttmoe/nn/linear.hpp:", "opens namespace ttmoe::io, which belongs to `io`")),
        ("include/ttmoe/ops/matmul.hpp", "namespace ttmoe {\nnamespace nn {\nstruct Stray {};\n}\n}",
         "ops/matmul.hpp opening ttmoe::nn through nested blocks", False,
         ("opens namespace ttmoe::nn, which belongs to `nn`",)),
        ("include/ttmoe/nn/linear.hpp", "namespace ttmoe::nn::linear_detail {\nstruct Helper {};\n}",
         "a detail sub-namespace (allowed)", True, ()),
    ]
    for rel, text, label, ok, expect in namespace_cases:
        run(lambda tmp, rel=rel, text=text, label=label: (append_line(tmp, rel, text), label)[1], ok, expect)

    def no_ns_row(tmp):
        design = os.path.join(tmp, "docs", "design.md")
        with open(design, encoding="utf-8") as f:
            lines = [l for l in f if not l.startswith("| `plot` | `ttmoe::plot`")]
        with open(design, "w", encoding="utf-8") as f:
            f.writelines(lines)
        return "a folder missing from the namespace table"
    run(no_ns_row, False, ("`plot` has no row in the namespace table",))

    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    print("self-test: all cases behaved as expected")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return self_test(argv[2])
    if len(argv) == 3 and argv[1] == "--graph":
        for (a, b), n in sorted(graph(argv[2]).items()):
            print(f"{a} -> {b}: {n}")
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        problems = check(argv[1]) + check_namespaces(argv[1]) + check_xsimd(argv[1])
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s); the tables are the '## Floors' and '## Namespaces' sections "
              "of docs/design.md", file=sys.stderr)
        return 1
    print("layering: every #include \"ttmoe/...\" follows the table in docs/design.md")
    print("layering: every folder opens only its own namespace (and the ones its row names)")
    print(f"layering: only {XSIMD_GATE} includes xsimd")
    empty = planned(argv[1])
    if empty:
        print("layering: table rows with no header yet: " + ", ".join(empty))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
