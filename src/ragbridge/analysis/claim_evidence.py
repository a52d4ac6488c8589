"""What a case's claim checks say about its answer: the evidence the diagnosis follows past retrieval.

The rubric backend's claim diagnostics (`ragbridge.rubric.diagnostics`) record, in each score's
``evidence.claim_checks``, the claims of the answer and of the reference and their verdicts against
each retrieved chunk and against each other (`ragbridge.schema.ClaimChecks`; each score holds the
parts its formula reads). `case_claims` merges a case's parts into one `ClaimEvidence`, whose
methods name the claims and chunks behind each finding:

* `ClaimEvidence.omitted`: reference claims some chunk states (SUPPORTED) that the answer does not
  state: the generator had them and left them out (RAGChecker's context utilization below 1);
* `ClaimEvidence.invented`: answer claims no chunk states that the reference does not state either
  (RAGChecker's hallucination);
* `ClaimEvidence.followed_against_reference`: wrong answer claims taken from a chunk that itself
  contradicts the reference (CONTRADICTED against a reference claim) and states none of its claims:
  the chunk is what is wrong;
* `ClaimEvidence.right_by_reference`: every answer claim is in the reference and every reference
  claim in the answer;
* `ClaimEvidence.in_no_chunk`: answer claims no chunk states, right or wrong.

A finding needs the parts it reads; `ClaimEvidence.lacks` names what is missing for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..schema import ClaimChecks, Score

__all__ = ["ClaimEvidence", "case_claims", "quoted"]

_PARTS = ("answer_in_reference", "reference_in_answer", "answer_in_chunks", "reference_in_chunks")


def quoted(text: str, n: int = 90) -> str:
    """``text`` on one line in double quotes, cut to about ``n`` characters."""
    t = " ".join(text.split())
    return f'"{t if len(t) <= n else t[: n - 3].rstrip() + "..."}"'


@dataclass
class ClaimEvidence:
    """A case's claim checks, merged from its scores (`case_claims`); parts no score holds are None."""

    answer_claims: Optional[list[str]] = None
    reference_claims: Optional[list[str]] = None
    chunk_ids: list[str] = field(default_factory=list)
    answer_in_chunks: Optional[list[list[str]]] = None
    reference_in_chunks: Optional[list[list[str]]] = None
    answer_in_reference: Optional[list[str]] = None
    reference_in_answer: Optional[list[str]] = None

    def chunk(self, k: int) -> str:
        """Chunk ``k`` by id and rank (its place in the retrieved list)."""
        return f"{self.chunk_ids[k]} (rank {k + 1})"

    def lacks(self, *parts: str) -> list[str]:
        """The ``parts`` no score of the case holds."""
        return [p for p in parts if getattr(self, p) is None]

    # each finding: a list of dicts naming the claims and chunks behind it (empty: none found, or a
    # part it reads is missing)

    def omitted(self) -> list[dict[str, Any]]:
        if self.lacks("reference_in_chunks", "reference_in_answer"):
            return []
        out = []
        for j, claim in enumerate(self.reference_claims or []):
            holders = [k for k, v in enumerate(self.reference_in_chunks[j]) if v == "SUPPORTED"]
            if holders and self.reference_in_answer[j] != "SUPPORTED":
                out.append({"reference_claim": claim, "in_answer": self.reference_in_answer[j],
                            "chunks": [self.chunk_ids[k] for k in holders], "first": holders[0],
                            "instead": self._answer_claims_from(holders[0])})
        return out

    def _answer_claims_from(self, k: int) -> list[str]:
        """The answer's claims that chunk ``k`` states and the reference does not."""
        if self.lacks("answer_in_chunks", "answer_in_reference"):
            return []
        return [a for i, a in enumerate(self.answer_claims or [])
                if self.answer_in_chunks[i][k] == "SUPPORTED" and self.answer_in_reference[i] != "SUPPORTED"]

    def in_no_chunk(self) -> list[str]:
        if self.lacks("answer_in_chunks"):
            return []
        return [a for a, row in zip(self.answer_claims or [], self.answer_in_chunks)
                if "SUPPORTED" not in row]

    def invented(self) -> list[dict[str, Any]]:
        if self.lacks("answer_in_chunks", "answer_in_reference"):
            return []
        rows = zip(self.answer_claims or [], self.answer_in_chunks, self.answer_in_reference)
        return [{"answer_claim": a, "against_reference": v} for a, row, v in rows
                if "SUPPORTED" not in row and v != "SUPPORTED"]

    def followed_against_reference(self) -> list[dict[str, Any]]:
        if self.lacks("answer_in_chunks", "answer_in_reference", "reference_in_chunks"):
            return []
        refs = self.reference_claims or []
        out = []
        for i, a in enumerate(self.answer_claims or []):
            if self.answer_in_reference[i] == "SUPPORTED":
                continue
            for k, v in enumerate(self.answer_in_chunks[i]):
                column = [self.reference_in_chunks[j][k] for j in range(len(refs))]
                if v != "SUPPORTED" or "SUPPORTED" in column or "CONTRADICTED" not in column:
                    continue
                out.append({"answer_claim": a, "chunk": self.chunk_ids[k], "rank": k + 1, "index": k,
                            "reference_claim": refs[column.index("CONTRADICTED")]})
                break
        return out

    def right_by_reference(self) -> bool:
        if self.lacks("answer_in_reference", "reference_in_answer") or not self.answer_claims \
                or not self.reference_claims:
            return False
        return all(v == "SUPPORTED" for v in [*self.answer_in_reference, *self.reference_in_answer])


def case_claims(scores: Sequence[Score]) -> Optional[ClaimEvidence]:
    """The claim checks the case's scores hold, merged (the first backend whose scores hold them);
    None when no score holds any."""
    found = [(s.backend, s.evidence.claim_checks) for s in scores
             if s.evidence is not None and s.evidence.claim_checks is not None]
    if not found:
        return None
    backend = found[0][0]
    out = ClaimEvidence()
    for b, cc in found:
        if b != backend:
            continue
        _merge(out, cc)
    return out


def _merge(out: ClaimEvidence, cc: ClaimChecks) -> None:
    for name in ("answer_claims", "reference_claims"):
        if getattr(out, name) is None and getattr(cc, name) is not None:
            setattr(out, name, list(getattr(cc, name)))
    if cc.chunk_ids and not out.chunk_ids:
        out.chunk_ids = list(cc.chunk_ids)
    for part in _PARTS:
        value = getattr(cc, part)
        if getattr(out, part) is None and value is not None:
            # the claims a part indexes are the case's (one split, shared by every metric)
            setattr(out, part, [list(row) if isinstance(row, list) else row for row in value])
