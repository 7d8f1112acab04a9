#!/usr/bin/env python3
"""Writes docs/python.md's table of the Loader's arguments from the one table of them,
python/shardcast/options.py (OPTIONS), between its two marker lines; --check only says
whether the file is up to date (exit 1 if not). tests/python/test_loader_arguments.py
checks the same. Needs the built extension (for the ranges):

    PYTHONPATH=python:build/python /usr/bin/python3 python/generate_options_doc.py
"""

import argparse
import sys
from pathlib import Path

from shardcast import options

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def rendered(text: str) -> str:
    """`text` with the part between the markers replaced by the table's rendering."""
    head, rest = text.split(options.DOC_TABLE_BEGIN, 1)
    _, tail = rest.split(options.DOC_TABLE_END, 1)
    return (
        head
        + options.DOC_TABLE_BEGIN
        + "\n\n"
        + options.markdown_table()
        + "\n"
        + options.DOC_TABLE_END
        + tail
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    text = DOC.read_text()
    new = rendered(text)
    if args.check:
        if new != text:
            print(f"{DOC} is not what {options.__file__} renders: run {sys.argv[0]}")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
