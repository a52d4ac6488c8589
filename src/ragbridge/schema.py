"""The canonical schema: one golden case, one result, one score, one run manifest.

Everything in ragbridge speaks these types. Backends translate a `Case` into their library's own
record and the library's answer back into a `Result` (or, for many cases at once, a `ResultBlock`):
what the backend decides about one case. The run records each result as a `Score`, the result with
the run's bookkeeping around it (which backend and metric, the repeat, the judge calls, tokens and
cost, whether it came from the score cache or was not run): ``scores.jsonl`` holds one `Score` a line.

Relevance rule (used by every ranking metric and by the report): a retrieved chunk matches a label
when its ``id`` is a key of ``Case.relevant``, or else when its ``source`` (the document or section it
came from) is, or else when it overlaps a span label of ``Case.relevant_spans`` by the span rule
(`span_overlap_matches`). Rank is the position in ``Case.contexts`` (best first); chunk scores are
informational.

Span labels tie a golden set to the documents instead of one chunking: a `Span` is a stretch of a
document's text, by character offsets (``start`` inclusive, ``end`` exclusive, counted in the text
as the corpus holds it) or by a ``quote`` that ragbridge locates in the document. A `Chunk` may say
where it sits (``doc``, ``start``, ``end``); chunks without offsets are located by their text when a
corpus is given (`ragbridge.formats.corpus`).

Ids (a case's, a chunk's, a chunk's ``source``, a label) are compared exactly, after one rule
(`clean_id`): white space at either end is dropped and the rest taken in Unicode NFC, so ``c1 `` is
``c1`` and ``café`` typed as one character or as ``e`` and a combining accent is one id (two cases
whose ids differ only so are one id given twice: an error); an id holding a character that does
not print (a zero-width space, a tab, a no-break space, a control character) is refused, since it
reads as another id it never equals. Tags are names compared exactly too, and follow the same rule
(`clean_tags`), wherever they are given: a case's, a gate rule's, a filter's.

Size: one file on purpose, so a reader (and a plugin author) finds every canonical type, its
validation and the relevance and span rules they share in one place.
"""

from __future__ import annotations

import json
import math
import re
import struct
import unicodedata
from array import array
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticSerializationError

__all__ = ["Chunk", "Span", "Case", "Result", "ResultBlock", "Score", "ScoreBlock", "Evidence",
           "ClaimVerdict", "ChunkVerdict", "ClaimChecks", "Verdict", "Repeats", "RunManifest", "MAX_GRADE",
           "MAX_METADATA_DEPTH", "SPAN_MIN_OVERLAP", "span_overlap_matches", "check_where", "clean_id",
           "clean_tags"]

MAX_GRADE = 1000
"""Grades are integers 0..MAX_GRADE. trec_eval takes any integer; a larger grade is almost surely a
slip (a score or an id in the grade's place), and ``2**grade``, the exponential gain, must stay finite."""

MAX_METADATA_DEPTH = 100
"""``metadata`` nests at most this many levels (objects and lists), so every reader, the fingerprint and
every writer can handle it."""


def clean_id(value: str, what: str) -> str:
    """``value`` as an id (``what``: "case id", "chunk id", "label", ...): without white space at its
    ends, in Unicode NFC; raises ``ValueError`` for an empty id or one holding a character that does
    not print (see the module docstring)."""
    value = value.strip()
    if not value:
        raise ValueError(f"{what} must not be empty: give it the id it stands for")
    if not value.isprintable():
        at, char = next((i, c) for i, c in enumerate(value) if not c.isprintable())
        name = unicodedata.name(char, "a character that does not print")
        raise ValueError(f"{what} {value!r} holds U+{ord(char):04X} ({name}) at position {at + 1}, so it "
                         "never equals the id without it; remove it")
    return unicodedata.normalize("NFC", value)


def clean_tags(tags: Iterable[Any], what: str = "tag") -> list[str]:
    """``tags`` as names compared exactly: each by `clean_id` (``what``: "tag"; so ``café`` in NFC and
    in NFD is one tag), each once, in the order given; raises ``ValueError`` for a tag that is not a
    string, is empty or holds a character that does not print."""
    out = []
    for tag in tags:
        if not isinstance(tag, str):
            raise ValueError(f"a {what} must be a string, got {tag!r}")
        out.append(clean_id(tag, what))
    return list(dict.fromkeys(out))


