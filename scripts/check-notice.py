#!/usr/bin/env python3
"""Fails when a file under data/ or tests/data/ has no entry in NOTICE.

Usage: scripts/check-notice.py [SOURCE_ROOT]

NOTICE entries are blocks of "Path:", "What:", "Origin:" and "Licence:" fields (a field may
continue on indented lines; an entry may start with several "Path:" lines that share the rest).
A Path ending in "/" is a folder and covers every file below it, except tokenizer files: those
come from model releases under their own licences, so each one must be named by an entry of its
own and a folder never covers it by accident.

Every file on disk is checked, tracked by git or not, so a file copied in and not yet committed
fails too. Entries that match no file are reported but are not an error: they may describe data
that another branch adds.
"""
import os
import re
import sys

SCANNED_ROOTS = ("data", "tests/data")
FIELDS = ("Path", "What", "Origin", "Licence")
# Names of tokenizer files as model releases publish them (Hugging Face tokenizer folders).
EXPLICIT_ONLY_NAMES = frozenset({
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "tokenizer.json",
    "special_tokens_map.json",
    "added_tokens.json",
})
FIELD_LINE = re.compile(r"^(%s):\s*(.*)$" % "|".join(FIELDS))


class NoticeError(Exception):
    pass


def parse_entries(text, notice_name="NOTICE"):
    """Returns the entries of NOTICE in file order: dicts with "paths" (a list), the other three
    fields as strings, and "line" (where the entry starts)."""
    entries = []
    current = None
    last_field = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FIELD_LINE.match(line)
        if match:
            field, value = match.groups()
            value = value.strip()
            if field == "Path":
                if last_field != "Path":
                    current = {"line": number, "paths": []}
                    entries.append(current)
                current["paths"].append(value)
            elif current is None:
                raise NoticeError(f"{notice_name}:{number}: '{field}:' before any 'Path:'")
            elif field in current:
                raise NoticeError(f"{notice_name}:{number}: the entry has '{field}:' twice")
            else:
                current[field] = value
            last_field = field
        elif current is not None and line.startswith(" ") and line.strip() and last_field not in (None, "Path"):
            current[last_field] += " " + line.strip()
        else:
            # A blank or unindented line ends the entry's last field.
            last_field = None
    for entry in entries:
        missing = [f for f in FIELDS[1:] if not entry.get(f)]
        if missing:
            raise NoticeError("{}:{}: the entry for '{}' has no {}".format(
                notice_name, entry["line"], entry["paths"][0], ", ".join(missing)))
        for path in entry["paths"]:
            if not path or path.startswith("/") or ".." in path.split("/") or " " in path:
                raise NoticeError(f"{notice_name}:{entry['line']}: '{path}' is not a relative path")
    return entries


def covers(entry_path, file_path):
    """Whether an entry's Path covers a file (both relative to the source root, '/'-separated)."""
    if entry_path.endswith("/"):
        return file_path.startswith(entry_path) and os.path.basename(file_path) not in EXPLICIT_ONLY_NAMES
    return file_path == entry_path


def shipped_files(root):
    """Every file under the scanned roots, relative to root, sorted."""
    found = []
    for scanned in SCANNED_ROOTS:
        top = os.path.join(root, scanned)
        for folder, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                found.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(found)


def check(root):
    """Returns (every file checked, files no entry covers, entry paths that cover no file).

    Raises NoticeError when NOTICE is missing or malformed."""
    notice = os.path.join(root, "NOTICE")
    try:
        with open(notice, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise NoticeError(f"cannot read {notice}: {e.strerror}") from e
    paths = [path for entry in parse_entries(text, notice) for path in entry["paths"]]
    files = shipped_files(root)
    uncovered = [f for f in files if not any(covers(path, f) for path in paths)]
    unused = [path for path in paths if not any(covers(path, f) for f in files)]
    return files, uncovered, unused


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        files, uncovered, unused = check(root)
    except NoticeError as e:
        print(f"check-notice: {e}", file=sys.stderr)
        return 1
    for path in unused:
        print(f"check-notice: note: the NOTICE entry '{path}' matches no file in this tree")
    if uncovered:
        print("check-notice: these files have no entry in NOTICE (add one with Path, What, Origin and "
              "Licence; tokenizer files need an entry each):", file=sys.stderr)
        for path in uncovered:
            print(f"  {path}", file=sys.stderr)
        return 1
    print(f"check-notice: all {len(files)} files under {' and '.join(SCANNED_ROOTS)} have an entry in NOTICE")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
