"""ragbridge's RAGAS backend: RAGAS 0.4.3's RAG metrics on canonical cases, through the shared judge.

Install with ``pip install 'ragbridge[ragas]' -c constraints.txt`` (RAGAS 0.4.3 needs
``langchain-community==0.4.1``: 0.4.2 breaks ``import ragas``). Registering the backend and its
formats imports nothing from RAGAS; RAGAS is imported when a case is scored or a dataset translated.

Metrics (RAGAS' ``ragas.metrics.collections`` classes, each case scored by ``ascore``; "the judge"
is the LLM behind ragbridge's judge gateway; S = the answer's statements, C = the retrieved chunks'
texts in rank order):

=====================  ================================  ==========================================
canonical              RAGAS class (native name)          formula and range
=====================  ================================  ==========================================
``faithfulness``       ``Faithfulness``                  the judge splits the answer into statements
                       (``faithfulness``)                S, then judges each against C joined by
                                                         newlines; |supported| / |S|, in 0..1.
                                                         No statements: NaN (undefined). 2 calls.
``answer_relevance``   ``AnswerRelevancy``               the judge writes 3 questions the answer
                       (``answer_relevancy``)            answers (and flags it noncommittal); mean
                                                         cosine between the question's embedding and
                                                         theirs, times 0 if all 3 say noncommittal.
                                                         -1..1 (0..1 with usual embedders). 3 chat +
                                                         2 embedding calls (identical prompts: the
                                                         gateway's cache answers repeats).
``context_precision``  ``ContextPrecisionWithReference``  per chunk k, the judge says if it was useful
                       (``context_precision_with_        for the reference (v_k = 0/1); average
                       reference``)                      precision sum_k(P@k * v_k) / (sum v_k +
                                                         1e-10), in 0..1 (0 when none useful). One
                                                         call per chunk.
``context_recall``     ``ContextRecall``                 the judge splits the reference into
                       (``context_recall``)              statements and says which are attributable
                                                         to C; attributed / all, in 0..1. None: NaN.
``context_relevance``  ``ContextRelevance``              two judge prompts rate C's relevance to the
                       (``context_relevance``)           question 0, 1 or 2; (r1/2 + r2/2) / 2 in
                                                         0..1 (one rating if the other failed, NaN if
                                                         both). 2 calls.
``answer_correctness`` ``FactualCorrectness``            claims of the answer checked against the
                       (``factual_correctness(mode=      reference (TP, FP) and claims of the
                       f1)``)                            reference against the answer (FN);
                                                         F1 = 2TP / (2TP + FP + FN), rounded by
                                                         RAGAS to 2 decimals, in 0..1. 4 calls.
=====================  ================================  ==========================================

Inputs (``MetricSpec.requires``; a case without one gets an undefined score with the reason, counted,
and RAGAS is not called): faithfulness needs an answer and chunk texts; answer_relevance an answer;
context_precision and context_recall a reference and chunk texts; context_relevance chunk texts;
answer_correctness an answer and a reference. Chunks without text are not sent.

Normalisation to 0..1 (``Score.value``; ``native_value`` keeps RAGAS' raw number): every metric is
already "higher is better" on 0..1; the value is rounded to 9 decimals (removing the ``1e-10`` RAGAS
adds to denominators, so 0.9999999999 is 1.0) and clipped to 0..1 (a negative mean cosine is 0).
RAGAS' NaN ("no statements": faithfulness, context_recall; no valid rating: context_relevance) is
``value: null`` with a reason and no error: undefined, counted, never 0. Where RAGAS itself returns
0 for an empty input (answer_relevance when no question could be generated, answer_correctness
when neither text yields a claim, context_precision when no chunk is useful), the 0 is kept, so
ragbridge's number is RAGAS' number. A failure (judge error after the gateway's retries, a timeout,
output still unparseable after instructor's 3 attempts, a verdict outside the values RAGAS' own reply
model states, e.g. ``noncommittal`` 7 or a ``verdict`` of 2, which RAGAS would take) is that Score's
``error``; the run goes on.
RAGAS has no pass/fail, so a score's ``passed`` is null (``Run.to_frame()``'s ``passed`` is the run's
pass rule, as for every backend), and its collections metrics give no explanation, so
``reason`` is set only for undefined or partly failed scores.

The judge: every call goes through ragbridge's judge gateway (``ctx.judge``): chat completions to
``JudgeConfig.model`` with ``max_tokens`` = ``JudgeConfig.max_tokens`` or 4096 (RAGAS' default of
1024 truncates long statement lists), RAGAS' sampling defaults otherwise (temperature 0.01, top_p
0.1, JSON mode); embeddings to ``JudgeConfig.embedding_model`` (``--embedding-model``), or RAGAS'
default ``text-embedding-3-small`` when none is set, which the run then records as the judge's
embedding model and checks the server serves before scoring. The gateway retries 429, 5xx and timeouts;
instructor re-asks (3 attempts) only when the judge's output does not parse.

Privacy (:mod:`ragbridge_ragas.env`): while a run uses the backend, ``RAGAS_DO_NOT_TRACK=true`` is
set unless the user set it (RAGAS' analytics post to t.explodinggradients.com otherwise, once per LLM
call; note that the check is ``== "true"``, so ``1`` does not work), with Hugging Face's offline and
telemetry switches; RAGAS is first imported after that, when the backend opens. RAGAS also writes
an anonymous id file (``~/.local/share/ragas/uuid.json``) the first time it builds an analytics event
or formats a log line, even with tracking off; with tracking off the backend points it at a private
temporary folder, removed at exit, so nothing lands in the user's home. Embeddings use RAGAS' own
OpenAI provider, not LangChain's, so no tiktoken file is downloaded. RAGAS' own disk cache is not
used (its key ignores the model and endpoint); ragbridge's gateway caches instead.

Datasets: the ``ragas`` (JSONL; also reads a ``datasets`` folder, ``.csv`` and ``.parquet``),
``ragas-hf`` (``datasets`` folder) and ``ragas-csv`` (``EvaluationDataset.to_csv``) formats. In
memory, ``ragbridge.load_cases`` and ``ragbridge.evaluate`` take an ``EvaluationDataset``, a list of
``SingleTurnSample`` and rows in RAGAS's columns (a DataFrame, a ``datasets.Dataset``, a list of
dicts), and ``ragbridge.to_library(cases, "ragas")`` gives an ``EvaluationDataset`` back (the
``ragbridge_register_libraries`` hook; :func:`from_ragas` / :func:`to_ragas` do the same from this
package); see :mod:`ragbridge_ragas.translate` for the field mapping and what RAGAS cannot hold.

Versions (``RagasBackend.supports``, ``changes``): the formulas above are RAGAS 0.4.3's; RAGAS 0.3.9
and 0.2.15 run in their own environments (``--backend ragas==0.2.15``, from ``locks/``). RAGAS 0.2.15
has no ``ragas.metrics.collections``: its ``ragas.metrics`` classes score each case there
(:mod:`ragbridge_ragas.ragas02`), through its LangChain wrapper on the same judge; where a metric
means something else at a version (answer_relevance's noncommittal rule, context_relevance's
prompts), ``RagasBackend.changes`` says so.

Files: ``backend.py`` (the backend and its run lifecycle), ``metrics.py`` (canonical metric -> RAGAS
class and inputs), ``ragas02.py`` (the same metrics at RAGAS 0.2), ``translate.py`` (cases <-> RAGAS
samples, RAGAS results -> Scores), ``formats.py`` (the dataset formats), ``env.py`` (the environment
defaults), ``stub.py`` (the stub judge's answers to RAGAS' prompts, registered through
``ragbridge_register_stub_responders``), ``generator.py`` (RAGAS' test-set generator behind ``ragbridge
synthesize --generator ragas``, registered through ``ragbridge_register_generators``) and
``generator_stub.py`` (the stub's answers to its prompts).
"""

from __future__ import annotations

from ragbridge.plugin import hookimpl, lazy_names

__all__ = ["RagasBackend", "METRICS", "FORMATS", "from_ragas", "to_ragas"]

#: the package's names, imported when first used: registering the plugin imports none of its modules
__getattr__ = lazy_names(__name__, {"RagasBackend": ".backend", "METRICS": ".metrics", "FORMATS": ".formats",
            "from_ragas": ".formats", "to_ragas": ".formats"})


@hookimpl
def ragbridge_register_backends(register):
    from ragbridge.plugin import LazyBackend

    register(LazyBackend("ragas", "ragbridge_ragas.backend:RagasBackend"))


@hookimpl
def ragbridge_register_formats(register):
    from .formats import FORMATS

    for fmt in FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_libraries(register):
    from .translate import library

    register(library())


@hookimpl
def ragbridge_register_generators(register):
    from .generator import RagasGenerator

    register(RagasGenerator())


@hookimpl
def ragbridge_register_stub_responders(register):
    from .generator_stub import RagasGeneratorResponder
    from .stub import RagasResponder

    register(RagasResponder(), RagasGeneratorResponder(), first=False)  # ahead of the generic one