def _grade(key: Any, grade: Any) -> int:
    wrong = f"grade of {key!r} must be an integer from 0 (judged not relevant) to {MAX_GRADE}, got {grade!r}"
    if isinstance(grade, bool) or not isinstance(grade, (int, float)):
        raise ValueError(wrong)
    if isinstance(grade, float):
        if not grade.is_integer():
            raise ValueError(wrong)
        grade = int(grade)
    if not 0 <= grade <= MAX_GRADE:
        raise ValueError(wrong)
    return grade


SPAN_MIN_OVERLAP = 0.5
"""The default of the span rule's ``min_overlap`` (``--span-min-overlap``)."""


def span_overlap_matches(overlap: int, label_length: int, chunk_length: int,
                         min_overlap: float = SPAN_MIN_OVERLAP) -> bool:
    """The span rule, written once: a chunk matches a span label of the same document when they share
    at least one character and at least ``min_overlap`` (0..1) of the shorter of the two.

    With the default 0.5 a chunk matches a label when it holds half of it or more, or when half of
    the chunk or more lies inside it (a small chunk within a long labelled passage); ``1`` asks for
    one to lie wholly inside the other; ``0`` takes any shared character. ``overlap`` is the number of
    characters the two share.
    """
    return overlap > 0 and overlap >= min_overlap * min(label_length, chunk_length)


def _offset(value: Any, what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer (a character offset), got {value!r}")
    return value


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and lists more than ``limit`` levels (no recursion: any depth)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, (list, tuple)):
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in item)
    return False


# Reprs are one short line (``print(case)`` in a notebook shows what it is, not every field):
# long text is shortened and lists are counted. ``model_dump()`` gives every field.
class _Shown(str):
    """A repr fragment printed as it is, without quotes (``5 contexts``)."""

    def __repr__(self) -> str:
        return str(self)


def _listed(text: str) -> str:
    """The JSON list a text given where a list goes most likely stands for, as advice: the list it
    spells (``"['a', 'b']"``, a list's repr or JSON), else its parts between commas or ``|``, else
    the text alone."""
    import ast

    items: Any = None
    for parse in (json.loads, ast.literal_eval):
        try:
            items = parse(text)
            break
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    if not (isinstance(items, (list, tuple)) and items and all(isinstance(x, str) for x in items)):
        sep = "|" if "|" in text else "," if "," in text else None
        items = [p.strip() for p in text.split(sep) if p.strip()] if sep else [text]
    shown = json.dumps([_short(x, 40) for x in items[:5]], ensure_ascii=False)
    return shown if len(items) <= 5 else shown[:-1] + ", ...]"


def _short(text: Optional[str], width: int = 60) -> Optional[str]:
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


