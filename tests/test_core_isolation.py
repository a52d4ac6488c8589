"""The core names no library: everything about RAGAS, DeepEval, TruLens, Phoenix or Langfuse
(environment defaults, prompts, field names, formats) lives in that library's plugin and reaches the
core through hooks. And importing ragbridge changes no environment variable.

The grep covers every text file of ``src/ragbridge`` (the core, ``ragbridge.stub`` and
``ragbridge.testing``: code, docstrings, templates). It fails on a library's name, on a field name
that only a library uses, and on a phrase of a library's prompts.

One allowance, by design: the canonical readers accept the usual vocabulary of other tools
(``user_input``, ``retrieved_contexts``, ``actual_output``, ... see the README's "the loader also
accepts"), so `ALIAS_MODULES`, the modules that hold the alias table and apply it, may spell those
field names, and only those (each must be an alias the canonical readers really accept). A library's
name is never allowed, not even in an example.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "src" / "ragbridge"

#: the libraries the bundled and planned plugins adapt (backends, and trace and score formats)
NAMES = ("ragas", "deepeval", "trulens", "phoenix", "arize", "langfuse")
#: field and class names of the libraries' own records and results
FIELDS = (
    # RAGAS (SingleTurnSample, legacy columns)
    "user_input", "retrieved_contexts", "retrieved_context_ids", "reference_context_ids", "multi_responses",
    "persona_name", "query_style", "query_length", "ground_truths", "EvaluationDataset", "SingleTurnSample",
    # DeepEval (LLMTestCase, goldens)
    "actual_output", "expected_output", "retrieval_context", "actualOutput", "expectedOutput",
    "retrievalContext", "additional_metadata", "tools_called", "expected_tools", "custom_column_key_values",
    "statement_or_image", "LLMTestCase", "GEval",
    # TruLens (GroundTruth records, feedback results)
    "expected_response", "expected_chunks", "ground_truth_id", "supporting_evidence", "groundedness",
    "GroundTruthAgreement", "relevance_with_cot_reasons",
    # the libraries' structured-output schemas (what the stub's responders recognise them by)
    "NLIStatementOutput", "ContextPrecisionOutput", "ContextualRelevancyVerdict", "FaithfulnessVerdict",
    "ChainOfThoughtResponse", "extract_structured_data",
)
#: phrases of the libraries' judge prompts
PROMPTS = (
    "Now perform the same with the following input",
    "Retrieval Context", "Actual Output", "Expected Output", "node in the retrieval context",
    "USER QUERY", "SEARCH RESULT", "Please evaluate using the following template", "Supporting Evidence",
    "INFORMATION OVERLAP", "ABSTENTION classifier", "ANSWERABILITY classifier",
    "Split the following statement into individual sentences",
    "Convert the following text into a strict JSON object",
)
#: the modules that hold the canonical readers' alias table and apply it, and the field names they
#: may spell (the vocabulary of other tools the readers accept, nothing else)
ALIAS_MODULES = {
    "formats/records.py": {"user_input", "retrieved_contexts", "retrieved_context_ids", "actual_output",
                           "expected_output", "retrieval_context"},
    "run/sample.py": {"user_input", "retrieved_contexts", "actual_output", "retrieval_context"},
}


def _word(term: str) -> re.Pattern:
    # a whole word, also inside identifiers and paths: ragbridge_ragas, RAGAS', ragas=0.7
    return re.compile(rf"(?<![A-Za-z]){re.escape(term)}(?![A-Za-z])", re.I)


def _files() -> list[Path]:
    return sorted(p for p in CORE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".so", ".png", ".ico", ".woff", ".woff2"))


def test_the_core_names_no_library_field_or_prompt():
    patterns = ([(t, _word(t), "library name") for t in NAMES]
                + [(t, re.compile(rf"(?<![A-Za-z0-9_]){re.escape(t)}(?![A-Za-z0-9_])"), "library field")
                   for t in FIELDS]
                + [(t, re.compile(re.escape(t), re.I), "library prompt") for t in PROMPTS])
    hits = []
    files = _files()
    assert len(files) > 20, files
    for path in files:
        allowed = ALIAS_MODULES.get(str(path.relative_to(CORE)), set())
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for term, pattern, kind in patterns:
                if pattern.search(line) and not (kind == "library field" and term in allowed):
                    where = path.relative_to(CORE.parent.parent)
                    hits.append(f"{where}:{n}: {kind} {term!r}: {line.strip()}")
    assert not hits, "library knowledge in the core (move it to the plugin):\n" + "\n".join(hits)


def test_the_allowed_field_names_are_aliases_the_canonical_readers_accept():
    from ragbridge.formats.records import CANONICAL_FIELDS

    for module, allowed in ALIAS_MODULES.items():
        assert (CORE / module).is_file(), module
        assert allowed <= CANONICAL_FIELDS, (module, allowed - CANONICAL_FIELDS)
        text = (CORE / module).read_text(encoding="utf-8")
        assert all(name in text for name in allowed), (module, "an allowance it does not use")


def test_the_grep_catches_library_knowledge():
    """The control: each kind of term is found where it is (in the plugins)."""
    plugins = CORE.parent.parent / "plugins"
    text = "\n".join(p.read_text(encoding="utf-8") for p in plugins.rglob("*.py"))
    for term in ("ragas", "deepeval", "trulens", "user_input", "actual_output", "supporting_evidence",
                 "NLIStatementOutput", "ChainOfThoughtResponse", "SEARCH RESULT"):
        assert _word(term).search(text), term


def test_importing_ragbridge_changes_no_environment_variable():
    code = ("import json, os; before = dict(os.environ); "
            "import ragbridge, ragbridge.commands, ragbridge.plugins, ragbridge.formats; "
            "ragbridge.plugins.get_backends(); ragbridge.formats.get_formats(); "
            "print(json.dumps(sorted(k for k in set(os.environ) | set(before) "
            "if os.environ.get(k) != before.get(k))))")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAGAS_", "DEEPEVAL_", "TRULENS_", "HF_", "PYTEST_"))}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
