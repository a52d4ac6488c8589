"""TruLens provider functions as plain functions over one ragbridge `Case`.

Everything here imports TruLens lazily (the package ``__init__`` must not). The functions are
synchronous: the backend runs them in worker threads, one case per thread, each inside the judge
gateway's ``tag_scope`` so every HTTP call is counted for its case (TruLens's own thread pool, used
for the per-sentence groundedness calls, copies the context and so keeps the tag).

See the package docstring for the formulas, scales and normalisation.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Optional

from ragbridge.schema import Case

__all__ = [
    "TruLensSettings",
    "UnparsableScore",
    "make_provider",
    "provider_class",
    "offline_sentence_splitter",
    "groundedness_configs",
    "faithfulness",
    "context_relevance",
    "answer_relevance",
    "answer_correctness",
    "METRIC_FUNCTIONS",
]

#: TruLens feedback function behind each canonical metric (the ``native_metric`` of a Score).
NATIVE_NAMES = {
    "faithfulness": "groundedness_measure_with_cot_reasons",
    "context_relevance": "context_relevance_with_cot_reasons",
    "answer_relevance": "relevance_with_cot_reasons",
    "answer_correctness": "GroundTruthAgreement.agreement_measure",
}

#: The judge scales TruLens accepts for the triad functions (``OutputSpace``): 0-3, 0-10, 0-1.
VALID_SCALES = (3, 10, 1)


class UnparsableScore(Exception):
    """TruLens returned its ``-1.0`` sentinel: the judge's reply held no usable score."""


@dataclass(frozen=True)
class TruLensSettings:
    """Per-run options (``RunOptions.backend_options["trulens"]``), validated."""

    api: str = "auto"  # "auto" (probe once), "responses", "chat"
    context_relevance_agg: str = "mean"  # or "max"
    sentence_split: str = "nltk"  # "nltk" (bundled punkt parameters, no download) or "llm"
    max_score: int = 3  # the judge's scale is 0..max_score: 3, 10 or 1
    temperature: float = 0.0

    @classmethod
    def from_options(cls, raw: Optional[dict]) -> "TruLensSettings":
        raw = dict(raw or {})
        unknown = set(raw) - {"api", "context_relevance_agg", "sentence_split", "max_score", "temperature"}
        if unknown:
            raise ValueError(f"unknown trulens option(s): {', '.join(sorted(unknown))}")
        s = cls(**raw)
        if s.api not in ("auto", "responses", "chat"):
            raise ValueError(f"trulens option api must be auto, responses or chat, got {s.api!r}")
        if s.context_relevance_agg not in ("mean", "max"):
            raise ValueError(f"trulens option context_relevance_agg must be mean or max, got {s.context_relevance_agg!r}")
        if s.sentence_split not in ("nltk", "llm"):
            raise ValueError(f"trulens option sentence_split must be nltk or llm, got {s.sentence_split!r}")
        if s.max_score not in VALID_SCALES:
            raise ValueError(f"trulens option max_score must be one of {VALID_SCALES}, got {s.max_score!r}")
        return s


# --------------------------------------------------------------------------------------------
# The provider


_provider_cls: Any = None
_provider_lock = threading.Lock()


def provider_class():
    """TruLens's OpenAI provider with the capability cache keyed by model *and* endpoint.

    TruLens 2.16 caches "has a Responses API" per model name for the whole process; two judges
    with the same model name on different servers would share the answer. This subclass only
    changes that key; every feedback function is TruLens's own."""
    global _provider_cls
    with _provider_lock:
        if _provider_cls is None:
            from trulens.providers.openai import OpenAI

            class RagbridgeOpenAI(OpenAI):
                def _capabilities_key(self) -> str:
                    try:
                        url = str(self.endpoint.client.client.base_url)
                    except Exception:  # pragma: no cover - defensive
                        url = ""
                    return f"{self.model_engine}@{url}"

            _provider_cls = RagbridgeOpenAI
    return _provider_cls


def set_api(provider: Any, api: str) -> None:
    """Pre-seed TruLens's capability cache: ``chat`` never tries ``/responses``."""
    provider.clear_capabilities_cache()
    if api == "chat":
        provider._set_capabilities({"responses_api": False, "structured_outputs": False, "cfg": False})
    elif api == "responses":
        provider._set_capabilities({"responses_api": True, "structured_outputs": True})


