"""What the sm_90 compile scripts (``sm90_backward.py``, ``sm90_linear_attention.py``) share: their command line,
the table they print a row at a time and write as JSON, and the SASS instruction counts."""

from __future__ import annotations

import argparse
import json
import pathlib
import re
from collections.abc import Callable, Iterator


def count(pattern: str, text: str) -> int:
    """How many times ``pattern`` matches in ``text`` (``^`` and ``$`` at every line)."""
    return len(re.findall(pattern, text, re.M))


def main(doc: str, table: Callable[[Callable[[str], bool]], Iterator[tuple[str, dict, str]]]) -> None:
    """``python <script> [--only NAME ...] [--json PATH]``: ``table(wanted)`` yields ``(name, row, line)`` for each
    case whose name ``wanted`` accepts (any of the ``--only`` substrings, or all); each line is printed as it
    comes, and ``--json`` also writes the rows by name."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="case names (substrings) to compile")
    ap.add_argument("--json", type=pathlib.Path, help="also write the table as JSON here")
    args = ap.parse_args()
    rows = {}
    for name, row, line in table(lambda name: not args.only or any(s in name for s in args.only)):
        rows[name] = row
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
