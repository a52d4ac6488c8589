"""The canonical metrics: the one list of metric names ragbridge speaks, with their conventions.

Every part that needs to know the canonical metrics reads them here: the planner (`resolve_metric`),
the report (display order, the two halves, default pass marks), the gate (which names exist), the
analyses (which half a metric belongs to) and the native backend (the ranking metrics and answer
checks it computes). A backend's `ragbridge.backend.MetricSpec` names one of `NAMES`, or a metric a
plugin registers; the only other names are the rubric backend's custom rubrics, which are data (the
backend contract kit, `ragbridge.testing.contract`, checks every registered backend).

A metric with a meaning of its own (not the same concept as a canonical metric under another name)
is registered by its plugin through the ``ragbridge_register_metrics`` hook, with a `Metric` of its
own: `find`, `half_of`, `sort_key` and `default_pass_mark` then know it as they know the canonical
ones (`registered`), and it is shown after them. `METRICS` stays the core's closed list: the
canonical metrics are the ones every backend's number is compared on, so none of them belongs to
one plugin, and reading them loads no plugin. A registered name that is canonical is an error.

Each `Metric` says:

``name``
    The canonical name. A name ending in ``@k`` takes a cut-off: ``recall@k`` is scored as
    ``recall@5`` with ``--k 5``, or asked for directly as ``recall@10`` (`resolve_metric`).
    ``map`` is over the whole list, and takes a cut-off when asked for with one (``map@10``,
    trec_eval's ``map_cut``: ``cut``).
``kind``
    ``ranking`` (deterministic, from the retrieved list and the relevance labels, trec_eval's
    conventions; see `ragbridge.native.ranking`), ``span`` (deterministic and character-level, from
    the span labels and where the retrieved chunks sit in the documents, as Chroma's chunking
    evaluation; see `ragbridge.native.spans`: merged spans by default, Chroma's unmerged arithmetic
    with ``--span-arithmetic chroma``), ``answer check`` (deterministic string checks on
    the answer; see `ragbridge.native.answers`) or ``judged`` (an LLM judge, through the gateway).
    The kind is the canonical definition's; a judged backend may also offer an answer check by a
    model (the rubric backend's ``abstention``).
``half``
    ``retrieval`` (what was retrieved) or ``generation`` (the answer): the report's two halves.
``meaning``
    One line: what a value of 1 means and how it falls.
``pass_mark``
    The report's default pass mark (``value >= mark`` passes) when neither ``--threshold`` nor a
    gates file sets one: 0.5 for the ranking and judged metrics (the evaluation libraries' usual
    default threshold), ``"1/k"`` for the precisions of the retrieved list (``precision@k``,
    ``context_relevance``, ``claim_context_precision``: with one relevant chunk among k the best
    possible value is about 1/k), 1 for the answer checks; 0 (no bar: every value passes) for the
    character-level precision, IoU and precision-omega, whose level is set by the sizes of the chunks
    and the labels rather than by the quality of one case (a gate or ``--threshold`` sets one where a
    team has a target).
    See `default_pass_mark` and docs/report.md.

The order of `METRICS` is the display order of reports and tables: ranking, span, judged retrieval,
judged generation, answer checks.

The claim diagnostics (``claim_recall`` to ``self_knowledge``) are RAGChecker's (its
``ragchecker/computation.py``), computed from the claims of the answer and of the reference checked
chunk by chunk (``ragbridge.rubric.diagnostics``). RAGChecker's noise sensitivity, hallucination and
self-knowledge are shares where lower is better; here, where every value is higher-is-better, each
is one minus RAGChecker's figure (the score's ``native_value`` keeps RAGChecker's), as
``must_not_contain`` counts the forbidden strings absent (`RAGCHECKER` names them). Where a figure has
nothing to average (no claim, or no chunk retrieved: ``ragbridge.rubric.diagnostics`` lists each)
RAGChecker gives 0 and ragbridge's value is undefined, so the means differ; `ragchecker_figure` is
RAGChecker's figure for one case, which summaries average beside the mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Union

__all__ = ["Metric", "METRICS", "NAMES", "KINDS", "RANKING", "SPAN", "NO_MARK", "ANSWER_CHECK", "JUDGED",
           "RETRIEVAL", "GENERATION", "PER_K", "DEFAULT_PASS_MARK", "find", "half_of", "sort_key",
           "default_pass_mark", "resolve_metric", "RAGCHECKER", "CLAIM_DIAGNOSTICS", "ragchecker_figure",
           "registered", "NOTHING_RETRIEVED"]

RANKING, SPAN, ANSWER_CHECK, JUDGED = "ranking", "span", "answer check", "judged"
KINDS = (RANKING, SPAN, ANSWER_CHECK, JUDGED)
#: a pass mark of one over the cut-off (``k`` from the name, else the run's ``--k``, else 5)
PER_K = "1/k"
#: the pass mark of a metric that is not canonical (a custom rubric)
DEFAULT_PASS_MARK = 0.5
#: no default bar: every value passes
NO_MARK = 0.0
#: the words of an undefined score's reason (or part of it) where the case retrieved no chunk
#: (``contexts: []``): what the diagnosis reads to say so, whether or not it reads the chunks
NOTHING_RETRIEVED = "no chunk was retrieved"


@dataclass(frozen=True)
class Metric:
    """One canonical metric and its conventions (see the module docstring)."""

    name: str
    kind: str
    half: str
    meaning: str
    pass_mark: Union[float, str] = DEFAULT_PASS_MARK
    #: a name without ``@k`` that also takes a cut-off when one is asked for (``map@10``)
    cut: bool = False

    @property
    def base(self) -> str:
        """The name without ``@k``: ``recall@k`` -> ``recall``."""
        return self.name.removesuffix("@k")


METRICS: tuple[Metric, ...] = (
    Metric("recall@k", RANKING, "retrieval", "share of the relevant labels found in the top k"),
    Metric("precision@k", RANKING, "retrieval", "share of the top k positions holding a relevant chunk",
           PER_K),
    Metric("hit@k", RANKING, "retrieval", "1 if any relevant chunk is in the top k, else 0"),
    Metric("mrr", RANKING, "retrieval", "1 / rank of the first relevant chunk, 0 if none"),
    Metric("ndcg@k", RANKING, "retrieval", "graded gain in the top k, normalised by the ideal order"),
    Metric("map", RANKING, "retrieval", "average precision over the whole list (map@k: the top k)",
           cut=True),
    Metric("span_recall@k", SPAN, "retrieval", "share of the labelled characters the top k chunks cover"),
    Metric("span_precision@k", SPAN, "retrieval", "share of the top k chunks' characters that are labelled",
           NO_MARK),
    Metric("span_iou@k", SPAN, "retrieval",
           "labelled characters covered, over those of the top k and labels", NO_MARK),
    Metric("precision_omega", SPAN, "retrieval",
           "the best span precision the chunking allows (perfect retrieval)", NO_MARK),
    Metric("context_precision", JUDGED, "retrieval",
           "the chunks useful for the reference answer are ranked first"),
    Metric("context_recall", JUDGED, "retrieval",
           "share of the reference answer supported by the retrieved chunks"),
    Metric("context_relevance", JUDGED, "retrieval", "share of the retrieved chunks relevant to the question",
           PER_K),
    Metric("claim_recall", JUDGED, "retrieval",
           "share of the reference's claims some retrieved chunk supports"),
    Metric("claim_context_precision", JUDGED, "retrieval",
           "share of the retrieved chunks that support a claim of the reference", PER_K),
    Metric("faithfulness", JUDGED, "generation", "share of the answer's claims supported by the chunks"),
    Metric("answer_relevance", JUDGED, "generation", "how well the answer addresses the question"),
    Metric("answer_correctness", JUDGED, "generation", "agreement of the answer with the reference answer"),
    Metric("answer_claim_precision", JUDGED, "generation",
           "share of the answer's claims the reference supports"),
    Metric("answer_claim_recall", JUDGED, "generation", "share of the reference's claims the answer states"),
    Metric("answer_claim_f1", JUDGED, "generation", "harmonic mean of answer claim precision and recall"),
    Metric("context_utilization", JUDGED, "generation",
           "of the reference claims the chunks hold, the share the answer states"),
    Metric("noise_sensitivity_relevant", JUDGED, "generation",
           "1 - share of answer claims wrong and taken from a relevant chunk"),
    Metric("noise_sensitivity_irrelevant", JUDGED, "generation",
           "1 - share of answer claims wrong and taken from an irrelevant chunk"),
    Metric("hallucination", JUDGED, "generation", "1 - share of answer claims wrong and in no chunk"),
    Metric("self_knowledge", JUDGED, "generation", "1 - share of answer claims right but in no chunk"),
    Metric("must_contain", ANSWER_CHECK, "generation", "share of the case's required strings in the answer",
           1.0),
    Metric("must_not_contain", ANSWER_CHECK, "generation",
           "share of the case's forbidden strings absent from the answer", 1.0),
    Metric("abstention", ANSWER_CHECK, "generation",
           "on an unanswerable case, 1 if the answer declines, else 0", 1.0),
)
#: the canonical names, in display order
NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
#: the bases (``recall``, not ``recall@k``) of each half
RETRIEVAL: tuple[str, ...] = tuple(m.base for m in METRICS if m.half == "retrieval")
GENERATION: tuple[str, ...] = tuple(m.base for m in METRICS if m.half == "generation")

_BY_BASE = {m.base: m for m in METRICS}
_K_RE = re.compile(r"^(?P<base>[a-z_]+)@(?P<k>\d+)$")


#: ``--metric`` name of the ten claim diagnostics together
CLAIM_DIAGNOSTICS = "claim_diagnostics"
#: the claim diagnostics: canonical name -> (RAGChecker's name, whether the value is one minus its figure)
RAGCHECKER: dict[str, tuple[str, bool]] = {
    "claim_recall": ("claim_recall", False),
    "claim_context_precision": ("context_precision", False),
    "answer_claim_precision": ("precision", False),
    "answer_claim_recall": ("recall", False),
    "answer_claim_f1": ("f1", False),
    "context_utilization": ("context_utilization", False),
    "noise_sensitivity_relevant": ("noise_sensitivity_in_relevant", True),
    "noise_sensitivity_irrelevant": ("noise_sensitivity_in_irrelevant", True),
    "hallucination": ("hallucination", True),
    "self_knowledge": ("self_knowledge", True),
}


def ragchecker_figure(score: Any) -> Optional[float]:
    """RAGChecker's own figure for one case behind a claim diagnostic's score (a `ragbridge.schema.Score`),
    as RAGChecker's mean counts it: its figure (one minus ``value`` where the value is inverted)
    where the score has a value; 0 where the score is undefined for want of anything to average
    (its claim checks were made, against no chunk when none was retrieved: RAGChecker's 0); None for
    any other score: not a claim diagnostic (its ``native_value`` names RAGChecker's metric), errored,
    not run, or skipped for a missing answer or reference (no claim checks: the case is in neither
    mean)."""
    named = RAGCHECKER.get(score.metric)
    native = score.native_value
    if named is None or not isinstance(native, dict) or native.get("ragchecker_metric") != named[0]:
        return None
    if score.status == "scored":
        return 1.0 - score.value if named[1] else score.value
    if score.status == "undefined" and score.evidence is not None and score.evidence.claim_checks is not None:
        return 0.0
    return None


_registered: tuple[Any, dict[str, Metric]] = (None, {})


def registered() -> dict[str, Metric]:
    """The metrics plugins register through the ``ragbridge_register_metrics`` hook, by base name
    (``tone``, ``coverage@k`` -> ``coverage``); asked again when a plugin joins or leaves.
    Raises ValueError for a name that is canonical, malformed or registered twice, or a `Metric`
    whose kind, half or pass mark is not one of the conventions above."""
    global _registered
    from .plugins import load_plugins, registered as by_name

    # the plugins registered now, by name and object (a plugin may be any object, hashable or not)
    plugins = [(name, id(plugin)) for name, plugin in load_plugins().list_name_plugin()]
    if _registered[0] != plugins:
        found = {}
        for m in by_name("ragbridge_register_metrics", "metric").values():
            problem = _problem(m)
            if problem:
                raise ValueError(f"a plugin registers metric {getattr(m, 'name', m)!r}: {problem}")
            found[m.base] = m
        _registered = (plugins, found)
    return _registered[1]


def _problem(m: Any) -> Optional[str]:
    """What is wrong with a registered metric, or None."""
    if not isinstance(m, Metric):
        return "register a ragbridge.plugin.Metric"
    if not re.fullmatch(r"[a-z][a-z0-9_]*(@k)?", m.name) or m.name == CLAIM_DIAGNOSTICS:
        return "a name is lower case letters, digits and _ (ending in @k when it takes a cut-off)"
    if m.base in _BY_BASE:
        return (f"{m.name!r} is a canonical metric: declare it in your backend's MetricSpec, and "
                "register only a metric with a meaning of its own")
    if m.kind not in KINDS or m.half not in ("retrieval", "generation"):
        return f"kind must be one of {', '.join(KINDS)} and half retrieval or generation"
    if not m.meaning or len(m.meaning) > 70:
        return "meaning is one line of at most 70 characters"
    if m.pass_mark != PER_K and not (isinstance(m.pass_mark, (int, float)) and 0 <= m.pass_mark <= 1):
        return f"pass_mark is a number in 0..1 or {PER_K!r}"
    return None


def find(name: str) -> Optional[Metric]:
    """The metric a concrete name is an instance of (``recall@10`` -> ``recall@k``): a canonical one,
    else one a plugin registers, else None (a custom rubric). Matched by the name before ``@``, as
    the report groups them; a canonical name is found without loading any plugin."""
    base = name.partition("@")[0]
    m = _BY_BASE.get(base)
    return m if m is not None else registered().get(base)


def half_of(name: str) -> str:
    """``"retrieval"`` or ``"generation"`` for a concrete metric name (``recall@5`` -> retrieval);
    a metric that is not canonical is about the answer."""
    m = find(name)
    return m.half if m else "generation"


def sort_key(name: str) -> tuple[int, str, int]:
    """Sorts concrete metric names in display order (a cut-off ascending; the canonical metrics first,
    then the others by name, a registered metric beside a custom rubric)."""
    base, _, cut = name.partition("@")
    m = _BY_BASE.get(base)
    return (NAMES.index(m.name) if m else len(NAMES), base, int(cut) if cut.isdigit() else 0)


def default_pass_mark(name: str, k: Optional[int] = None) -> float:
    """The report's default pass mark of a concrete metric name; ``k`` is the run's cut-off, used
    for a ``1/k`` mark when the name has none (``precision@10``: 0.1; ``context_relevance``: 1/k)."""
    m = find(name)
    if m is None:
        return DEFAULT_PASS_MARK
    if m.pass_mark == PER_K:
        cut = name.partition("@")[2]
        return 1 / (int(cut) if cut.isdigit() and int(cut) > 0 else int(k or 5))
    return float(m.pass_mark)


def resolve_metric(spec_name: str, requested: str, k: int) -> Optional[str]:
    """The concrete metric name if ``requested`` asks for ``spec_name`` (a `MetricSpec`'s), else None.

    ``recall@k`` matches ``recall@k`` (-> ``recall@{k}``), ``recall@10`` and ``recall``
    (-> ``recall@{k}``); ``map`` matches ``map`` and ``map@10`` (a `Metric` with ``cut``); any other
    name matches only itself.
    """
    if spec_name.endswith("@k"):
        base = spec_name[:-2]
        if requested in (spec_name, base):
            return f"{base}@{k}"
        m = _K_RE.match(requested)
        if m and m.group("base") == base and int(m.group("k")) > 0:
            return requested
        return None
    m = _K_RE.match(requested)
    cut = m is not None and m.group("base") == spec_name and int(m.group("k")) > 0
    if cut and getattr(find(spec_name), "cut", False):
        return requested
    return spec_name if requested == spec_name else None
