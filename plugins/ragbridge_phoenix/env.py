"""Phoenix's environment: the defaults a run applies while it uses the backend.

`ENVIRONMENT` is what `PhoenixBackend.environment` returns; the runner sets each variable the user
has not set before the backend opens (Phoenix is first imported in ``open``, after that) and removes
it again when the run ends. A variable the user set is always left alone, so a user who wants
Phoenix's spans with the prompts in them says so explicitly (``OPENINFERENCE_HIDE_INPUTS=false``).

Phoenix evals 3.9.4 has no usage telemetry, makes no network call of its own and writes no file,
but it wraps every evaluation and every LLM call in an OpenTelemetry span (OpenInference
conventions). The span of an LLM call holds the whole prompt, so the case's question, chunks and
answer, in ``input.value``; the evaluator's span holds the record as input and Phoenix's scores and
explanations as output. With no tracer provider installed the spans are no-ops; a provider the
application (or another library) installed would record them and could export them. So:

* ``OTEL_SDK_DISABLED=true``: an OpenTelemetry SDK tracer provider created meanwhile records and
  exports nothing (no egress to a collector);
* ``OPENINFERENCE_HIDE_INPUTS=true``, ``OPENINFERENCE_HIDE_OUTPUTS=true``: the spans Phoenix makes
  in a provider that already exists carry no input and no output value, so no case text (Phoenix
  builds its OpenInference ``TraceConfig`` per call, from the environment at that moment);
* ``OPENINFERENCE_HIDE_LLM_INVOCATION_PARAMETERS=true``: nor the request's parameters.

The variables are process-wide while the run lasts: another backend scoring at the same moment sees
them too, which only switches off tracing it would otherwise have done.
"""

from __future__ import annotations

__all__ = ["ENVIRONMENT", "environment"]

ENVIRONMENT: dict[str, str] = {
    "OTEL_SDK_DISABLED": "true",
    "OPENINFERENCE_HIDE_INPUTS": "true",
    "OPENINFERENCE_HIDE_OUTPUTS": "true",
    "OPENINFERENCE_HIDE_LLM_INVOCATION_PARAMETERS": "true",
}


def environment() -> dict[str, str]:
    """A copy of `ENVIRONMENT`."""
    return dict(ENVIRONMENT)
