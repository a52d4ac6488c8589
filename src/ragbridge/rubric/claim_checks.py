"""Claims of the answer and of the reference, each checked against each retrieved chunk and against
the other text: the judge calls behind the claim diagnostics (`ragbridge.rubric.diagnostics`).

The calls of one case (``check`` and ``split`` prompts, `ragbridge.rubric.prompts`):

* one ``split`` of the answer and one of the reference answer into claims;
* one ``check`` of the answer's claims against the reference, one of the reference's claims
  against the answer;
* one ``check`` per retrieved chunk holding every claim of both (batched: the answer's claims and
  the reference's, each claim once), so a case with k chunks costs 4 + k calls. Chunks with the
  same text are checked once.

Each metric asks only for the parts its formula reads (`judge_claim_checks`), and the requests of a
part are the same whichever metric asks: the judge gateway's cache and its one-call-per-request in
flight make the ten metrics of a case cost those 4 + k calls once (with the judge cache off, each
metric asks again). The chunk checks always hold the answer's claims too when the case has an
answer, so that every metric sends the same request for a chunk.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from ..schema import Case, ClaimChecks
from . import prompts
from .parse import Asker, check_claims, check_verdicts
from .rubrics import Rubric

__all__ = ["CRITERION", "PARTS", "judge_claim_checks"]

#: the criterion the split and check prompts of the claim diagnostics name (its hash is their digest)
CRITERION = Rubric(
    name="claim_checks",
    question="Which claims of the answer and of the reference answer does each retrieved passage state, "
             "and which claims of each answer does the other state?",
    fields=("question", "reference", "contexts", "answer"),
    mode="claims",
)
#: the parts of a `ClaimChecks` a metric can ask for
PARTS = ("answer_in_reference", "reference_in_answer", "answer_in_chunks", "reference_in_chunks")


async def _split(asker: Asker, case: Case, of_reference: bool) -> list[str]:
    return await asker.ask(prompts.split_messages(CRITERION, case, of_reference), prompts.schema_claims(),
                           "claims", check_claims)


async def _check(asker: Asker, case: Case, claims: list[str], text: str, what: str) -> list[str]:
    """The verdict of each claim against ``text`` (no call when there is no claim)."""
    if not claims:
        return []
    n = len(claims)
    verdicts = await asker.ask(prompts.check_messages(CRITERION, case.question, claims, text, what),
                               prompts.schema_checks(), "claim_checks",
                               lambda obj: check_verdicts(obj, n, reasons=False))
    return [v for v, _ in verdicts]


async def judge_claim_checks(asker: Asker, case: Case, parts: Iterable[str]) -> ClaimChecks:
    """The ``parts`` (of `PARTS`) of ``case``'s claim checks, with the claims and chunk ids they
    index; the parts not asked for are None."""
    parts = set(parts)
    unknown = parts - set(PARTS)
    if unknown:
        raise ValueError(f"unknown claim-check parts: {', '.join(sorted(unknown))}")
    chunks = bool(parts & {"answer_in_chunks", "reference_in_chunks"})
    has_answer = bool(case.answer and case.answer.strip())
    want_answer = has_answer and (chunks or "answer_in_reference" in parts)
    want_reference = chunks or "reference_in_answer" in parts
    answer_claims, reference_claims = await asyncio.gather(
        _split(asker, case, False) if want_answer else _none(),
        _split(asker, case, True) if want_reference else _none())
    out = ClaimChecks(answer_claims=answer_claims, reference_claims=reference_claims)
    jobs = {}
    if "answer_in_reference" in parts:
        jobs["answer_in_reference"] = _check(asker, case, answer_claims or [], case.reference or "",
                                             "reference")
    if "reference_in_answer" in parts:
        jobs["reference_in_answer"] = _check(asker, case, reference_claims or [], case.answer or "", "answer")
    if chunks:
        jobs["chunks"] = _check_chunks(asker, case, answer_claims or [], reference_claims or [])
    done = dict(zip(jobs, await asyncio.gather(*jobs.values())))
    for part in ("answer_in_reference", "reference_in_answer"):
        if part in done:
            setattr(out, part, done[part])
    if chunks:
        by_answer, by_reference = done["chunks"]
        out.chunk_ids = [c.id for c in case.contexts]
        if "answer_in_chunks" in parts:
            out.answer_in_chunks = by_answer
        if "reference_in_chunks" in parts:
            out.reference_in_chunks = by_reference
    return out


async def _none() -> None:
    return None


async def _check_chunks(asker: Asker, case: Case, answer_claims: list[str],
                        reference_claims: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """Per claim, its verdict against each chunk: (answer claims x chunks, reference claims x chunks).
    One call per distinct chunk text, holding every distinct claim of both."""
    claims = list(dict.fromkeys([*answer_claims, *reference_claims]))
    texts = list(dict.fromkeys(c.text for c in case.contexts))
    verdicts = await asyncio.gather(*(_check(asker, case, claims, t, "chunk") for t in texts))
    by_text = {t: dict(zip(claims, v)) for t, v in zip(texts, verdicts)}
    per_chunk = [by_text[c.text] for c in case.contexts]
    return ([[pc[claim] for pc in per_chunk] for claim in answer_claims],
            [[pc[claim] for pc in per_chunk] for claim in reference_claims])
