"""The canonical metrics at RAGAS 0.2 (0.2.15), which has no ``ragas.metrics.collections``: its
metric classes of ``ragas.metrics``, each case scored with ``single_turn_ascore(SingleTurnSample)``,
the judge reached through RAGAS' LangChain wrapper.

`CLASSES` names the 0.2 class behind each canonical metric (the same inputs as 0.4's, see
`metrics.METRICS`); `metric` builds one on the run's judge clients; `ascore` scores one case. What the
metrics mean at 0.2 (and how that differs from 0.4) is `backend.RagasBackend.changes`.

The judge: ``LangchainLLMWrapper(ChatOpenAI(...))`` on the session's OpenAI clients (LangChain's
``client`` / ``async_client`` take them), so every call goes through ragbridge's gateway; RAGAS' own
retries of a rate-limited call are off (``RunConfig(max_retries=1)``: the gateway retried already).
RAGAS 0.2 sets the sampling itself per call (temperature 1e-8, 0.1 for context_relevance).
Embeddings (answer_relevance): ``LangchainEmbeddingsWrapper(OpenAIEmbeddings(...))`` with
``check_embedding_ctx_length=False``, so LangChain sends the texts (not tiktoken's token ids, whose
tokenizer file it would download first). Both are what a team scoring with RAGAS 0.2 on an
OpenAI-compatible server writes by hand.

Verdicts outside RAGAS' reply models (`metrics.REPLY_VALUES`) are errors, as at 0.4: each prompt's
parsed reply is checked (`metrics.check_reply`). Judge calls RAGAS swallowed (0.2's
context_relevance catches every error and returns NaN) are recorded as at 0.4.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

__all__ = ["CLASSES", "is_legacy", "metric", "ascore"]

#: canonical metric -> (RAGAS 0.2 class in ``ragas.metrics``, its keyword arguments)
CLASSES: dict[str, tuple[str, dict[str, Any]]] = {
    "faithfulness": ("Faithfulness", {}),
    "answer_relevance": ("ResponseRelevancy", {}),
    "context_precision": ("LLMContextPrecisionWithReference", {}),
    "context_recall": ("LLMContextRecall", {}),
    "context_relevance": ("ContextRelevance", {}),
    "answer_correctness": ("FactualCorrectness", {"mode": "f1"}),
}


def is_legacy() -> bool:
    """Whether the installed RAGAS has no ``ragas.metrics.collections`` (0.2 has none, nor has
    0.3.0): its metrics are then this module's."""
    import importlib.util

    return importlib.util.find_spec("ragas.metrics.collections") is None


def metric(name: str, model: str, client: Any, sync_client: Any, max_tokens: int,
           embedding_model: str | None, record: Callable[[BaseException], None],
           check: Callable[[Any], None]) -> Any:
    """RAGAS 0.2's metric object for canonical metric ``name``: its LLM (and embeddings) on the
    run's clients; failed judge calls go to ``record``, each parsed reply to ``check``."""
    import ragas.metrics as rm
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings
    from ragas.embeddings import LangchainEmbeddingsWrapper
    from ragas.llms import LangchainLLMWrapper
    from ragas.run_config import RunConfig

    chat = ChatOpenAI(model=model, client=client.chat.completions,
                      async_client=client.chat.completions, max_tokens=max_tokens, api_key="unused")
    llm = LangchainLLMWrapper(chat, run_config=RunConfig(max_retries=1))
    agenerate_text = llm.agenerate_text

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await agenerate_text(*args, **kwargs)
        except Exception as exc:
            record(exc)
            raise

    # RAGAS looks the method up on the instance for every call (its own cache wraps it the same way)
    llm.agenerate_text = recorded  # type: ignore[method-assign]
    cls, kwargs = CLASSES[name]
    kwargs = dict(kwargs)
    if embedding_model:
        kwargs["embeddings"] = LangchainEmbeddingsWrapper(OpenAIEmbeddings(
            model=embedding_model, client=sync_client.embeddings, async_client=client.embeddings,
            check_embedding_ctx_length=False, api_key="unused"))
    m = getattr(rm, cls)(llm=llm, **kwargs)
    for prompt in m.get_prompts().values():
        _checked(prompt, check)
    return m


def _checked(prompt: Any, check: Callable[[Any], None]) -> None:
    generate_multiple = prompt.generate_multiple

    async def checked(*args: Any, **kwargs: Any) -> Any:
        replies = await generate_multiple(*args, **kwargs)
        check(replies)
        return replies

    # ``generate`` calls ``self.generate_multiple``: the instance attribute serves both
    prompt.generate_multiple = checked


async def ascore(m: Any, inputs: dict[str, Any]) -> Any:
    """One case's score, as the 0.4 result (``value``, ``reason``) `translate.score_fields` reads."""
    from ragas.dataset_schema import SingleTurnSample

    value = await m.single_turn_ascore(SingleTurnSample(**inputs))
    return SimpleNamespace(value=value, reason=None)
