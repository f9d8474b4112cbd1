#!/usr/bin/env python3
"""The meson suites of this build (docs/testing.md) and scripts/test.sh's selection.

Every test is in exactly one of 'quick' and 'slow'; 'browser' holds exactly the tests of
tests/web and 'process' every test that runs ranks in other processes (the process-world tests),
neither of them quick. scripts/test.sh --quick --list must list exactly the quick tests, and
scripts/test.sh --list every test. Usage: suites_test.py BUILD_DIR SOURCE_ROOT
"""
import json
import os
import subprocess
import sys


def suites_of(test):
    # meson spells a suite "<project>:<suite>"; the project's own name is a suite too.
    return {s.split(":", 1)[-1] for s in test["suite"]}


def listed(source_root, build, *flags):
    out = subprocess.run(["bash", os.path.join(source_root, "scripts", "test.sh"), *flags, "--list", build],
                         cwd=source_root, capture_output=True, text=True, check=True).stdout
    return {line.split(" / ", 1)[-1].strip() for line in out.splitlines() if " / " in line}


def main():
    build, source_root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
        tests = json.load(f)
    errors = []
    quick = set()
    for t in tests:
        name, suites = t["name"], suites_of(t)
        words = " ".join(t["cmd"])
        speed = suites & {"quick", "slow"}
        if len(speed) != 1:
            errors.append(f"{name}: suites {sorted(suites)} must hold exactly one of quick and slow")
        if "quick" in suites:
            quick.add(name)
        in_web = "/tests/web/" in words
        if in_web != ("browser" in suites):
            errors.append(f"{name}: in tests/web: {in_web}, in suite browser: {'browser' in suites}")
        spawns_world = "process_world" in words or "ProcessWorld" in words
        if spawns_world and "process" not in suites:
            errors.append(f"{name}: runs a process world but is not in suite process")
        if suites & {"browser", "process"} and "quick" in suites:
            errors.append(f"{name}: a {'browser' if 'browser' in suites else 'process'} test cannot be quick")
    everything = {t["name"] for t in tests}
    if not quick or quick == everything:
        errors.append(f"the quick suite holds {len(quick)} of {len(everything)} tests")
    got_quick = listed(source_root, build, "--quick")
    if got_quick != quick:
        errors.append(f"scripts/test.sh --quick lists {sorted(got_quick ^ quick)} differently from suite quick")
    got_all = listed(source_root, build)
    if got_all != everything:
        errors.append(f"scripts/test.sh without --quick lists {sorted(got_all ^ everything)} differently")
    for e in errors:
        print(e)
    print(f"{len(everything)} tests, {len(quick)} quick, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