def make_provider(model: str, base_url: str, api_key: str, *, api: str = "chat", timeout: float = 600.0,
                  event_hooks: Optional[dict] = None, max_connections: int = 16, retries: int = 0,
                  stock: bool = False, transport: Any = None) -> Any:
    """A TruLens OpenAI provider on ``base_url`` whose HTTP goes through one httpx client.

    ``retries`` is TruLens's own retry count (``Endpoint.run_in_pace``; 3 with 2/4/8 s sleeps by
    default); ragbridge's gateway already retries 429/5xx/timeouts, so the backend passes 0.
    ``stock=True`` builds TruLens's unmodified ``OpenAI`` class (used by the parity tests).
    ``transport`` is an httpx transport, e.g. the judge gateway's in-process ``gateway.transport()``."""
    import httpx
    import openai

    http = httpx.Client(
        transport=transport,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        event_hooks=event_hooks or {},
        trust_env=False,  # never a proxy: the judge is on loopback
        # Plain http to the loopback gateway: no TLS, so no CA bundle to load (it costs ~0.2 s of CPU
        # per client). An https base_url is the gateway's business, not this client's.
        verify=not base_url.startswith("http://"),
    )
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout, http_client=http)
    if stock:
        from trulens.providers.openai import OpenAI as cls
    else:
        cls = provider_class()
    provider = cls(model_engine=model, client=client, rpm=10**9)
    provider.endpoint.retries = retries
    set_api(provider, api)
    if not stock:
        undo_openai_instrumentation()
    return provider


def undo_openai_instrumentation() -> None:
    """Put back the ``openai`` methods TruLens's endpoint wraps for cost tracking.

    Building a TruLens OpenAI provider replaces ``create`` on every ``openai`` resource class, for
    the whole process, with a synchronous wrapper: ``AsyncEmbeddings.create`` then no longer looks
    like a coroutine function, and RAGAS, running in the same process, refuses its async client
    ("Cannot use aembed_text() with a synchronous client"). ragbridge counts calls and tokens in its
    judge gateway, so TruLens's cost tracking is not needed: undo the wrapping.
    """
    from trulens.core.feedback.endpoint import Endpoint

    for holder, wrappers in list(Endpoint.instrumented_methods.items()):
        for original, wrapper, _ in reversed(wrappers):
            name = getattr(original, "__name__", None)
            if name and holder.__dict__.get(name) is wrapper:
                setattr(holder, name, original)
        del Endpoint.instrumented_methods[holder]


# --------------------------------------------------------------------------------------------
# Sentence splitting without a download

# A minimal Punkt model: no trained collocations or sentence starters, the common English
# abbreviations, so "e.g." and "Dr." do not end a sentence. Used only when no real punkt_tab
# model is installed (an installed one comes first on nltk's search path).
_ABBREVIATIONS = (
    "e.g", "i.e", "etc", "vs", "cf", "al", "approx", "dept", "est", "fig", "inc", "ltd", "co", "corp",
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "no", "nos", "vol", "p", "pp", "jan", "feb", "mar",
    "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "a.m", "p.m", "min",
    "max", "sec", "hr", "hrs",
)
_nltk_lock = threading.Lock()
_nltk_dir: Optional[str] = None


class _NltkWithoutDownload:
    """Stands in for the ``nltk`` module inside ``trulens.feedback.llm_provider`` only.

    TruLens calls ``nltk.download("punkt_tab")`` before every groundedness split, which contacts
    the internet even when the data is present. Here ``download`` is a no-op; everything else is
    nltk's own."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def download(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def offline_sentence_splitter() -> str:
    """Make TruLens's nltk sentence split work offline; returns the punkt_tab folder added.

    Idempotent. Writes the minimal model above into a private temporary folder (removed at exit),
    appends it to ``nltk.data.path`` (an installed model is found first), and replaces the
    ``nltk`` seen by TruLens's groundedness code with one whose ``download`` does nothing."""
    global _nltk_dir
    with _nltk_lock:
        import nltk
        from trulens.feedback import llm_provider

        if _nltk_dir is None:
            root = tempfile.mkdtemp(prefix="ragbridge-nltk-")
            atexit.register(shutil.rmtree, root, True)
            model = os.path.join(root, "tokenizers", "punkt_tab", "english")
            os.makedirs(model)
            for name, text in (("collocations.tab", ""), ("sent_starters.txt", ""),
                               ("ortho_context.tab", ""),
                               ("abbrev_types.txt", "\n".join(_ABBREVIATIONS) + "\n")):
                with open(os.path.join(model, name), "w", encoding="utf-8", newline="") as f:
                    f.write(text)
            _nltk_dir = root
        if _nltk_dir not in nltk.data.path:
            nltk.data.path.append(_nltk_dir)
        if not isinstance(llm_provider.nltk, _NltkWithoutDownload):
            llm_provider.nltk = _NltkWithoutDownload(llm_provider.nltk)
        return _nltk_dir


def groundedness_configs(settings: TruLensSettings) -> Any:
    """``use_sent_tokenize`` per ``sentence_split``; the eval()-based trivial filter always off."""
    from trulens.core.feedback.feedback import GroundednessConfigs

    if settings.sentence_split == "nltk":
        offline_sentence_splitter()
    return GroundednessConfigs(use_sent_tokenize=settings.sentence_split == "nltk",
                               filter_trivial_statements=False)


# --------------------------------------------------------------------------------------------
# One metric on one case. Each returns (value, native_value, reason) or raises.


def _check(score: float, what: str) -> float:
    from trulens.core.utils.constants import is_unparsable_score

    if is_unparsable_score(score):
        raise UnparsableScore(f"{what}: TruLens could not parse a score from the judge's reply (-1)")
    return float(score)


