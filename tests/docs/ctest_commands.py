#!/usr/bin/env python3
"""Every `ctest` command the documentation gives a reader must run from where the reader
stands and select a test.

  ctest_commands.py ROOT BUILD_DIR

The course's commands run from the repository root, where ctest finds no tests: it prints
"No tests were found!!!" and exits 0, so a reader would take the check for passed. So each
`ctest ...` in backquotes of a Markdown file (docs/benchmarks/ excepted: raw records of
commands as they were run) must name its build directory (`--test-dir build`) or a preset
(`--preset NAME`), and each -R / -L filter in it must select at least one test of this
build (BUILD_DIR, listed with `ctest -N`). Exits 1 naming each command that does not.
"""
import pathlib
import re
import shlex
import subprocess
import sys


def commands(text):
    """The `ctest ...` spans of a Markdown text, a span that wraps joined into one line."""
    for match in re.finditer(r"`(ctest\s[^`]+)`", text):  # `ctest` alone names the tool
        yield " ".join(match.group(1).split()), text.count("\n", 0, match.start()) + 1


def selected(build_dir, words):
    """How many tests of build_dir the filters in words (-R X, -L X, -E X, -N, ...) select."""
    filters = []
    for i, word in enumerate(words):
        if word in ("-R", "-L", "-E", "-LE") and i + 1 < len(words):
            filters += [word, words[i + 1]]
    listed = subprocess.run(["ctest", "--test-dir", build_dir, "-N", *filters], capture_output=True, text=True)
    found = re.search(r"Total Tests: (\d+)", listed.stdout)
    return int(found.group(1)) if found else 0


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ctest_commands.py ROOT BUILD_DIR")
    root, build_dir = pathlib.Path(sys.argv[1]), sys.argv[2]
    bad, checked = [], 0
    for path in sorted(root.rglob("*.md")):
        relative = path.relative_to(root)
        top = relative.parts[0]
        if top.startswith(("build", "runs", "third_party", ".")) or relative.parts[:2] == ("docs", "benchmarks"):
            continue  # build trees, run outputs, vendored files; the benchmarks' raw records
        for command, line in commands(path.read_text(encoding="utf-8")):
            checked += 1
            words = shlex.split(command)
            where = f"{relative}:{line}: `{command}`"
            if "--test-dir" not in words and not any(w == "--preset" or w.startswith("--preset=") for w in words):
                bad.append(f"{where} names no build directory (--test-dir build): from the root it finds no test")
            elif any(w in ("-R", "-L") for w in words) and selected(build_dir, words) == 0:
                bad.append(f"{where} selects no test of this build")
    for line in bad:
        print("FAIL", line)
    print(f"{checked} ctest commands in the documentation, {len(bad)} wrong")
    if checked == 0:
        sys.exit("FAIL: no ctest command found: the pattern no longer reads the documentation")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
