#!/usr/bin/env python3
"""Every reference fixture the Python scripts register has a C++ test that reads it.

    check_fixture_coverage.py <repo root>              check; exit 1 listing the orphans
    check_fixture_coverage.py --self-test <repo root>  the check must catch an injected orphan

The fixtures (read from the scripts' source, without running them, so torch is not needed):
  - every component registered with @register("name", seed) in tests/reference/*.py
    (components.REGISTRY, written by generate_all.py as <name>.safetensors);
  - every file a reference script saves under a literal name, "<name>.safetensors"
    (vit_models.py, reference_libs.py, moetta_reference.py, domainbed_torchvision.py, ...).
A fixture counts as read when a C++ test source under tests/ that opens reference files (it names
Fixture, module_parity or safetensors) spells its name as a string literal: "name",
"name.safetensors" or a path ending in "/name.safetensors". A fixture no test reads is generated, checked by its own self-check, and then
compared with nothing: this test fails and lists it.

Fixtures whose names are computed at run time (gmoe_reference.py's cases, the LLM folders of
tests/models) are not in either list; their parity suites fail on a missing file instead.
"""
import ast
import os
import re
import shutil
import sys
import tempfile

SAVED_FILE = re.compile(r"""["']([A-Za-z0-9_]+)\.safetensors["']""")
READS_FIXTURES = re.compile(r"\bFixture\b|\bmodule_parity\b|safetensors", re.IGNORECASE)


def registered(reference_dir):
    """{fixture name: "script.py:line"} for @register(...) and literal "<name>.safetensors" saves."""
    found = {}
    for fn in sorted(os.listdir(reference_dir)):
        if not fn.endswith(".py") or fn == os.path.basename(__file__):
            continue
        path = os.path.join(reference_dir, fn)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for node in ast.walk(ast.parse(text, filename=path)):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "register" and dec.args
                        and isinstance(dec.args[0], ast.Constant) and isinstance(dec.args[0].value, str)):
                    found.setdefault(dec.args[0].value, f"{fn}:{dec.lineno}")
        for m in SAVED_FILE.finditer(text):
            found.setdefault(m.group(1), f"{fn}:{text.count(chr(10), 0, m.start()) + 1}")
    return found


def literals_read_by_tests(tests_dir):
    """Every string literal of the C++ test sources that open reference files."""
    lits = set()
    for dirpath, _, files in os.walk(tests_dir):
        for fn in files:
            if not fn.endswith((".cpp", ".hpp")):
                continue
            with open(os.path.join(dirpath, fn), encoding="utf-8", errors="replace") as f:
                text = f.read()
            if READS_FIXTURES.search(text):
                lits.update(re.findall(r'"((?:[^"\\\n]|\\.)*)"', text))
    return lits


def orphans(root):
    fixtures = registered(os.path.join(root, "tests", "reference"))
    if not fixtures:
        return None, ["no registered fixture found under tests/reference (did the registration change?)"]
    lits = literals_read_by_tests(os.path.join(root, "tests"))
    # A literal naming the fixture: "name", "name.safetensors" or ".../name.safetensors".
    read = {lit.rsplit("/", 1)[-1].removesuffix(".safetensors") for lit in lits}
    missing = [f"{name} (registered at tests/reference/{where})" for name, where in sorted(fixtures.items())
               if name not in read]
    return fixtures, missing


def check(root):
    fixtures, missing = orphans(root)
    if missing:
        print("reference fixtures that no C++ test reads (add a parity case, or drop the fixture):", file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        return 1
    print(f"fixture coverage: all {len(fixtures)} registered reference fixtures are read by a C++ test")
    return 0


def self_test(root):
    """Copies tests/ to a temp dir, registers a fixture nobody reads, and expects exactly that orphan."""
    tmp = tempfile.mkdtemp(prefix="ttmoe_fixture_coverage_")
    try:
        shutil.copytree(os.path.join(root, "tests"), os.path.join(tmp, "tests"),
                        ignore=shutil.ignore_patterns("*.safetensors", "__pycache__"))
        with open(os.path.join(tmp, "tests", "reference", "zz_injected.py"), "w", encoding="utf-8") as f:
            f.write('@register("injected_orphan_fixture", 1)\ndef _b():\n    pass\n'
                    'st.save(os.path.join(out, "injected_orphan_file.safetensors"), {}, {})\n')
        _, missing = orphans(tmp)
        names = sorted(m.split()[0] for m in missing)
        if names != ["injected_orphan_file", "injected_orphan_fixture"]:
            print(f"self-test FAILED: expected the two injected orphans, got {missing}", file=sys.stderr)
            return 1
        print("fixture coverage self-test: the injected orphans are reported")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(args[0])
    return self_test(root) if "--self-test" in argv else check(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