class Chunk(BaseModel):
    """One retrieved chunk. ``id`` is what relevance labels name; ``source`` is its document or section.

    ``doc``, ``start``, ``end``: where the chunk sits, the name of its document in the corpus and its
    character offsets there (``end`` exclusive). ``start`` and ``end`` go together, after ``doc``.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str
    text: str = ""
    score: Optional[float] = None
    source: Optional[str] = None
    doc: Optional[str] = None
    start: Optional[int] = None
    end: Optional[int] = None

    @field_validator("start", "end", mode="before")
    @classmethod
    def _offsets(cls, v: Any, info) -> Any:
        return _offset(v, info.field_name)

    @model_validator(mode="after")
    def _where(self) -> "Chunk":
        check_where(self.doc, self.start, self.end, "chunk")
        return self

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("chunk id must be a string, got a boolean")
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return clean_id(v, "chunk id")
        return v

    @field_validator("source", mode="before")
    @classmethod
    def _source(cls, v: Any) -> Any:
        return clean_id(v, "chunk source") if isinstance(v, str) and v else v

    @field_validator("score")
    @classmethod
    def _finite(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not math.isfinite(v):
            raise ValueError(f"chunk score must be a finite number, got {v}")
        return v

    def __repr_args__(self):
        yield "id", self.id
        yield "text", _short(self.text, 40)
        if self.score is not None:
            yield "score", self.score
        if self.source is not None:
            yield "source", self.source
        if self.doc is not None:
            yield "doc", self.doc if self.start is None else f"{self.doc}[{self.start}:{self.end}]"


def check_where(doc: Optional[str], start: Optional[int], end: Optional[int], what: str) -> None:
    """Where a chunk or span sits: ``doc`` not blank; ``start`` and ``end`` both or neither, with a
    ``doc``, ``end > start``. ValueError saying what is wrong."""
    if doc is not None and not doc.strip():
        raise ValueError(f"a {what}'s doc must not be empty")
    if (start is None) != (end is None):
        raise ValueError(f"a {what}'s start and end go together: give both or neither")
    if start is not None:
        if doc is None:
            raise ValueError(f"a {what} with start and end needs doc, the document they count in")
        if end <= start:
            raise ValueError(f"a {what}'s end must be greater than its start (end is exclusive), got "
                             f"start {start}, end {end}")


class Span(BaseModel):
    """A span label: a stretch of one document's text that answers the question, with a grade.

    Either by offsets, ``{"doc", "start", "end", "grade"}`` (characters of the document's text,
    ``end`` exclusive), or by a ``quote``, ``{"doc", "quote", "grade"}``: a distinctive passage that is
    located in the document (exactly, else with white space collapsed) when the corpus is given, and
    then carries its offsets too. ``grade`` as in ``Case.relevant`` (default 1).
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    doc: str
    start: Optional[int] = None
    end: Optional[int] = None
    quote: Optional[str] = None
    grade: int = 1

    @field_validator("start", "end", mode="before")
    @classmethod
    def _offsets(cls, v: Any, info) -> Any:
        return _offset(v, info.field_name)

    @field_validator("grade", mode="before")
    @classmethod
    def _span_grade(cls, v: Any) -> Any:
        try:
            return _grade("span", v)
        except ValueError:
            raise ValueError(f"grade must be an integer from 0 (judged not relevant) to {MAX_GRADE}, "
                             f"got {v!r}") from None

    @model_validator(mode="after")
    def _where(self) -> "Span":
        check_where(self.doc, self.start, self.end, "span")
        if self.start is None and not (self.quote or "").strip():
            raise ValueError('a span needs start and end (character offsets) or a quote: {"doc", "start", '
                             '"end"} or {"doc", "quote"}')
        return self

    @property
    def located(self) -> bool:
        return self.start is not None


