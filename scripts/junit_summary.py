#!/usr/bin/env python3
"""Prints 'N passed, N failed, N skipped' from meson's testlog.junit.xml.

With protocol 'gtest' meson lists every gtest case as a testcase; other tests
appear as one testcase each. A crashed gtest binary shows as one failed case.
"""
import sys
import xml.etree.ElementTree as ET


def main(path):
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags:
            failed += 1
        elif "skipped" in tags:
            skipped += 1
        else:
            passed += 1
    # A suite that reports failures without listing cases still fails the run.
    for suite in root.iter("testsuite"):
        listed = sum(1 for _ in suite.iter("testcase"))
        if listed == 0 and int(suite.get("failures", "0")) + int(suite.get("errors", "0")) > 0:
            failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
