#!/usr/bin/env python3
"""Tests of scripts/check-notice.py on small trees of its own: it must fail for each kind of gap.

Usage: check_notice_test.py SOURCE_ROOT
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None  # set from argv in __main__


def entry(path, licence="MIT (LICENSE)"):
    return f"Path:    {path}\nWhat:    test data\n         on two lines\nOrigin:  here\nLicence: {licence}\n\n"


class CheckNoticeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rel, text=""):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def run_check(self):
        return subprocess.run([sys.executable, SCRIPT, self.root], capture_output=True, text=True)

    def test_covered_tree_passes(self):
        self.write("NOTICE", "Prose first.\n\n" + entry("data/model/") + entry("tests/data/a.json"))
        self.write("data/model/config.json")
        self.write("data/model/deep/weights.bin")
        self.write("tests/data/a.json")
        result = self.run_check()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("all 3 files", result.stdout)

    def test_uncovered_file_fails_and_is_named(self):
        self.write("NOTICE", entry("tests/data/a.json"))
        self.write("tests/data/a.json")
        self.write("tests/data/b.json")
        self.write("data/c.bin")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("tests/data/b.json", result.stderr)
        self.assertIn("data/c.bin", result.stderr)
        self.assertNotIn("tests/data/a.json", result.stderr)

    def test_folder_entry_is_a_prefix_of_whole_names(self):
        # "data/model/" must not cover "data/model-other/x".
        self.write("NOTICE", entry("data/model/"))
        self.write("data/model-other/x")
        self.assertEqual(self.run_check().returncode, 1)

    def test_tokenizer_files_need_their_own_entries(self):
        self.write("NOTICE", entry("data/tok/"))
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            self.write("data/tok/" + name)
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            self.assertIn("data/tok/" + name, result.stderr)
        self.write("NOTICE", entry("data/tok/") + entry("data/tok/vocab.json", "Apache-2.0") +
                   entry("data/tok/merges.txt", "Apache-2.0") + entry("data/tok/tokenizer_config.json", "Other"))
        result = self.run_check()
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_entry_with_several_paths_covers_each(self):
        self.write("NOTICE", "Path:    data/a\nPath:    data/sub/b\nWhat:    x\nOrigin:  y\nLicence: MIT\n")
        self.write("data/a")
        self.write("data/sub/b")
        self.assertEqual(self.run_check().returncode, 0)
        self.write("data/sub/c")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("data/sub/c", result.stderr)

    def test_entry_without_licence_fails(self):
        self.write("NOTICE", "Path:    data/a\nWhat:    x\nOrigin:  y\n")
        self.write("data/a")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("'data/a' has no Licence", result.stderr)

    def test_missing_notice_fails(self):
        self.write("data/a")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("NOTICE", result.stderr)

    def test_entry_for_absent_file_is_only_a_note(self):
        self.write("NOTICE", entry("data/a") + entry("data/later.json"))
        self.write("data/a")
        result = self.run_check()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("'data/later.json' matches no file", result.stdout)


if __name__ == "__main__":
    SCRIPT = os.path.join(sys.argv.pop(1), "scripts", "check-notice.py")
    unittest.main(verbosity=2)
