"""RAG quality checks as pytest tests, with the ragbridge pytest plugin.

    pytest -p ragbridge examples/ci/test_rag_quality.py -m "not judge" \
        --ragbridge-golden examples/support-bot/golden.jsonl                       # every pull request
    pytest -p ragbridge examples/ci/test_rag_quality.py -m judge \
        --ragbridge-golden examples/support-bot/golden.jsonl \
        --ragbridge-judge-model gpt-4o-mini --ragbridge-judge-base-url https://api.openai.com/v1 \
        --ragbridge-cache-mode read-only --ragbridge-cache-path evals/judge-cache.sqlite   # nightly

A failing gate fails the test with the table of every rule and the cases behind the failure; with
``--ragbridge-runs runs`` each test's run folder (every per-item score) is kept for the CI artifacts.
"""

import pytest


def test_retrieval(ragbridge_golden, ragbridge_evaluate, ragbridge_gate):
    run = ragbridge_evaluate(ragbridge_golden, backends=["native"])
    ragbridge_gate(
        run,
        [
            "recall@5 >= 0.90",
            {"check": "ndcg@5 >= 0.80", "tags": ["real"]},
            {"check": "abstention >= 0.75", "tags": ["unanswerable"]},
            "error_rate <= 0",
        ],
    )


@pytest.mark.judge
def test_answers_are_grounded(ragbridge_golden, ragbridge_evaluate, ragbridge_gate, ragbridge_judge):
    run = ragbridge_evaluate(
        ragbridge_golden,
        backends=["ragas"],
        metrics=["faithfulness", "answer_relevance"],
        judge=ragbridge_judge,
    )
    ragbridge_gate(
        run,
        [
            {"check": "faithfulness >= 0.80", "significant": True},
            "share(faithfulness >= 0.7) >= 0.85",
            "error_rate <= 0.05",
        ],
    )
