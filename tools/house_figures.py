#!/usr/bin/env python3
"""Figures of the code's shape at a git revision, for before/after comparisons of a
refactoring (issue 36's closing note): files and lines per folder, the longest
functions, and the places outside tests that sleep or read the real clock.

  tools/house_figures.py [REV ...]      default: HEAD; several revisions side by side

Reads the committed tree of each revision (git ls-tree / git show), never the work tree.
A function is found by Google style's layout: a definition starts at column 0 and its
body ends at the next `}` at column 0 (functions inside namespaces are not indented);
functions defined inside a class body are not counted (they are short by habit).
"""
import collections
import re
import subprocess
import sys

SOURCE = re.compile(r"\.(cc|h)$")
FOLDERS = [
    "server",
    "client",
    "common",
    "proto",
    "python/native",
    "tools/pack",
    "tests",
    "bench",
    "fuzz",
]
REAL_CLOCK = re.compile(r"SleepFor|absl::Now\(\)")
NOT_A_FUNCTION = re.compile(
    r"^(namespace|class|struct|enum|union|using|typedef|template|#|//|}|"
    r"extern|static_assert|ABSL_|TEST|INSTANTIATE|MATCHER)"
)


def git(*args):
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def files_at(rev):
    return [p for p in git("ls-tree", "-r", "--name-only", rev).splitlines() if SOURCE.search(p)]


def text_at(rev, path):
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"],
        check=True,
        capture_output=True,
        text=True,
        errors="replace",
    ).stdout


def folder_of(path):
    for folder in FOLDERS:
        if path.startswith(folder + "/"):
            # server/ and client/ by room: where a file sits says what it is for.
            parts = path.split("/")
            if folder in ("server", "client", "common") and len(parts) > 2:
                return "/".join(parts[:2]) + "/"
            return folder + "/"
    return None


def functions(lines):
    """Yields (first line number, length in lines, signature) of top-level definitions."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if (
            line
            and not line[0].isspace()
            and "(" in line
            and not NOT_A_FUNCTION.match(line)
            and not line.rstrip().endswith(";")
        ):
            start = i
            while (
                i < len(lines)
                and not lines[i].rstrip().endswith("{")
                and not lines[i].rstrip().endswith(";")
                and i - start < 12
            ):
                i += 1
            if i < len(lines) and lines[i].rstrip().endswith("{"):
                end = i + 1
                while end < len(lines) and not lines[end].startswith("}"):
                    end += 1
                yield start + 1, end - start + 1, line.strip()[:70]
                i = end
        i += 1


def figures(rev):
    per_folder = collections.OrderedDict((f + "/", [0, 0]) for f in FOLDERS)
    longest, clock = [], []
    for path in files_at(rev):
        folder = folder_of(path)
        if folder is None:
            continue
        text = text_at(rev, path)
        lines = text.splitlines()
        per_folder.setdefault(folder, [0, 0])
        per_folder[folder][0] += 1
        per_folder[folder][1] += len(lines)
        production = not path.startswith(("tests/", "bench/", "fuzz/")) and "_test" not in path
        if production and path.endswith(".cc"):
            for number, length, signature in functions(lines):
                longest.append((length, f"{path}:{number}", signature))
            clock += [f"{path}:{n + 1}" for n, l in enumerate(lines) if REAL_CLOCK.search(l)]
    longest.sort(reverse=True)
    return per_folder, longest, clock


def main():
    revs = sys.argv[1:] or ["HEAD"]
    results = {rev: figures(rev) for rev in revs}
    names = [git("rev-parse", "--short", rev).strip() for rev in revs]
    print("## Files and lines per folder\n")
    print("| folder | " + " | ".join(f"{n} files | {n} lines" for n in names) + " |")
    print("|---|" + "---|---|" * len(revs))
    folders = []
    for rev in revs:
        folders += [f for f in results[rev][0] if f not in folders]
    for folder in sorted(folders):
        cells = []
        for rev in revs:
            files, lines = results[rev][0].get(folder, [0, 0])
            cells += [str(files), str(lines)]
        if any(c != "0" for c in cells):
            print(f"| {folder} | " + " | ".join(cells) + " |")
    for rev, name in zip(revs, names):
        per_folder, longest, clock = results[rev]
        lengths = sorted(length for length, _, _ in longest)
        median = lengths[len(lengths) // 2] if lengths else 0
        over = sum(1 for n in lengths if n > 60)
        print(
            f"\n## {name}: {len(lengths)} top-level functions in production .cc files, median "
            f"{median} lines, {over} over 60 lines; the ten longest\n"
        )
        for length, where, signature in longest[:10]:
            print(f"- {length:4d} lines  {where}  `{signature}`")
        print(
            f"\n## {name}: {len(clock)} places outside tests that sleep or read the real clock "
            f"(SleepFor, absl::Now())\n"
        )
        for where in clock:
            print(f"- {where}")


if __name__ == "__main__":
    main()
