"""Canonical cases to DeepEval test cases, and DeepEval results back to scores.

Everything that touches ``deepeval`` imports it inside the function, so importing this module is cheap
and registering the backend never loads the library.

In memory (`library`, registered through ``ragbridge_register_libraries``): ``ragbridge.load_cases``
and ``ragbridge.evaluate`` read an ``EvaluationDataset`` (its test cases when it has any, else its
goldens), a list of ``Golden`` or ``LLMTestCase``, and rows in DeepEval's keys, with the mapping of
the ``deepeval`` file formats (`ragbridge_deepeval.formats.record_to_canonical`); the test cases'
``name`` and ``tags``, which ``EvaluationDataset.save_as`` drops, are kept. ``to_library(cases,
"deepeval")`` gives an ``EvaluationDataset`` of goldens, ``kind="test_cases"`` a list of
``LLMTestCase``; what DeepEval has no field for travels in ``additional_metadata["ragbridge"]``
(``metadata`` of a test case), so nothing is lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ragbridge.plugin import Case, DatasetError, error_text

__all__ = ["test_case_kwargs", "to_test_case", "Extracted", "judged_items", "score_fields", "error_message",
           "is_deepeval_object", "object_rows", "read_object_rows", "to_goldens", "to_test_cases", "library"]


def test_case_kwargs(case: Case) -> dict[str, Any]:
    """The ``LLMTestCase`` fields for a canonical case (see the mapping table in the package docstring).

    Chunks without text are left out of ``retrieval_context`` (there is nothing to judge in them), and
    a chunk id repeated in ``contexts`` counts once, at its first rank (ragbridge's ranking convention).
    """
    kw: dict[str, Any] = {"input": case.question, "name": case.id}
    if case.answer is not None:
        kw["actual_output"] = case.answer
    if case.reference is not None:
        kw["expected_output"] = case.reference
    seen: set[str] = set()
    texts = []
    for c in case.contexts:
        if c.id in seen:
            continue
        seen.add(c.id)
        if c.text:
            texts.append(c.text)
    if texts:
        kw["retrieval_context"] = texts
    if case.reference_contexts:
        kw["context"] = list(case.reference_contexts)
    if case.tags:
        kw["tags"] = list(case.tags)
    return kw


def to_test_case(case: Case):
    """A DeepEval ``LLMTestCase`` for a canonical case."""
    from deepeval.test_case import LLMTestCase

    return LLMTestCase(**test_case_kwargs(case))


@dataclass
class Extracted:
    """How many items DeepEval's verdict step judged (None when the metric has no such step)."""

    n: Optional[int]
    what: str


def judged_items(metric: str, m: Any) -> Extracted:
    if metric in ("faithfulness",):
        return Extracted(_count(getattr(m, "verdicts", None)), "claims")
    if metric == "answer_relevance":
        return Extracted(_count(getattr(m, "verdicts", None)), "statements")
    if metric == "context_precision":
        return Extracted(_count(getattr(m, "verdicts", None)), "retrieval nodes")
    if metric == "context_recall":
        return Extracted(_count(getattr(m, "verdicts", None)), "reference sentences")
    if metric == "context_relevance":
        lists = getattr(m, "verdicts_list", None)
        if lists is None:
            return Extracted(None, "context statements")
        return Extracted(sum(_count(getattr(v, "verdicts", None)) or 0 for v in lists), "context statements")
    return Extracted(None, "")


def _count(verdicts: Any) -> Optional[int]:
    if verdicts is None:
        return None
    return sum(1 for v in verdicts if v is not None)


def score_fields(metric: str, m: Any) -> dict[str, Any]:
    """The Score fields of a metric instance after a successful ``a_measure``."""
    raw = m.score
    reason = m.reason if isinstance(getattr(m, "reason", None), str) and m.reason.strip() else None
    passed = bool(m.success) if getattr(m, "success", None) is not None else None
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return dict(value=None, native_value=None, passed=passed,
                    reason=reason or "DeepEval returned no score")
    raw = float(raw)
    extracted = judged_items(metric, m)
    if extracted.n == 0:
        # DeepEval scores an empty extraction by convention (1 for faithfulness and answer relevancy,
        # 0 for the contextual metrics); there was nothing to judge, so the value is undefined.
        note = (f"undefined: DeepEval judged no {extracted.what} (it scores this {raw:g} by convention)")
        return dict(value=None, native_value=raw, passed=passed,
                    reason=note + (f"; DeepEval's reason: {reason}" if reason else ""))
    return dict(value=min(1.0, max(0.0, raw)), native_value=raw, passed=passed, reason=reason)


def error_message(exc: BaseException) -> str:
    """`ragbridge.plugin.error_text` of the real cause (tenacity's RetryError unwrapped)."""
    try:
        import tenacity

        while isinstance(exc, tenacity.RetryError) and exc.last_attempt is not None:
            inner = exc.last_attempt.exception()
            if inner is None:
                break
            exc = inner
    except ImportError:  # pragma: no cover - tenacity comes with deepeval
        pass
    return error_text(exc)


# --------------------------------------------------------------------------------------------
# In memory: DeepEval's own objects


def is_deepeval_object(data: Any) -> bool:
    """Whether ``data`` is a DeepEval object (an ``EvaluationDataset``, a ``Golden``, an
    ``LLMTestCase``) or a list of them; by the type's module, without importing DeepEval."""
    def deepeval(x: Any) -> bool:
        return type(x).__module__.split(".")[0] == "deepeval"

    if isinstance(data, (list, tuple)):
        return bool(data) and all(deepeval(x) for x in data)
    return deepeval(data)


def object_rows(data: Any) -> list[dict[str, Any]]:
    """The records of an ``EvaluationDataset`` (its test cases when it has any, else its goldens) or
    of a list of goldens or test cases, as dicts of their fields."""
    if type(data).__name__ == "EvaluationDataset":
        items = list(data.test_cases) or list(data.goldens)
    elif isinstance(data, (list, tuple)):
        items = list(data)
    else:
        items = [data]
    rows = []
    for i, item in enumerate(items):
        kind = type(item).__name__
        if kind not in ("Golden", "LLMTestCase"):
            raise DatasetError(f"is a {kind}; only single-turn goldens and test cases translate to cases",
                               line=i, unit="index")
        rows.append(item.model_dump())
    return rows


def read_object_rows(rows: list[dict[str, Any]]) -> list[Case]:
    """Records in DeepEval's keys (lists as lists) as cases: `formats.record_to_canonical`, a case
    without a ``name`` getting the stable id of its input; an error names the item's index."""
    from ragbridge.plugin import case_id_for_question, cases_from_records

    from .formats import record_to_canonical

    def records():
        seen: dict[str, int] = {}
        for i, row in enumerate(rows):
            try:
                rec = record_to_canonical(row, joined=False)
            except DatasetError as exc:
                exc.line, exc.unit = i, "index"
                raise
            if "id" not in rec:
                base = case_id_for_question(rec["question"])
                seen[base] = seen.get(base, 0) + 1
                rec["id"] = base if seen[base] == 1 else f"{base}-{seen[base]}"
            yield i, rec

    return cases_from_records(records(), unit="index")


def _classes():
    """DeepEval's ``EvaluationDataset``, ``Golden`` and ``LLMTestCase``, imported under the plugin's
    environment defaults (no telemetry, no ``.env`` loaded) when DeepEval is not imported yet."""
    import sys

    if "deepeval" not in sys.modules:
        from ragbridge.plugin import applied_environment

        from .env import environment, settle_telemetry

        with applied_environment(environment()):
            import deepeval.dataset  # noqa: F401
            import deepeval.test_case  # noqa: F401

            settle_telemetry()
    from deepeval.dataset import EvaluationDataset, Golden
    from deepeval.test_case import LLMTestCase

    return EvaluationDataset, Golden, LLMTestCase


def _golden_fields(case: Case) -> dict[str, Any]:
    from .formats import golden_record

    return {k: v for k, v in golden_record(case)[0].items() if v is not None}


def to_goldens(cases: Any) -> tuple[Any, list[str]]:
    """An ``EvaluationDataset`` of goldens, one per case, and nothing lost."""
    EvaluationDataset, Golden, _ = _classes()
    return EvaluationDataset(goldens=[Golden(**_golden_fields(c)) for c in cases]), []


def to_test_cases(cases: Any) -> tuple[Any, list[str]]:
    """A list of ``LLMTestCase``, one per case, and nothing lost (a golden's field a test case has no
    field for, such as ``source_file``, goes to ``metadata["deepeval"]``, where the reader finds it)."""
    _, _, LLMTestCase = _classes()
    known = set(LLMTestCase.model_fields)
    out = []
    for case in cases:
        kw = _golden_fields(case)
        meta = dict(kw.pop("additional_metadata", None) or {})
        extra = {k: kw.pop(k) for k in list(kw) if k not in known}
        if extra:
            meta["deepeval"] = {**(meta.get("deepeval") or {}), **extra}
        if case.tags:
            kw["tags"] = list(case.tags)
        out.append(LLMTestCase(**kw, **({"metadata": meta} if meta else {})))
    return out, []


def library():
    """The ``deepeval`` `ragbridge.plugin.Library`."""
    from ragbridge.plugin import Library

    from .formats import READ_FIELDS, TABLE_CELLS

    return Library("deepeval", fields=READ_FIELDS, read_rows=read_object_rows, recognises=is_deepeval_object,
                   rows=object_rows, kinds={"dataset": to_goldens, "test_cases": to_test_cases},
                   table_cells=TABLE_CELLS,
                   description="DeepEval EvaluationDataset, Golden, LLMTestCase, and rows in its keys")