class Case(BaseModel):
    """One golden item together with the system's output for it.

    ``relevant`` maps a chunk id or a source to a grade, an integer from 0 (judged not relevant) to
    `MAX_GRADE` (1 = relevant, higher = more relevant, as in trec_eval's qrels); a plain list of ids
    means grade 1 for each. ``relevant_spans`` holds span labels (`Span`), alone or beside
    ``relevant``: each is one label, matched by the span rule. ``answerable`` is a boolean
    (``False``: the right behaviour is to decline); no other value is read as one. ``metadata`` nests
    at most `MAX_METADATA_DEPTH` levels.

    ``contexts`` not given (absent, or null) and ``contexts: []`` differ (`contexts_given`): the first
    is a case without its retriever's output (a ground-truth set: labels, no retrieval), whose ranking
    metrics are undefined; the second a retriever that returned nothing, whose ranking metrics are 0.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str
    question: str
    answer: Optional[str] = None
    contexts: list[Chunk] = Field(default_factory=list)
    relevant: dict[str, int] = Field(default_factory=dict)
    relevant_spans: list[Span] = Field(default_factory=list)
    reference: Optional[str] = None
    reference_contexts: list[str] = Field(default_factory=list)
    must_contain: list[str] = Field(default_factory=list)
    must_not_contain: list[str] = Field(default_factory=list)
    answerable: bool = True
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _case_id(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("case id must be a string")
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return clean_id(v, "case id")
        return v

    @model_validator(mode="before")
    @classmethod
    def _contexts_none(cls, data: Any) -> Any:
        """``contexts: null`` is contexts not given (`contexts_given`), as an absent field is."""
        if isinstance(data, dict) and "contexts" in data and data["contexts"] is None:
            data = {k: v for k, v in data.items() if k != "contexts"}
        return data

    @field_validator("contexts", mode="before")
    @classmethod
    def _contexts_list(cls, v: Any) -> Any:
        if v is None:
            return []
        if not isinstance(v, (list, tuple)):
            raise ValueError(
                f"contexts must be a list of chunks ({{id, text, score?, source?}}), got {type(v).__name__}"
            )
        return v

    @field_validator("relevant", mode="before")
    @classmethod
    def _relevant(cls, v: Any) -> Any:
        if v is None:
            return {}
        if isinstance(v, (list, tuple)):
            out: dict[str, int] = {}
            for item in v:
                if not isinstance(item, (str, int)) or isinstance(item, bool):
                    raise ValueError(f"relevant ids must be strings, got {item!r}")
                out[clean_id(str(item), "label")] = 1
            return out
        if not isinstance(v, dict):
            got = f"the string {v!r}" if isinstance(v, str) else type(v).__name__
            raise ValueError(
                f'must be a mapping of id to grade ({{"doc#section": 1}}) or a list of ids '
                f'(["doc#section"]), got {got}'
            )
        out = {}
        for key, grade in v.items():
            label = clean_id(str(key), "label")
            if label in out:
                raise ValueError(f"label {label!r} is given twice (once in another Unicode form); keep one")
            out[label] = _grade(key, grade)
        return out

    @field_validator("relevant_spans", mode="before")
    @classmethod
    def _spans_list(cls, v: Any) -> Any:
        if v is None:
            return []
        if not isinstance(v, (list, tuple)):
            raise ValueError('must be a list of spans ({"doc", "start", "end", "grade"} or {"doc", "quote", '
                             f'"grade"}}), got {type(v).__name__}')
        return v

    @field_validator("answerable", mode="before")
    @classmethod
    def _answerable(cls, v: Any) -> Any:
        if not isinstance(v, bool):
            raise ValueError(f"must be true or false, got {v!r}")
        return v

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_depth(cls, v: Any) -> Any:
        if deeper_than(v, MAX_METADATA_DEPTH):
            raise ValueError(
                f"nests more than {MAX_METADATA_DEPTH} levels of objects and lists; flatten it, or store "
                "the deep part as a JSON string"
            )
        return v

    @field_validator("tags", "must_contain", "must_not_contain", "reference_contexts", mode="before")
    @classmethod
    def _str_list(cls, v: Any) -> Any:
        if v is None:
            return []
        if isinstance(v, str):  # not guessed: "a, b" is one text or two, "a" a list or a slip
            raise ValueError(f"must be a list of texts, got the text {_short(v, 40)!r}: write it as a list, "
                             f"{_listed(v)} (in a CSV cell, texts are separated by '|')")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return clean_tags(v)

    @field_validator("must_contain", "must_not_contain")
    @classmethod
    def _phrases(cls, v: list[str]) -> list[str]:
        at = next((i for i, phrase in enumerate(v) if not phrase.strip()), None)
        if at is not None:
            raise ValueError(f"phrase {at + 1} is {v[at]!r}: every answer contains an empty phrase, so the "
                             "check says nothing; remove it")
        return v

    def __repr_args__(self):
        yield "id", self.id
        yield "question", _short(self.question)
        for name, n in (("contexts", len(self.contexts)), ("relevant", len(self.relevant)),
                        ("relevant_spans", len(self.relevant_spans))):
            if n:
                yield None, _Shown(f"{n} {name}")
        if not self.answerable:
            yield "answerable", False
        if self.tags:
            yield "tags", self.tags

    @property
    def contexts_given(self) -> bool:
        """Whether the case gives its retriever's output: ``contexts`` set, even to an empty list (the
        retriever found nothing); False when the field was left out (or null)."""
        return "contexts" in self.__pydantic_fields_set__

    def fields_present(self) -> set[str]:
        """Names of the inputs this case actually has (used to skip metrics that need more): a blank
        question, answer or reference is not there."""
        present = {"question"} if self.question.strip() else set()
        if self.answer is not None and self.answer.strip():
            present.add("answer")
        if self.contexts:
            present.add("contexts")
        if any(c.text for c in self.contexts):
            present.add("context_text")
        if self.relevant:
            present.add("relevant")
        if self.relevant_spans:
            present.add("relevant_spans")
        if self.reference is not None and self.reference.strip():
            present.add("reference")
        if self.reference_contexts:
            present.add("reference_contexts")
        return present

    def chunk_labels(self) -> list[Optional[str]]:
        """The relevance rule, chunk by chunk, for the formats that must spell it out: for each chunk
        of ``contexts``, the label it matches (its ``id`` when that is a key of ``relevant``, else its
        ``source`` when that is), whatever the grade; None for a chunk that matches no label and for a
        repeated chunk id (dropped before ranking). `ragbridge.native.ranking` applies the same rule."""
        seen: set[str] = set()
        out: list[Optional[str]] = []
        for c in self.contexts:
            if c.id in seen:
                out.append(None)
                continue
            seen.add(c.id)
            out.append(c.id if c.id in self.relevant else c.source if c.source in self.relevant else None)
        return out


#: a claim checked against a text: only SUPPORTED means the text entails it
Verdict = Literal["SUPPORTED", "CONTRADICTED", "NOT_FOUND"]


class ClaimVerdict(BaseModel):
    """One claim of an answer and whether the context supports it (``text`` as the judge stated it)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    text: str
    verdict: Verdict
    reason: Optional[str] = None


