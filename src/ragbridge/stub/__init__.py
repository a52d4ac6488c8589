"""The stub judge's answers, made in this process: deterministic, lexical, labelled as the stub's.

`answers` shapes an OpenAI-compatible answer (chat completion, completion, response, embeddings) for a
request body; what it says is decided by `responders`, the toy judge and the responders plugins
register through the ``ragbridge_register_stub_responders`` hook (the names a plugin's ``stub.py``
uses are in `ragbridge.plugin`). Two parts use them: a dry run (``evaluate(..., dry_run=True)``)
answers what the judge cache does not hold with them, and ``ragbridge.testing.StubJudge`` serves them
on 127.0.0.1, with faults, latency and the dialects of real servers, for tests.
"""
