"""Chunk the example corpus two ways, writing one chunk a line (id, text, doc, start, end).

    python examples/chunking/chunk.py CORPUS --by heading --out chunks.jsonl
    python examples/chunking/chunk.py CORPUS --size 300 --overlap 100 --out chunks.jsonl

``--by heading`` cuts each markdown document before every heading (a section a chunk); ``--size N
--overlap M`` cuts windows of N characters every N - M characters, moved back to the last space so
that no word is cut. Chunk ids are ``<doc>#<n>``: they name a chunk of this chunking only.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def by_heading(text: str) -> list[tuple[int, int]]:
    starts = [0] + [m.start() for m in re.finditer(r"^#{1,6} ", text, re.M) if m.start() > 0]
    return [(s, e) for s, e in zip(starts, starts[1:] + [len(text)]) if text[s:e].strip()]


def windows(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    out, start = [], 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text) and " " in text[start:end]:
            end = text.rindex(" ", start, end)  # no word cut in two
        out.append((start, end))
        if end == len(text):
            break
        start = max(end - overlap, start + 1)
        if start > 0 and text[start - 1] != " " and " " in text[start:end]:
            start = text.index(" ", start) + 1  # start at a word
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--by", choices=["heading"])
    parser.add_argument("--size", type=int)
    parser.add_argument("--overlap", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if (args.by is None) == (args.size is None):
        parser.error("give --by heading or --size N")
    lines = []
    for path in sorted(args.corpus.glob("*.md")):
        text = path.read_bytes().decode("utf-8")
        cuts = by_heading(text) if args.by else windows(text, args.size, args.overlap)
        for n, (start, end) in enumerate(cuts):
            chunk = {"id": f"{path.name}#{n}", "text": text[start:end], "doc": path.name,
                     "start": start, "end": end}
            lines.append(json.dumps(chunk, ensure_ascii=False))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} chunks written to {args.out}")


if __name__ == "__main__":
    main()