class ChunkVerdict(BaseModel):
    """Whether one retrieved chunk (by ``Chunk.id``) is relevant to the question."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str
    relevant: bool
    reason: Optional[str] = None


class ClaimChecks(BaseModel):
    """The claims of the answer and of the reference answer, each checked against each retrieved
    chunk and against the other text: what RAGChecker's diagnostic metrics are computed from.

    ``X_in_Y`` holds the verdicts of X's claims checked against Y; only SUPPORTED counts as
    entailed. ``answer_in_chunks[i][k]`` is answer claim ``i`` against chunk ``k`` (``chunk_ids[k]``,
    retrieval order), ``reference_in_chunks[j][k]`` reference claim ``j`` against chunk ``k``,
    ``answer_in_reference[i]`` answer claim ``i`` against the reference answer and
    ``reference_in_answer[j]`` reference claim ``j`` against the answer. (RAGChecker calls them
    retrieved2response, retrieved2answer, answer2response and response2answer.) A score holds the
    parts its formula reads; the others are None.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    answer_claims: Optional[list[str]] = None
    reference_claims: Optional[list[str]] = None
    chunk_ids: Optional[list[str]] = None
    answer_in_chunks: Optional[list[list[Verdict]]] = None
    reference_in_chunks: Optional[list[list[Verdict]]] = None
    answer_in_reference: Optional[list[Verdict]] = None
    reference_in_answer: Optional[list[Verdict]] = None


class Evidence(BaseModel):
    """What a judged score rests on, in a form every reader understands without knowing the backend.

    ``claims``: the answer split into claims, each with its verdict against the context (an empty
    list: the answer states no claim; None: the backend does not expose claims). ``chunks``: a
    relevance verdict per retrieved chunk, in retrieval order. ``claim_checks``: the claims of the
    answer and of the reference checked chunk by chunk (`ClaimChecks`).
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    claims: Optional[list[ClaimVerdict]] = None
    chunks: Optional[list[ChunkVerdict]] = None
    claim_checks: Optional[ClaimChecks] = None

    def unsupported(self) -> list[ClaimVerdict]:
        """The claims that are not SUPPORTED (contradicted or not found)."""
        return [c for c in self.claims or [] if c.verdict != "SUPPORTED"]


class Repeats(BaseModel):
    """A judged score taken several times: what each repeat gave (``values[i]``, ``passed[i]`` for
    repeat ``i``; None where it was undefined, failed or not run), their standard deviation (``sd``,
    ddof 1, over the scored repeats) and how many passes made ``Score.passed`` (``pass_at_least`` of
    ``n`` planned repeats)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    n: int
    values: list[Optional[float]]
    passed: list[Optional[bool]]
    sd: Optional[float] = None
    pass_at_least: Optional[int] = None


def _finite(value: Optional[float]) -> Optional[float]:
    """NaN from a library means "could not be computed": None, kept out of every mean."""
    return None if value is not None and not math.isfinite(value) else value


