#!/usr/bin/env python3
"""Checks ports/ttmoe against vcpkg's manifest rules, without vcpkg (its tool cannot be fetched here).

The rules are those of vcpkg's manifest reference (learn.microsoft.com/vcpkg/reference/vcpkg-json) and of
`vcpkg format-manifest` / the port CI:
  * name: lowercase ASCII letters, digits and single hyphens ([a-z0-9]+(-[a-z0-9]+)*), not reserved;
  * exactly one of version / version-semver / version-date / version-string, in its scheme's syntax;
    port-version a non-negative integer;
  * dependencies: names or objects with `name` and only the known keys (host, features,
    default-features, platform, version>=), sorted by name, no duplicates;
  * features: identifier names (not `core` / `default`), each with a description, dependencies as above;
  * no unknown top-level fields (x-* and $* are allowed);
  * the portfile's helpers are declared as host dependencies: vcpkg_cmake_* needs `vcpkg-cmake`,
    vcpkg_cmake_config_fixup needs `vcpkg-cmake-config`;
  * every feature the portfile maps in vcpkg_check_features exists in the manifest, and the reverse;
  * a `usage` file sits beside the manifest.
It also checks the manifest-mode consumer example (the first ```json block in docs/install.md).

Usage: check_vcpkg_manifest.py <port dir> [<docs/install.md>]   exit 0 when valid, 1 with the problems
       check_vcpkg_manifest.py --self-test <port dir>           breaks the manifest in known ways and
                                                                fails unless each break is reported
"""
import copy
import json
import re
import sys
from pathlib import Path

IDENT = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
RESERVED = {"prn", "aux", "nul", "con", "core", "default"} | {f"lpt{i}" for i in range(10)} | {f"com{i}" for i in range(10)}
VERSION_SCHEMES = {
    "version": re.compile(r"^[0-9]+(\.[0-9]+)*$"),
    "version-semver": re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
                                 r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"),
    "version-date": re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(\.[0-9]+)*$"),
    "version-string": re.compile(r"^[^#]+$"),
}
TOP_LEVEL = {"name", "port-version", "maintainers", "description", "homepage", "documentation", "license",
             "supports", "dependencies", "default-features", "features", "builtin-baseline", "overrides",
             "vcpkg-configuration", "summary"} | set(VERSION_SCHEMES)
DEPENDENCY_KEYS = {"name", "host", "features", "default-features", "platform", "version>="}
HELPERS = {"vcpkg_cmake_configure": "vcpkg-cmake", "vcpkg_cmake_install": "vcpkg-cmake",
           "vcpkg_cmake_build": "vcpkg-cmake", "vcpkg_cmake_config_fixup": "vcpkg-cmake-config"}


def check_identifier(what, name, errors):
    if not isinstance(name, str) or not IDENT.match(name) or name in RESERVED:
        errors.append(f"{what}: '{name}' is not a valid vcpkg identifier ([a-z0-9]+(-[a-z0-9]+)*, not reserved)")


def check_dependencies(where, deps, errors):
    if not isinstance(deps, list):
        errors.append(f"{where}: must be an array")
        return
    names = []
    for i, dep in enumerate(deps):
        at = f"{where}[{i}]"
        if isinstance(dep, str):
            check_identifier(at, dep, errors)
            names.append(dep)
            continue
        if not isinstance(dep, dict) or "name" not in dep:
            errors.append(f"{at}: must be a port name or an object with a 'name'")
            continue
        check_identifier(f"{at}.name", dep["name"], errors)
        names.append(dep["name"])
        for key in sorted(set(dep) - DEPENDENCY_KEYS):
            errors.append(f"{at}: unknown field '{key}'")
        for key in ("host", "default-features"):
            if key in dep and not isinstance(dep[key], bool):
                errors.append(f"{at}.{key}: must be true or false")
        if "version>=" in dep:
            v = dep["version>="]
            if not isinstance(v, str) or not re.match(r"^[^#]+(#[0-9]+)?$", v):
                errors.append(f"{at}.version>=: '{v}' is not a version[#port-version]")
        if "features" in dep:
            for f in dep["features"] if isinstance(dep["features"], list) else [None]:
                name = f.get("name") if isinstance(f, dict) else f
                check_identifier(f"{at}.features", name, errors)
        if "platform" in dep and not isinstance(dep["platform"], str):
            errors.append(f"{at}.platform: must be a platform expression string")
    if names != sorted(names):
        errors.append(f"{where}: not sorted by name as `vcpkg format-manifest` writes them: {names}")
    if len(set(names)) != len(names):
        errors.append(f"{where}: a dependency is listed twice: {names}")