def _reason_text(meta: Any) -> Optional[str]:
    if isinstance(meta, dict):
        r = meta.get("reason")
        if isinstance(r, str) and r.strip():
            return r.strip()
    return None


def faithfulness(provider: Any, case: Case, settings: TruLensSettings):
    source = "\n\n".join(c.text for c in case.contexts if c.text)
    score, meta = provider.groundedness_measure_with_cot_reasons(
        source=source, statement=case.answer, groundedness_configs=groundedness_configs(settings),
        min_score_val=0, max_score_val=settings.max_score, temperature=settings.temperature)
    statements = (meta or {}).get("reasons") if isinstance(meta, dict) else None
    native = {"score": score, "scale": [0, settings.max_score], "statements": statements or []}
    if not statements:
        return None, native, (_reason_text(meta) or "no statements to evaluate in the answer")
    score = _check(score, "groundedness")
    lines = []
    failed = 0
    for st in statements:
        s = st.get("score")
        if isinstance(s, (int, float)) and s < 0:
            failed += 1
        evidence = str(st.get("supporting_evidence") or "")
        if not evidence.startswith("Criteria:"):
            evidence = f"Criteria: {st.get('criteria', '')}\n{evidence}"
        grade = "unparsable" if isinstance(s, (int, float)) and s < 0 else format(s, ".2f")
        lines.append(f"[{grade}] {evidence}")
    head = f"groundedness {score:.3f}: mean over {len(statements) - failed} sentence(s)"
    if failed:
        head += f" ({failed} unparsable sentence(s) left out of the mean, as TruLens does)"
    return score, native, head + "\n" + "\n".join(lines)


def context_relevance(provider: Any, case: Case, settings: TruLensSettings):
    per_chunk = []
    errors = []
    for chunk in case.contexts:
        if not chunk.text:
            per_chunk.append({"id": chunk.id, "score": None, "reason": "chunk has no text"})
            continue
        try:
            s, meta = provider.context_relevance_with_cot_reasons(
                question=case.question, context=chunk.text, min_score_val=0,
                max_score_val=settings.max_score, temperature=settings.temperature)
            s = _check(s, f"context relevance of chunk {chunk.id}")
            per_chunk.append({"id": chunk.id, "score": s, "reason": _reason_text(meta)})
        except Exception as exc:  # noqa: BLE001 - kept per chunk, then the Score's error
            errors.append(f"chunk {chunk.id}: {type(exc).__name__}: {exc}")
            per_chunk.append({"id": chunk.id, "score": None, "error": f"{type(exc).__name__}: {exc}"})
    scores = [c["score"] for c in per_chunk if c.get("score") is not None]
    native = {"per_chunk": per_chunk, "mean": (sum(scores) / len(scores)) if scores else None,
              "max": max(scores) if scores else None, "agg": settings.context_relevance_agg,
              "scale": [0, settings.max_score]}
    if errors:
        raise ChunkScoreError("; ".join(errors), native)
    if not scores:
        return None, native, "no retrieved chunk has text"
    value = native[settings.context_relevance_agg]
    lines = [f"[{c['score']:.2f}] {c['id']}: {c.get('reason') or ''}" for c in per_chunk if c.get("score") is not None]
    return value, native, (f"context relevance {value:.3f}: {settings.context_relevance_agg} over "
                           f"{len(scores)} chunk(s)\n" + "\n".join(lines))


def answer_relevance(provider: Any, case: Case, settings: TruLensSettings):
    s, meta = provider.relevance_with_cot_reasons(
        prompt=case.question, response=case.answer, min_score_val=0, max_score_val=settings.max_score,
        temperature=settings.temperature)
    s = _check(s, "answer relevance")
    return s, {"score": s, "scale": [0, settings.max_score], "reason": _reason_text(meta)}, _reason_text(meta)


def answer_correctness(provider: Any, case: Case, settings: TruLensSettings):
    import math

    from trulens.feedback import GroundTruthAgreement

    gta = GroundTruthAgreement([{"query": case.question, "expected_response": case.reference}],
                               provider=provider)
    out = gta.agreement_measure(case.question, case.answer)
    if not isinstance(out, tuple):
        if isinstance(out, float) and math.isnan(out):
            return None, None, "TruLens found no ground truth for this query"
        raise TypeError(f"unexpected agreement_measure result {out!r}")
    s, meta = out
    s = _check(s, "ground-truth agreement")
    return s, {"score": s, "scale": [0, 10], **(meta or {})}, (
        f"agreement with the reference: {round(s * 10)}/10 (TruLens GroundTruthAgreement, 0-10 scale / 10)")


class ChunkScoreError(Exception):
    """One or more chunks failed; carries the per-chunk results (``native``) for the Score."""

    def __init__(self, message: str, native: Any) -> None:
        super().__init__(message)
        self.native = native


METRIC_FUNCTIONS = {
    "faithfulness": faithfulness,
    "context_relevance": context_relevance,
    "answer_relevance": answer_relevance,
    "answer_correctness": answer_correctness,
}