class Result(BaseModel):
    """What a backend returns for one case of the metric it was asked for (`Backend.score` yields
    one per case; the run adds the rest of the `Score`).

    ``value`` is in 0..1 with higher better, or null. Null with no ``error`` means the metric is
    undefined for this case (e.g. recall with no labels, or an input the metric needs is missing, said
    in ``reason``); null with an ``error`` means it failed. Neither is ever averaged as 0.
    ``native_metric`` and ``native_value``: the library's own name and number (or structure).
    ``passed``: the library's own verdict where it gives one (the run's verdict is
    `ragbridge.verdicts`'). ``evidence`` is optional structured support for the value (claims,
    per-chunk verdicts). ``seconds``: how long the backend took over the case, where it measures it
    (the judged backends' template does: the cases of a metric are scored concurrently, so only the
    backend can time one).
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    case_id: str
    value: Optional[float] = None
    native_metric: Optional[str] = None
    native_value: Any = None
    passed: Optional[bool] = None
    reason: Optional[str] = None
    error: Optional[str] = None
    evidence: Optional[Evidence] = None
    seconds: float = 0.0

    @field_validator("value")
    @classmethod
    def _finite_value(cls, value: Optional[float]) -> Optional[float]:
        return _finite(value)


class Score(BaseModel):
    """One recorded score: a backend's `Result` for one case, and what the run adds around it. One
    line of ``scores.jsonl``, flat.

    The result's fields (`Result`): ``case_id``, ``value``, ``native_metric``, ``native_value``,
    ``passed``, ``reason``, ``error``, ``evidence``, ``seconds``. The run's: ``metric`` and
    ``backend`` (the job the result answered); ``repeat``, for a judged metric taken ``--repeats N``
    times, the repeat's index 0..N-1; ``judge_calls``, ``prompt_tokens``, ``completion_tokens`` and
    ``cost``, what the case's judge calls took by the gateway's count (``cost`` by the judge's price
    table; None: no price for the model); ``not_run``: the run's budget (``max_calls`` /
    ``max_cost``) was spent before this score could be made, not an error, it is scored when the run
    resumes with a larger budget; ``cached``: taken from the score cache
    (`ragbridge.run.score_cache`), made by an earlier run with the same inputs, so this run spent no
    judge call, token or cost on it; ``repeats``: a score read back from a run with repeats is the
    case's mean over them, with what each repeat gave. The run layer alone makes a Score (`of`).
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    case_id: str
    metric: str
    backend: str
    value: Optional[float] = None
    native_metric: Optional[str] = None
    native_value: Any = None
    passed: Optional[bool] = None
    reason: Optional[str] = None
    error: Optional[str] = None
    judge_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    evidence: Optional[Evidence] = None
    repeat: int = Field(0, ge=0)
    not_run: bool = False
    cost: Optional[float] = None
    repeats: Optional[Repeats] = None
    cached: bool = False

    @field_validator("value")
    @classmethod
    def _finite_value(cls, value: Optional[float]) -> Optional[float]:
        return _finite(value)

    @classmethod
    def of(cls, result: Result, backend: str, metric: str, repeat: int = 0) -> "Score":
        """The score that records ``result`` as the answer of ``backend`` for ``metric`` (and
        ``repeat``); the run's counts at their defaults, for the recorder to fill. ``result`` may
        be a Score too (a backend written before `Result`): its result's fields are taken."""
        return cls(backend=backend, metric=metric, repeat=repeat,
                   **{name: getattr(result, name) for name in Result.model_fields})

    def __repr_args__(self):
        yield "case_id", self.case_id
        yield "metric", self.metric
        yield "backend", self.backend
        yield "value", self.value
        if self.repeat:
            yield "repeat", self.repeat
        if self.error:
            yield "error", _short(self.error)
        if self.not_run:
            yield "not_run", True

    @property
    def status(self) -> str:
        """``scored``, ``undefined``, ``error`` or ``not_run`` (the budget was spent first)."""
        if self.error:
            return "error"
        if self.not_run:
            return "not_run"
        if self.value is None:
            return "undefined"
        return "scored"

    @property
    def key(self) -> tuple[str, str, str]:
        """(case_id, metric, backend): one per case, metric and backend (see `repeat_key`)."""
        return (self.case_id, self.metric, self.backend)

    @property
    def repeat_key(self) -> tuple[str, str, str, int]:
        """(case_id, metric, backend, repeat): one per repeat, what ``scores.jsonl`` keeps the last of."""
        return (self.case_id, self.metric, self.backend, self.repeat)


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_of(model: BaseModel, **kwargs: Any) -> str:
    """``model.model_dump_json(**kwargs)``; a lone surrogate in any of its texts (which no UTF-8 file
    can hold: a judge's reply or a library may put one in a reason) is written as U+FFFD."""
    try:
        return model.model_dump_json(**kwargs)
    except PydanticSerializationError:
        mended = type(model).model_validate(_mend(model.model_dump()))
        return mended.model_dump_json(**kwargs)


