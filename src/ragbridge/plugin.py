"""The plugin API: every name a backend, format or library plugin may use, in one module.

A plugin (``plugins/ragbridge_<library>/`` here, or a third party's package) imports ragbridge through
this module only::

    from ragbridge.plugin import Case, JudgedBackend, JudgedMetric, error_text, hookimpl

and its tests through ``ragbridge.testing`` (the stub judge, the backend contract kit).
``tests/test_layers.py`` holds it to that. Each name is imported from where it is implemented when it
is first used, so registering a plugin (``from ragbridge.plugin import hookimpl``) imports nothing
else. The hooks a plugin implements are documented in ``ragbridge.hookspecs``; ``plugins/README.md``
is the guide, with a worked example.

Hooks and registration
    `hookimpl` marks a hook implementation; `LazyBackend` registers a backend by where its class
    lives, so registering imports nothing of it; `lazy_names` makes a plugin package's
    ``__getattr__`` that imports its names when first used.

The canonical schema
    `Case`, `Chunk`, `Result` (what a backend returns for one case) and `ResultBlock` (for many at
    once), `Score` (a result as a run recorded it), and what a judged value rests on: `Evidence`,
    `ClaimVerdict`, `ChunkVerdict`. `Metric` describes a metric with a meaning of its own, which a
    plugin registers through ``ragbridge_register_metrics`` (the canonical ones are in
    ``ragbridge.metrics``).

Backends
    `Backend`, `MetricSpec`, `RunOptions`, `ScoringContext`; the judged-backend template
    `JudgedBackend`, `JudgedMetric`, `ScoreFields`, `in_thread`; a backend's options model:
    `BackendOptions` (`JudgedOptions` for a judged backend) with fields made by `option`, typed
    `Whole`, `Number`, `Bool` where a plain ``int``, ``float`` or ``bool`` would take a bool, a
    text or a NaN; `fan_out` (a metric's cases scored
    concurrently), `error_text` (the one way a failure becomes ``Result.error``), `case_ids` and
    `case_record` (the cases a backend is handed, read without making a `Case` of each), and
    `applied_environment` (a backend's environment defaults around importing its library outside a
    run).

The judge's clients
    `http_client`, `async_http_client`, `openai_client`, `async_openai_client`: a library's clients
    on the judge gateway's in-process transports, with the one timeout and no retries of their own.

Dataset formats and in-memory objects
    `Format`, `DatasetError`, `Library`; reading files: `jsonl_lines`, `text_lines`, `parse_json`,
    `read_hf_rows`, `read_parquet_table` (its struct columns' width checked first), `atomic_path`
    (write to a temporary file, renamed when whole), `distinct_output`
    (refuse an output that is one of the inputs; a run folder's inputs are `run_files`), `scratch_folder`
    (a library's temporary folder, removed at exit or by the next run when its process is gone); the record
    helpers: `cases_from_records`, `case_id_for_question`, `chunk_id_for_text`, `derived_chunk_ids`,
    `is_missing`, `plain`, `literal_cell` and `pandas_index` (cells and index columns as pandas writes
    them), `MAX_METADATA_DEPTH` and `deeper_than` (how deep metadata may nest).

Traces and span evaluations
    `trace_format` (a read-only format over a span stream), `TraceSpan`, `SpanError`, `Signal`,
    `flatten`, `hex_id`, `nanos`, `iso_time`, `shown` (the shared id, time and message rules),
    `span_from_object` (a span from its OTLP JSON object), `ScoreFormat` (a writer of span
    evaluations).

Trace stores
    `TraceStore` (a tracing server ``sample --from`` pulls spans from and ``export-scores --to`` pushes
    to), `StoreAddress`, `Query`, `key_from` (its key, from the environment), `store_client` and
    `store_request` (an HTTP client and a request with the store's key, errors said as ragbridge says
    them).

Test-set generators
    `Generator`, `GeneratorRequest`, `GeneratedItem`: a library's generator that ``ragbridge
    synthesize --generator NAME`` drives through the judge gateway.

Run folders
    `load_run`, `RunError`: for a plugin command that reads a finished run.

The stub judge's responders
    What a plugin's ``stub.py`` uses to answer its library's prompts (registered through
    ``ragbridge_register_stub_responders``; a dry run answers with them as the stub judge does):
    `JudgeRequest`, `JudgeReply`, `Ctx`, `Labels`, `SECTION_LABELS`, `INPUT_KEYS`, `scaled`,
    `fill_schema`, `reply_json`, `validate_schema`, `SchemaError`, `json_after`, `schema_in_prompt`,
    `example_json`, `schema_from_example`, `labelled_sections`, `parse_list`, `ctx_from_sections`,
    `ctx_from_inputs`, `find_range`, and the toy judge's lexical verdicts: `content_words`, `numbers`,
    `support`, `is_supported`, `relevance`, `is_relevant`, `usefulness`, `is_noncommittal`,
    `split_sentences`, `best_sentence`, `make_question`, `short`, `noisy`, `noisy_level`
    (``ragbridge.stub.responders`` documents each).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: every name of the plugin API, and the module it is implemented in (imported when first used)
_EXPORTS = {
    # hooks and registration
    "hookimpl": "ragbridge.hookspecs",
    "LazyBackend": "ragbridge.plugins",
    "lazy_names": "ragbridge.plugins",
    # the canonical schema
    "Case": "ragbridge.schema",
    "Chunk": "ragbridge.schema",
    "Result": "ragbridge.schema",
    "ResultBlock": "ragbridge.schema",
    "Score": "ragbridge.schema",
    "Evidence": "ragbridge.schema",
    "ClaimVerdict": "ragbridge.schema",
    "ChunkVerdict": "ragbridge.schema",
    "Metric": "ragbridge.metrics",
    # backends
    "Backend": "ragbridge.backend",
    "MetricSpec": "ragbridge.backend",
    "RunOptions": "ragbridge.backend",
    "ScoringContext": "ragbridge.backend",
    "fan_out": "ragbridge.backend",
    "error_text": "ragbridge.backend",
    "case_ids": "ragbridge.backend",
    "case_record": "ragbridge.backend",
    "BackendOptions": "ragbridge.options",
    "option": "ragbridge.options",
    "Whole": "ragbridge.options",
    "Number": "ragbridge.options",
    "Bool": "ragbridge.options",
    "JudgedBackend": "ragbridge.judged_backend",
    "JudgedMetric": "ragbridge.judged_backend",
    "JudgedOptions": "ragbridge.judged_backend",
    "ScoreFields": "ragbridge.judged_backend",
    "in_thread": "ragbridge.judged_backend",
    "applied_environment": "ragbridge.run.lifecycle",
    # the judge's clients
    "http_client": "ragbridge.judge.clients",
    "async_http_client": "ragbridge.judge.clients",
    "openai_client": "ragbridge.judge.clients",
    "async_openai_client": "ragbridge.judge.clients",
    # dataset formats and in-memory objects
    "Format": "ragbridge.formats",
    "DatasetError": "ragbridge.formats",
    "Library": "ragbridge.formats.objects",
    "jsonl_lines": "ragbridge.formats.files",
    "text_lines": "ragbridge.formats.files",
    "parse_json": "ragbridge.formats.files",
    "read_hf_rows": "ragbridge.formats.files",
    "read_parquet_table": "ragbridge.formats.files",
    "atomic_path": "ragbridge.formats.files",
    "scratch_folder": "ragbridge.formats.files",
    "distinct_output": "ragbridge.formats.files",
    "run_files": "ragbridge.run.folder",
    "cases_from_records": "ragbridge.formats.records",
    "case_id_for_question": "ragbridge.formats.records",
    "chunk_id_for_text": "ragbridge.formats.records",
    "derived_chunk_ids": "ragbridge.formats.records",
    "is_missing": "ragbridge.formats.records",
    "plain": "ragbridge.formats.records",
    "literal_cell": "ragbridge.formats.records",
    "pandas_index": "ragbridge.formats.records",
    "MAX_METADATA_DEPTH": "ragbridge.schema",
    "deeper_than": "ragbridge.schema",
    # traces and span evaluations
    "trace_format": "ragbridge.traces",
    "TraceSpan": "ragbridge.traces.spans",
    "Signal": "ragbridge.traces.spans",
    "flatten": "ragbridge.traces.spans",
    "hex_id": "ragbridge.traces.spans",
    "nanos": "ragbridge.traces.spans",
    "SpanError": "ragbridge.traces.spans",
    "shown": "ragbridge.traces.spans",
    "iso_time": "ragbridge.traces.spans",
    "span_from_object": "ragbridge.traces.span_json",
    "ScoreFormat": "ragbridge.traces.evaluations",
    # trace stores
    "TraceStore": "ragbridge.traces.stores",
    "StoreAddress": "ragbridge.traces.stores",
    "Query": "ragbridge.traces.stores",
    "key_from": "ragbridge.traces.stores",
    "store_client": "ragbridge.traces.stores",
    "store_request": "ragbridge.traces.stores",
    # test-set generators
    "Generator": "ragbridge.synthetic",
    "GeneratorRequest": "ragbridge.synthetic",
    "GeneratedItem": "ragbridge.synthetic",
    # run folders
    "load_run": "ragbridge.run",
    "RunError": "ragbridge.run",
    # the stub judge's responders
    "JudgeRequest": "ragbridge.stub.responders",
    "JudgeReply": "ragbridge.stub.responders",
    "Ctx": "ragbridge.stub.responders",
    "Labels": "ragbridge.stub.responders",
    "SECTION_LABELS": "ragbridge.stub.responders",
    "INPUT_KEYS": "ragbridge.stub.responders",
    "scaled": "ragbridge.stub.responders",
    "fill_schema": "ragbridge.stub.responders",
    "reply_json": "ragbridge.stub.responders",
    "validate_schema": "ragbridge.stub.responders",
    "SchemaError": "ragbridge.stub.responders",
    "json_after": "ragbridge.stub.responders",
    "schema_in_prompt": "ragbridge.stub.responders",
    "example_json": "ragbridge.stub.responders",
    "schema_from_example": "ragbridge.stub.responders",
    "labelled_sections": "ragbridge.stub.responders",
    "parse_list": "ragbridge.stub.responders",
    "ctx_from_sections": "ragbridge.stub.responders",
    "ctx_from_inputs": "ragbridge.stub.responders",
    "find_range": "ragbridge.stub.responders",
    "content_words": "ragbridge.stub.responders",
    "numbers": "ragbridge.stub.responders",
    "support": "ragbridge.stub.responders",
    "is_supported": "ragbridge.stub.responders",
    "relevance": "ragbridge.stub.responders",
    "is_relevant": "ragbridge.stub.responders",
    "usefulness": "ragbridge.stub.responders",
    "is_noncommittal": "ragbridge.stub.responders",
    "split_sentences": "ragbridge.stub.responders",
    "best_sentence": "ragbridge.stub.responders",
    "make_question": "ragbridge.stub.responders",
    "short": "ragbridge.stub.responders",
    "noisy": "ragbridge.stub.responders",
    "noisy_level": "ragbridge.stub.responders",
}

#: a name of the API that is not the implementing module's own name for it
_RENAMED = {"TraceSpan": "Span", "store_client": "http_client", "store_request": "request"}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from .backend import (Backend, MetricSpec, RunOptions, ScoringContext, case_ids,  # noqa: F401
                          case_record, error_text, fan_out)
    from .formats import DatasetError, Format  # noqa: F401
    from .formats.files import (atomic_path, distinct_output, jsonl_lines, parse_json,  # noqa: F401
                                read_hf_rows, read_parquet_table, scratch_folder, text_lines)
    from .run.folder import run_files  # noqa: F401
    from .formats.objects import Library  # noqa: F401
    from .formats.records import (case_id_for_question, cases_from_records, chunk_id_for_text,  # noqa: F401
                                  derived_chunk_ids, is_missing, literal_cell, pandas_index, plain)
    from .hookspecs import hookimpl  # noqa: F401
    from .judge.clients import async_http_client, async_openai_client, http_client, openai_client  # noqa: F401
    from .judged_backend import JudgedBackend, JudgedMetric, JudgedOptions, ScoreFields, in_thread  # noqa: F401
    from .metrics import Metric  # noqa: F401
    from .options import BackendOptions, Bool, Number, Whole, option  # noqa: F401
    from .plugins import LazyBackend, lazy_names  # noqa: F401
    from .run import RunError, load_run  # noqa: F401
    from .run.lifecycle import applied_environment  # noqa: F401
    from .schema import (MAX_METADATA_DEPTH, Case, Chunk, ChunkVerdict, ClaimVerdict, Evidence,  # noqa: F401
                         Result, ResultBlock, Score, deeper_than)
    from .stub.responders import (INPUT_KEYS, SECTION_LABELS, Ctx, JudgeReply, JudgeRequest,  # noqa: F401
                                  Labels, SchemaError, best_sentence, content_words, ctx_from_inputs,
                                  ctx_from_sections, example_json, fill_schema, find_range, is_noncommittal,
                                  is_relevant, is_supported, json_after, labelled_sections, make_question,
                                  noisy, noisy_level, numbers, parse_list, relevance, reply_json, scaled,
                                  schema_from_example, schema_in_prompt, short, split_sentences, support,
                                  usefulness, validate_schema)
    from .traces import trace_format  # noqa: F401
    from .traces.evaluations import ScoreFormat  # noqa: F401
    from .synthetic import GeneratedItem, Generator, GeneratorRequest  # noqa: F401
    from .traces.span_json import span_from_object  # noqa: F401
    from .traces.spans import Signal, SpanError, flatten, hex_id, iso_time, nanos, shown  # noqa: F401
    from .traces.stores import Query, StoreAddress, TraceStore, key_from  # noqa: F401
    from .traces.stores import http_client as store_client  # noqa: F401
    from .traces.stores import request as store_request  # noqa: F401
    from .traces.spans import Span as TraceSpan  # noqa: F401

def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragbridge.plugin' has no attribute {name!r}: the plugin API is "
                             "ragbridge.plugin.__all__")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