def check_versioning(m, port, errors):
    """overrides / version>= need a baseline in a top-level (consumer) manifest; a port has none."""
    for i, o in enumerate(m.get("overrides", [])):
        if not isinstance(o, dict) or "name" not in o:
            errors.append(f"overrides[{i}]: must be an object with a 'name'")
            continue
        check_identifier(f"overrides[{i}].name", o["name"], errors)
        schemes = [k for k in VERSION_SCHEMES if k in o]
        if len(schemes) != 1:
            errors.append(f"overrides[{i}]: needs exactly one version field, has {schemes}")
        for key in sorted(set(o) - {"name", "port-version"} - set(VERSION_SCHEMES)):
            errors.append(f"overrides[{i}]: unknown field '{key}'")
    if "builtin-baseline" in m:
        if port:
            errors.append("vcpkg.json: a port does not carry a builtin-baseline")
        elif not re.match(r"^[0-9a-f]{40}$", str(m["builtin-baseline"])):
            errors.append(f"builtin-baseline: '{m['builtin-baseline']}' is not a 40-digit vcpkg commit id")
    uses_versions = bool(m.get("overrides")) or any(isinstance(d, dict) and "version>=" in d
                                                    for d in m.get("dependencies", []))
    registry = m.get("vcpkg-configuration", {}).get("default-registry", {})
    if not port and uses_versions and "builtin-baseline" not in m and "baseline" not in registry:
        errors.append("vcpkg.json: overrides / version>= need a builtin-baseline (or a default registry baseline)")


def check_manifest(m, errors, port=True):
    if not isinstance(m, dict):
        errors.append("vcpkg.json: the top level must be an object")
        return
    for key in sorted(set(m) - TOP_LEVEL):
        if not key.startswith(("x-", "$")):
            errors.append(f"vcpkg.json: unknown field '{key}'")
    if port or "name" in m:
        check_identifier("name", m.get("name"), errors)
    schemes = [k for k in VERSION_SCHEMES if k in m]
    if port and len(schemes) != 1:
        errors.append(f"vcpkg.json: a port needs exactly one of {sorted(VERSION_SCHEMES)}, has {schemes}")
    for k in schemes:
        if not isinstance(m[k], str) or not VERSION_SCHEMES[k].match(m[k]):
            errors.append(f"vcpkg.json: {k} '{m[k]}' does not follow the {k} syntax")
    if "port-version" in m and (not isinstance(m["port-version"], int) or isinstance(m["port-version"], bool)
                                or m["port-version"] < 0):
        errors.append("vcpkg.json: port-version must be a non-negative integer")
    if port and not m.get("description"):
        errors.append("vcpkg.json: a port needs a description")
    check_dependencies("dependencies", m.get("dependencies", []), errors)
    check_versioning(m, port, errors)
    features = m.get("features", {})
    if not isinstance(features, dict):
        errors.append("features: must be an object")
        features = {}
    for name, feature in features.items():
        check_identifier(f"features.{name}", name, errors)
        if not isinstance(feature, dict) or not feature.get("description"):
            errors.append(f"features.{name}: needs a description")
            continue
        for key in sorted(set(feature) - {"description", "dependencies", "supports", "license"}):
            errors.append(f"features.{name}: unknown field '{key}'")
        check_dependencies(f"features.{name}.dependencies", feature.get("dependencies", []), errors)