def _mend(value: Any) -> Any:
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_mend(k): _mend(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mend(v) for v in value]
    return value


_json_string = json.encoder.encode_basestring_ascii  # json.dumps of a str, without its overhead
_NEGATIVE_ZERO = struct.unpack("<Q", struct.pack("<d", -0.0))[0]


def _negative_zero(values: list[float]) -> bool:
    """Whether ``values`` (floats) hold -0.0 (equal to 0.0, written otherwise), in C loops."""
    return _NEGATIVE_ZERO in array("Q", array("d", values).tobytes())


@dataclass(frozen=True, eq=False)
class ResultBlock:
    """The results of one metric over many cases at once, for a backend that computes them together
    (`Backend.score` yields it in place of one `Result` per case).

    ``values`` holds one float per case of ``case_ids`` (a NumPy array or a list), NaN where the metric
    is undefined (``value`` null); ``native_value`` is the same number. ``reasons`` gives per case the
    reason of an undefined value (None elsewhere), ``seconds`` the time per case. No result of a block
    has an error. The run records it as a `ScoreBlock`.
    """

    case_ids: Sequence[str]
    values: Any
    reasons: Sequence[Optional[str]]
    native_metric: Optional[str] = None
    seconds: float = 0.0

    def __len__(self) -> int:
        return len(self.case_ids)

    def _values(self) -> list[Optional[float]]:
        values = self.values.tolist() if hasattr(self.values, "tolist") else list(self.values)
        if set(map(type, values)) == {float} and all(map(math.isfinite, values)):
            return values  # floats, every one finite: as they are (a NumPy array's, most often)
        return [None if v is None or not math.isfinite(v) else float(v) for v in values]

    def n_undefined(self) -> int:
        return sum(1 for v in self._values() if v is None)


@dataclass(frozen=True, eq=False, kw_only=True)
class ScoreBlock(ResultBlock):
    """A `ResultBlock` recorded as the answer of ``backend`` for ``metric``: the `Score` objects it
    stands for (`scores`), written as JSON lines without building each (`json_lines`). No score of a
    block has judge calls."""

    backend: str
    metric: str

    @classmethod
    def of(cls, block: ResultBlock, backend: str, metric: str) -> "ScoreBlock":
        """``block`` recorded as the answer of ``backend`` for ``metric``."""
        return cls(case_ids=block.case_ids, values=block.values, reasons=block.reasons,
                   native_metric=block.native_metric, seconds=block.seconds, backend=backend, metric=metric)

    def scores(self) -> Iterator[Score]:
        for cid, v, reason in zip(self.case_ids, self._values(), self.reasons):
            yield Score(case_id=cid, metric=self.metric, backend=self.backend, value=v,
                        native_metric=self.native_metric, native_value=v, reason=reason, seconds=self.seconds)

    def json_lines(self) -> str:
        """The block as ``scores.jsonl`` lines: each one what ``Score.model_dump_json`` gives."""
        dumps = json.dumps
        head = f',"metric":{dumps(self.metric)},"backend":{dumps(self.backend)},"value":'
        native = f',"native_metric":{dumps(self.native_metric)},"native_value":'
        tail = (',"error":null,"judge_calls":0,"prompt_tokens":0,"completion_tokens":0,'
                f'"seconds":{float(self.seconds)!r},"evidence":null}}\n')
        values = self._values()
        distinct = set(values)
        if len(distinct) * 2 < len(values) and None not in distinct and not _negative_zero(values):
            # few values (recall, hit, precision...), every zero 0.0: each written once
            said = dict(zip(distinct, map(repr, distinct)))
            nums = list(map(said.__getitem__, values))
        elif len(distinct) * 2 < len(values):
            said = {v: repr(v) for v in distinct if v}  # a zero, 0.0 or -0.0 (one key), written as it is
            nums = [said.get(v) or ("null" if v is None else repr(v)) for v in values]
        else:
            nums = list(map(repr, values)) if None not in distinct else [
                "null" if v is None else repr(v) for v in values]
        # a reason many cases share (the same words for MRR, precision, nDCG, MAP) is written once
        distinct_reasons = set(self.reasons)
        distinct_reasons.discard(None)
        said_json = dict(zip(distinct_reasons, map(_json_string, distinct_reasons)))
        said_json[None] = "null"
        whys = list(map(said_json.__getitem__, self.reasons))
        line = ['{"case_id":', None, head, None, native, None, ',"passed":null,"reason":', None, tail]
        parts = line * len(nums)
        parts[1::9] = map(_json_string, self.case_ids)  # each line's pieces in place, then joined at once
        parts[3::9] = parts[5::9] = nums
        parts[7::9] = whys
        return "".join(parts)


