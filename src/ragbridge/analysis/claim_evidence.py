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
* `ClaimEvidence.followed_against_reference`: wrong answer claims taken from chunks that themselves
  contradict a claim of the reference (CONTRADICTED against it; preferably one the answer does not
  state): the chunks are what is wrong, whatever else they hold;
* `ClaimEvidence.right_by_reference`: every answer claim is in the reference and every reference
  claim in the answer;
* `ClaimEvidence.in_no_chunk`: answer claims no chunk states, right or wrong (`ClaimEvidence.where`:
  contradicted by a chunk, or in none).

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

    def contradicting(self, claim: str) -> Optional[int]:
        """The first chunk (by rank) that contradicts the answer's ``claim``; None when none does (or
        the checks lack the answer's claims against the chunks)."""
        if self.lacks("answer_in_chunks") or claim not in (self.answer_claims or []):
            return None
        row = self.answer_in_chunks[(self.answer_claims or []).index(claim)]
        return next((k for k, v in enumerate(row) if v == "CONTRADICTED"), None)

    def where(self, claim: str) -> Optional[str]:
        """Where the answer's ``claim``, when no chunk states it, stands: contradicted by a chunk (the
        first), else in no retrieved chunk; None when a chunk states it or the checks do not hold it."""
        k = self.contradicting(claim)
        if k is not None:
            return f"contradicted by {self.chunk(k)}"
        return "in no retrieved chunk" if claim in self.in_no_chunk() else None

    def followed(self) -> Optional[int]:
        """The first chunk (by rank) stating a claim of the answer; None when none does."""
        if self.lacks("answer_in_chunks"):
            return None
        ks = [k for row in self.answer_in_chunks for k, v in enumerate(row) if v == "SUPPORTED"]
        return min(ks) if ks else None

    def stating(self, j: int) -> list[int]:
        """The chunks (by rank) that state the reference's claim ``j``."""
        if self.lacks("reference_in_chunks"):
            return []
        return [k for k, v in enumerate(self.reference_in_chunks[j]) if v == "SUPPORTED"]

    def chunks_named(self, ks: Sequence[int]) -> str:
        """Chunks by id and rank: ``a (rank 1)``, ``a (rank 1) and b (rank 2)``, ``a (rank 1), b (rank
        2) and 1 more``."""
        shown = [self.chunk(k) for k in ks[:2]]
        more = len(ks) - len(shown)
        return (" and ".join(shown) if not more else f"{', '.join(shown)} and {more} more")

    def invented(self) -> list[dict[str, Any]]:
        if self.lacks("answer_in_chunks", "answer_in_reference"):
            return []
        rows = zip(self.answer_claims or [], self.answer_in_chunks, self.answer_in_reference)
        return [{"answer_claim": a, "against_reference": v} for a, row, v in rows
                if "SUPPORTED" not in row and v != "SUPPORTED"]

    def followed_against_reference(self) -> list[dict[str, Any]]:
        """Per wrong claim of the answer (one the reference does not state): the chunks stating it
        that contradict a claim of the reference, by rank, with the reference's claim they contradict
        (one the answer does not state, if any) and the chunks that state that claim."""
        if self.lacks("answer_in_chunks", "answer_in_reference", "reference_in_chunks"):
            return []
        refs = self.reference_claims or []
        stated = self.reference_in_answer or [None] * len(refs)
        out = []
        for i, a in enumerate(self.answer_claims or []):
            if self.answer_in_reference[i] == "SUPPORTED":
                continue
            ks = [k for k, v in enumerate(self.answer_in_chunks[i]) if v == "SUPPORTED"
                  and any(self.reference_in_chunks[j][k] == "CONTRADICTED" for j in range(len(refs)))]
            if not ks:
                continue
            against = [j for j in range(len(refs)) if self.reference_in_chunks[j][ks[0]] == "CONTRADICTED"]
            j = next((j for j in against if stated[j] != "SUPPORTED"), against[0])
            ks = [k for k in ks if self.reference_in_chunks[j][k] == "CONTRADICTED"]
            out.append({"answer_claim": a, "chunk": self.chunk_ids[ks[0]], "rank": ks[0] + 1, "index": ks[0],
                        "chunks": [self.chunk_ids[k] for k in ks], "reference_claim": refs[j],
                        "reference_stated_by": [self.chunk_ids[k] for k in self.stating(j)],
                        "indices": ks, "stating": self.stating(j)})
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

    def layer_of_wrong_answer(self, named: str, person: Optional[str] = None
                              ) -> tuple[str, str, dict[str, Any], list[str]]:
        """The layer of an answer found wrong by ``named`` (the deciding evidence, as the reason shows
        it), from the first finding that holds: right by the reference (``reference_or_judge``); a
        chunk it follows against the reference (``knowledge_base``); a reference claim a chunk holds
        and it omits, then a wrong claim in no chunk (``generation``); else ``undetermined``.
        ``person``: set when a human label decided that the answer is wrong (the judge's verdict on
        correctness, as the reason shows it, or ""). Returns the layer, the reason, the details and
        what is missing (for ``undetermined``)."""
        wrong = self.wrong_claims()
        if self.right_by_reference():
            counts = (f"each of its {len(self.answer_claims)} claim(s) in the reference, each of the "
                      f"reference's {len(self.reference_claims)} in the answer")
            if person is None:
                return "reference_or_judge", (
                    f"the claim checks find the answer right by the reference ({counts}), yet {named}: "
                    "check the judge"), {"claims": {"right_by_reference": True}}, []
            k = self.followed()
            article = (f", and {self.chunk(k)}, which the answer follows and which states the same"
                       if k is not None else "")
            return "reference_or_judge", (
                f"the claim checks find the answer right by the reference ({counts}), yet a person fails "
                f"it: {named}" + (f"; {person}" if person else "")
                + f": the reference is wrong or out of date: check it{article}"), \
                {"claims": {"right_by_reference": True}}, []
        against = self.followed_against_reference()
        if against:
            f = against[0]
            holders = (f"; {self.chunks_named(f['stating'])} states the reference's claim"
                       if f["stating"] else "")
            verb = "contradicts" if len(f["indices"]) == 1 else "contradict"
            return "knowledge_base", (
                f"the answer follows a chunk that contradicts the reference: {named}; "
                f"{quoted(f['answer_claim'])} is stated by {self.chunks_named(f['indices'])}, which {verb} "
                f"the reference's {quoted(f['reference_claim'])}{holders}"), \
                {"claims": {"followed_against_reference": [
                    {k: v for k, v in x.items() if k not in ("indices", "stating")} for x in against]},
                 **wrong}, []
        omitted = self.omitted()
        if omitted:
            f = omitted[0]
            instead = (f"; the answer states {quoted(f['instead'][0])} from that chunk instead"
                       if f["instead"] else "; the answer states no claim" if not self.answer_claims else "")
            return "generation", (
                f"the chunks hold the reference's claim and the answer does not state it: {named}; "
                f"{quoted(f['reference_claim'])} is stated by {self.chunk(f['first'])}{instead}"), \
                {"claims": {"omitted": omitted}, **wrong}, []
        invented = self.invented()
        if invented:
            claim = invented[0]["answer_claim"]
            return "generation", (
                f"the answer states a claim no chunk entails: {named}; {quoted(claim)} is "
                f"{self.where(claim)}, and the reference does not state it"), \
                {"claims": {"invented": invented}, **wrong}, []
        lacking = self.lacks(*_PARTS)
        if lacking:
            missing = [f"claim checks without {', '.join(lacking)} (score the claim_diagnostics group)"]
        else:
            silent = [r for j, r in enumerate(self.reference_claims or [])
                      if not {"SUPPORTED", "CONTRADICTED"} & set(self.reference_in_chunks[j])]
            first = (f"no retrieved chunk states or contradicts the reference's {quoted(silent[0])}" if silent
                     else "no chunk the answer follows contradicts the reference")
            w = wrong["wrong_claims"][0] if wrong else None
            if person is None:
                settle = ("a human label on answer_correctness would say whether the answer or the reference "
                          "is wrong")
            elif silent:
                settle = ("whether some article states it: if none does, the knowledge base lacks it; if "
                          "one does, retrieval missed it")
            elif w and w["stated_by"]:
                settle = (f"whether {w['stated_by'][0]} is right: if not, the knowledge base is wrong; if "
                          "it is, the generator misapplied it")
            else:
                settle = "which claim of the answer the person found wrong"
            missing = [first, settle]
        shown = []
        if wrong:
            w = wrong["wrong_claims"][0]
            by = ", ".join(w["stated_by"]) or "no chunk"
            shown = [f"the answer's {quoted(w['claim'])} is stated by {by} and not by the reference"]
        held = [(j, r) for j, r in enumerate(self.reference_claims or []) if self.stating(j)] \
            if not lacking else []
        if held:
            j, r = held[0]
            shown.append(f"the reference's {quoted(r)} is stated by {self.chunks_named(self.stating(j))}")
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
