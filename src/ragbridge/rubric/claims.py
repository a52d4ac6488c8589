"""Claim-level faithfulness: split the answer into claims, then judge every claim against the context.

Two judge calls per answer, each with a fixed system prompt (`prompts.split_messages`,
`prompts.verify_messages`): the first returns the answer's claims, the second one verdict per claim,
*batched* (all claims of the answer in one call, numbered, each verdict naming its claim's number;
the parser requires exactly one verdict per claim). Batching keeps the cost at two calls whatever the
number of claims; the verdicts are independent in the prompt's terms (each is decided from the
passages alone).

value = SUPPORTED claims / claims. An answer with no claim (a greeting, a plain decline) is
undefined, with the reason, never 0 or 1. Every claim, with its verdict and the judge's reason, is in
``Score.evidence.claims``; the reason names every unsupported claim verbatim. ``passed`` is True
when every claim is supported.
"""

from __future__ import annotations

from ..schema import Case, ClaimVerdict, Evidence
from . import prompts
from .parse import Asker, check_claims, check_verdicts
from .rubrics import Rubric

__all__ = ["judge_claims", "claims_reason"]


async def judge_claims(asker: Asker, rubric: Rubric, case: Case) -> tuple[list[ClaimVerdict], Evidence]:
    """The answer's claims with their verdicts."""
    claims = await asker.ask(prompts.split_messages(rubric, case), prompts.schema_claims(), "claims",
                             check_claims)
    if not claims:
        return [], Evidence(claims=[])
    n = len(claims)
    verdicts = await asker.ask(prompts.verify_messages(rubric, case, claims), prompts.schema_verdicts(rubric),
                               "claim_verdicts", lambda obj: check_verdicts(obj, n))
    judged = [ClaimVerdict(text=c, verdict=v, reason=r) for c, (v, r) in zip(claims, verdicts)]
    return judged, Evidence(claims=judged)


def claims_reason(judged: list[ClaimVerdict]) -> str:
    """``k of n claims supported``, then each unsupported claim verbatim with its verdict."""
    bad = [c for c in judged if c.verdict != "SUPPORTED"]
    head = f"{len(judged) - len(bad)} of {len(judged)} claims supported"
    if not bad:
        return head
    return head + "; " + "; ".join(f'{c.verdict}: "{c.text}" ({c.reason})' for c in bad)