class RunManifest(BaseModel):
    """``run.json``: what was run, on what, with which judge. Never holds a secret.

    ``status``: ``running``, then ``complete`` (every planned score recorded, errored ones included:
    ``counts.errored`` says how many), ``interrupted`` or ``incomplete``. ``process`` (pid, host,
    start time) names the process of the latest session and ``heartbeat_at`` when it last wrote, so a
    ``running`` run whose process is gone can be told apart.
    ``digests``: per backend and metric, the content hash of the definition the metric was judged by
    (a rubric), where the backend has one; scores of different digests are never compared silently.
    ``pass_marks``: per backend and metric, the threshold of the backend's own pass rule where it has
    one (a rubric's pass level on the 0..1 scale), the pass mark every output uses unless one is given
    (`ragbridge.analysis.thresholds.pass_marks`).
    ``plugins``: per backend shipped by a plugin's own distribution, that distribution and its version
    (``{"mylib": "ragbridge-mylib==0.1.1"}``; `ragbridge.plugins.plugin_version`), beside the library's
    version in ``backends``.
    ``version_changes``: per library the run holds at two or more versions (``mylib`` beside
    ``mylib==1.2``), each backend's version and what its plugin says changes between the oldest and
    the newest (`ragbridge.run.isolated.version_changes`), named by compare and the report.
    ``judge.self_judging`` is set when the judge is the system under test's own model.
    ``warnings``: the golden set's input warnings that bear on the metrics of the run (one line per
    kind, with the number of cases and the first of them: `ragbridge.formats.input_check`).
    """

    model_config = ConfigDict(extra="allow", defer_build=True)

    ragbridge_version: str
    dataset: dict[str, Any]
    backends: dict[str, Optional[str]]
    metrics: dict[str, list[str]]
    options: dict[str, Any] = Field(default_factory=dict)
    judge: Optional[dict[str, Any]] = None
    digests: dict[str, dict[str, str]] = Field(default_factory=dict)
    pass_marks: dict[str, dict[str, float]] = Field(default_factory=dict)
    plugins: dict[str, str] = Field(default_factory=dict)
    version_changes: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    started_at: str
    finished_at: Optional[str] = None
    status: str = "running"
    counts: dict[str, Any] = Field(default_factory=dict)
    process: Optional[dict[str, Any]] = None
    heartbeat_at: Optional[str] = None
    #: ``{"wall_seconds": {backend: seconds}}``: each backend's wall-clock span, from the start of
    #: scoring to its last score (summed over the sessions of a resumed run)
    timing: dict[str, Any] = Field(default_factory=dict)

    def __repr_args__(self):
        yield "status", self.status
        yield "dataset", self.dataset.get("path")
        if "n_cases" in self.dataset:
            yield None, _Shown(f"{self.dataset['n_cases']} cases")
        yield "backends", self.backends
        if "scores" in self.counts:
            yield None, _Shown(f"{self.counts['scores']} scores")
        if self.judge:
            yield "judge", f"{self.judge.get('model')}" + (" (stub)" if self.judge.get("stub") else "")
