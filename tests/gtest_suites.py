#!/usr/bin/env python3
"""The GoogleTest filter that selects the test suites defined in the given files.

    gtest_suites.py FILE...                 prints e.g. "Tokenizer.*:Layouts/ShardTest.*"
    gtest_suites.py --check-unique FILE...  fails naming a suite that two files define

The core tests are one program (tests/core/meson.build); each meson test runs the suites of its
own source files, so that a suite added to a file runs in that file's test without a list to keep.
Parameterised suites run under their instantiation's prefix (INSTANTIATE_TEST_SUITE_P(P, S, ...)
-> "P/S.*").
"""
import re
import sys

DEFINE = re.compile(r"^\s*(TEST|TEST_F)\(\s*(\w+)\s*,", re.M)
INSTANTIATE = re.compile(r"^\s*INSTANTIATE_TEST_SUITE_P\(\s*(\w+)\s*,\s*(\w+)\s*,", re.M)


def suites(path):
    text = open(path, encoding="utf-8").read()
    names = [m.group(2) for m in DEFINE.finditer(text)]
    names += [m.group(1) + "/" + m.group(2) for m in INSTANTIATE.finditer(text)]
    return list(dict.fromkeys(names))


def main(args):
    if args and args[0] == "--check-unique":
        owner = {}
        for path in args[1:]:
            for s in suites(path):
                if s in owner and owner[s] != path:
                    sys.exit(f"gtest_suites: suite {s} is defined in {owner[s]} and in {path}: rename one")
                owner[s] = path
        return
    found = [s for path in args for s in suites(path)]
    if not found:
        sys.exit("gtest_suites: no test suite in " + " ".join(args))
    print(":".join(s + ".*" for s in dict.fromkeys(found)))


main(sys.argv[1:])
