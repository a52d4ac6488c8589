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
`ClaimEvidence.layer_of_wrong_answer` turns the first finding that holds into the layer of a
faithful answer found wrong (`ragbridge.analysis.diagnose`, docs/diagnose.md rules 3b-3f), with the
reason naming the claim and the chunk that decided it.
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

    def wrong_claims(self) -> dict[str, Any]:
        """``{"wrong_claims": [...]}``: each claim of the answer the reference does not state, with the
        chunks that state it (empty without those checks)."""
        if self.lacks("answer_in_reference", "answer_in_chunks") or not self.answer_claims:
            return {}
        triples = zip(self.answer_claims, self.answer_in_reference, self.answer_in_chunks)
        rows = [{"claim": claim, "against_reference": v,
                 "stated_by": [self.chunk_ids[i] for i, x in enumerate(row) if x == "SUPPORTED"]}
                for claim, v, row in triples if v != "SUPPORTED"]
        return {"wrong_claims": rows} if rows else {}

    def layer_of_wrong_answer(self, named: str) -> tuple[str, str, dict[str, Any], list[str]]:
        """The layer of an answer found wrong by ``named`` (the deciding score, as the reason shows
        it), from the first finding that holds: right by the reference (``reference_or_judge``); a
        chunk it follows against the reference (``knowledge_base``); a reference claim a chunk holds
        and it omits, then a wrong claim in no chunk (``generation``); else ``undetermined``.
        Returns the layer, the reason, the details and what is missing (for ``undetermined``)."""
        wrong = self.wrong_claims()
        if self.right_by_reference():
            return "reference_or_judge", (
                f"the claim checks find the answer right by the reference (each of its "
                f"{len(self.answer_claims)} claim(s) in the reference, each of the reference's "
                f"{len(self.reference_claims)} in the answer), yet {named}: check the judge"), \
                {"claims": {"right_by_reference": True}}, []
        against = self.followed_against_reference()
        if against:
            f = against[0]
            return "knowledge_base", (
                f"the answer follows a chunk that contradicts the reference: {named}; "
                f"{quoted(f['answer_claim'])} is stated by {f['chunk']} (rank {f['rank']}), which "
                f"contradicts the reference's {quoted(f['reference_claim'])}"), \
                {"claims": {"followed_against_reference": against}, **wrong}, []
        omitted = self.omitted()
        if omitted:
            f = omitted[0]
            instead = (f"; the answer states {quoted(f['instead'][0])} from that chunk instead"
                       if f["instead"] else "")
            return "generation", (
                f"the chunks hold the reference's claim and the answer does not state it: {named}; "
                f"{quoted(f['reference_claim'])} is stated by {self.chunk(f['first'])}{instead}"), \
                {"claims": {"omitted": omitted}, **wrong}, []
        invented = self.invented()
        if invented:
            return "generation", (
                f"the answer states a claim no chunk entails: {named}; {quoted(invented[0]['answer_claim'])} "
                "is in no retrieved chunk, and the reference does not state it"), \
                {"claims": {"invented": invented}, **wrong}, []
        lacking = self.lacks(*_PARTS)
        if lacking:
            missing = [f"claim checks without {', '.join(lacking)} (score the claim_diagnostics group)"]
        else:
            silent = [r for j, r in enumerate(self.reference_claims or [])
                      if not {"SUPPORTED", "CONTRADICTED"} & set(self.reference_in_chunks[j])]
            missing = [f"no retrieved chunk states or contradicts the reference's {quoted(silent[0])}"
                       if silent else "no chunk the answer follows contradicts the reference",
                       "a human label on answer_correctness would settle it"]
        shown = []
        if wrong:
            w = wrong["wrong_claims"][0]
            by = ", ".join(w["stated_by"]) or "no chunk"
            shown = [f"the answer's {quoted(w['claim'])} is stated by {by} and not by the reference"]
        return "undetermined", (f"{named}, but the claim checks do not say which layer: "
                                + "; ".join(shown + missing)), wrong, missing


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
