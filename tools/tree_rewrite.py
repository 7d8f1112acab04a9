"""What the tree-moving scripts (move_server_into_rooms.py, rename_server_modules.py)
share: git, the clean-tree check, and rewriting every tracked text file through one
function."""

import subprocess
import sys
from typing import Callable, Iterable


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def require_clean_tree() -> None:
    if git("status", "--porcelain").strip():
        sys.exit("the tree is not clean")


def rewrite_tracked_files(rewrite: Callable[[str, str], str], skip: Iterable[str]) -> None:
    """Writes rewrite(path, text) back to each tracked UTF-8 file not in `skip` whose
    text it changes (binary files and the paths of a move in progress are left alone)."""
    skipped = set(skip)
    for path in git("ls-files").split("\n"):
        if not path or path in skipped:
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        new = rewrite(path, text)
        if new != text:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(new)