def check_port_against_portfile(m, portfile_text, errors):
    host = {d["name"] for d in m.get("dependencies", []) if isinstance(d, dict) and d.get("host") is True}
    plain = {d if isinstance(d, str) else d.get("name") for d in m.get("dependencies", [])} - host
    for helper, port in HELPERS.items():
        if re.search(rf"^\s*{helper}\(", portfile_text, re.M):
            if port not in host:
                errors.append(f"portfile.cmake calls {helper}() but vcpkg.json lacks the host dependency "
                              f"{{\"name\": \"{port}\", \"host\": true}}" + (" (it is listed without host)" if port in plain else ""))
    block = re.search(r"vcpkg_check_features\((.*?)\)", portfile_text, re.S)
    mapped = set()
    if block:
        words = re.sub(r"#.*", "", block.group(1)).split()
        if "FEATURES" in words:
            rest = words[words.index("FEATURES") + 1:]
            mapped = set(rest[0::2])
    declared = set(m.get("features", {}))
    for f in sorted(mapped - declared):
        errors.append(f"portfile.cmake maps feature '{f}', which vcpkg.json does not declare")
    for f in sorted(declared - mapped):
        errors.append(f"vcpkg.json declares feature '{f}', which portfile.cmake never maps to a CMake option")


def check_port(port_dir, manifest=None):
    errors = []
    port_dir = Path(port_dir)
    if manifest is None:
        try:
            manifest = json.loads((port_dir / "vcpkg.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            return [f"{port_dir / 'vcpkg.json'}: cannot read: {e}"]
    check_manifest(manifest, errors)
    if manifest.get("name") != port_dir.name:
        errors.append(f"vcpkg.json: name '{manifest.get('name')}' differs from the port folder '{port_dir.name}'")
    portfile = port_dir / "portfile.cmake"
    if not portfile.is_file():
        errors.append(f"{portfile}: missing")
    else:
        check_port_against_portfile(manifest, portfile.read_text(), errors)
    if not (port_dir / "usage").is_file():
        errors.append(f"{port_dir / 'usage'}: missing (vcpkg prints it after install)")
    return errors


def check_consumer_doc(doc):
    text = Path(doc).read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S)
    if not block:
        return [f"{doc}: no ```json block with the consumer's vcpkg.json"]
    try:
        m = json.loads(block.group(1))
    except json.JSONDecodeError as e:
        return [f"{doc}: the consumer's vcpkg.json is not valid JSON: {e}"]
    errors = []
    check_manifest(m, errors, port=False)
    names = {d if isinstance(d, str) else d.get("name") for d in m.get("dependencies", [])}
    if "ttmoe" not in names:
        errors.append(f"{doc}: the consumer's vcpkg.json does not depend on ttmoe")
    return [f"{doc}: {e}" for e in errors]


def self_test(port_dir):
    good = json.loads((Path(port_dir) / "vcpkg.json").read_text())
    breaks = {
        "upper-case name": lambda m: m.update(name="TTMoE"),
        "two version fields": lambda m: m.update({"version-string": "x"}),
        "bad version syntax": lambda m: m.update(version="0.1.0-rc1"),
        "helper not host": lambda m: m.update(dependencies=[d if not (isinstance(d, dict) and d["name"] == "vcpkg-cmake")
                                                            else "vcpkg-cmake" for d in m["dependencies"]]),
        "unsorted dependencies": lambda m: m["dependencies"].reverse(),
        "unknown dependency field": lambda m: m["dependencies"].append({"name": "zlib", "optional": True}),
        "feature without description": lambda m: m["features"]["blas"].pop("description"),
        "feature unknown to portfile": lambda m: m["features"].update(extra={"description": "x"}),
        "unknown top-level field": lambda m: m.update(homepag="x"),
        "baseline in a port": lambda m: m.update({"builtin-baseline": "0" * 40}),
    }
    failed = []
    for what, mutate in breaks.items():
        m = copy.deepcopy(good)
        mutate(m)
        errors = check_port(port_dir, m)
        print(f"self-test: {what}: {'rejected' if errors else 'NOT rejected'}" + (f" ({errors[0]})" if errors else ""))
        if not errors:
            failed.append(what)
    return failed


def main(argv):
    if len(argv) >= 2 and argv[0] == "--self-test":
        failed = self_test(argv[1])
        if failed:
            print(f"FAILED: the checker accepted broken manifests: {failed}")
            return 1
        print("self-test: every broken manifest was rejected")
        return 0
    if not argv:
        print(__doc__)
        return 2
    errors = check_port(argv[0])
    if len(argv) > 1:
        errors += check_consumer_doc(argv[1])
    for e in errors:
        print(f"ERROR: {e}")
    if errors:
        return 1
    print(f"{argv[0]}: the manifest follows vcpkg's rules" + (f"; {argv[1]}: the consumer manifest too" if len(argv) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
