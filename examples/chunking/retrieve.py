"""Retrieve chunks for each question of a golden set with BM25, offline, and write the golden set
with each case's retrieved chunks (best first) as its ``contexts``.

    python examples/chunking/retrieve.py GOLDEN CHUNKS --k 5 --out cases.jsonl

BM25 is rank-bm25's ``BM25Okapi`` over lower-cased words (``pip install 'ragbridge[examples]'``).
Each retrieved chunk keeps its id, text, place (doc, start, end) and BM25 score.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("golden", type=Path)
    parser.add_argument("chunks", type=Path)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise SystemExit("this example needs rank-bm25: pip install 'ragbridge[examples]'") from None
    chunks = [json.loads(line) for line in args.chunks.read_text(encoding="utf-8").splitlines() if line]
    bm25 = BM25Okapi([words(c["text"]) for c in chunks])
    out = []
    for line in args.golden.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        case = json.loads(line)
        scores = bm25.get_scores(words(case["question"]))
        best = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))[: args.k]
        case["contexts"] = [{**chunks[i], "score": round(float(scores[i]), 4)} for i in best]
        out.append(json.dumps(case, ensure_ascii=False))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"{len(out)} cases with their top {args.k} chunks written to {args.out}")


if __name__ == "__main__":
    main()
