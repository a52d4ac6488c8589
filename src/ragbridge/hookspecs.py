"""The hooks a ragbridge plugin may implement.

A plugin is a module (or any object) with functions decorated by ``ragbridge.plugin.hookimpl`` and named
after one of the specs below. Plugins are found through the ``ragbridge`` entry-point group (the
bundled library backends too); ragbridge's own are listed in ``ragbridge.plugins.DEFAULT_PLUGINS``.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("ragbridge")
hookimpl = pluggy.HookimplMarker("ragbridge")


@hookspec
def ragbridge_register_backends(register):
    """Register evaluation backends.

    Call ``register(backend)`` once per backend, where ``backend`` is an instance of a
    ``ragbridge.backend.Backend`` subclass, or a ``ragbridge.plugins.LazyBackend`` naming it and the
    class that makes it (``LazyBackend("mine", "my_plugin.backend:MyBackend")``), which
    imports the backend's module only when a run or a listing first uses the backend. Registering
    must be cheap and must not import the backend's library: ``Backend.available()`` says whether
    the library is installed, and the library is imported only when the backend scores. A name
    registered twice is an error.
    """


@hookspec
def ragbridge_register_metrics(register):
    """Register metrics with a meaning of their own, which no canonical metric has.

    Call ``register(metric)`` once per metric, where ``metric`` is a ``ragbridge.plugin.Metric``: its
    name (``tone``; ``name@k`` for one that takes a cut-off), kind (``ranking``, ``span``,
    ``answer check`` or ``judged``), half of the report (``retrieval`` or ``generation``), one line of
    meaning (what 1 means and how it falls) and the report's default pass mark. A backend then
    declares it in a ``MetricSpec`` as it declares a canonical one, and the report, the gate and the
    analyses place it by its half and pass mark. A backend's name for a canonical concept is not a new
    metric: declare the canonical name with ``MetricSpec.native_name``. A canonical name, or a name
    registered twice, is an error.
    """


@hookspec
def ragbridge_register_formats(register):
    """Register dataset formats (readers and writers of canonical cases).

    Call ``register(fmt)`` once per format, where ``fmt`` is a ``ragbridge.formats.Format``: a name, the
    file suffixes it claims, and ``read(path) -> list[Case]`` and/or
    ``write(cases, path) -> list[str]`` (the returned list names the canonical fields the format
    could not hold). Readers raise ``ragbridge.formats.DatasetError`` for bad input.
    """


@hookspec
def ragbridge_register_libraries(register):
    """Teach ``load_cases``, ``evaluate`` and ``to_library`` a library's in-memory data.

    Call ``register(library)`` once per library, where ``library`` is a
    ``ragbridge.formats.objects.Library``: how to recognise the library's own dataset, sample or
    test-case objects (without importing the library), how to read them and rows in its field names
    into cases, and the objects ``to_library`` makes from cases. A name registered twice is an error.
    """


@hookspec
def ragbridge_register_commands(cli):
    """Add commands to the ``ragbridge`` command line.

    ``cli`` is the root ``typer.Typer`` application: add commands with ``@cli.command()`` or
    sub-applications with ``cli.add_typer(...)``. A plugin must not remove or replace a command.
    """


@hookspec
def ragbridge_register_stub_responders(register):
    """Teach ragbridge's stub judge (``ragbridge.stub``: a dry run's answers, and
    ``ragbridge.testing.StubJudge``'s) to answer a plugin's own judge prompts.

    Call ``register(responder, ...)`` (``ragbridge.stub.responders.register``: ahead of every
    responder registered so far; ``first=False``: after them; always ahead of the generic one) with
    one or more callables, tried in the order given, each taking a ``JudgeRequest`` and returning a
    ``JudgeReply``, or None for a request that is not its own (a responder that is not callable is
    refused at registration, and one that returns anything else when it answers, each a
    ``PluginError`` naming the plugin). Called once per process, when the stub first answers. A
    responder recognises its prompts by what only they contain: the order between plugins is not part of
    the contract.
    """


@hookspec
def ragbridge_register_score_formats(register):
    """Register writers of span evaluations, for ``ragbridge export-scores``: a run's scores sent back
    to the traces its cases came from, in a tracing tool's own form.

    Call ``register(fmt)`` once per format, where ``fmt`` is a
    ``ragbridge.traces.evaluations.ScoreFormat``: a name and ``write(rows, path) -> list[str]``, the
    rows being ``ragbridge.traces.evaluations.evaluation_rows`` (trace id, span id, name, label,
    score, explanation) and the returned lines warnings. A name registered twice is an error.
    """


@hookspec
def ragbridge_register_trace_stores(register):
    """Register tracing servers that ``ragbridge sample --from URL`` pulls spans from and ``ragbridge
    export-scores --to URL`` pushes span evaluations to.

    Call ``register(store)`` once per store, where ``store`` is a ``ragbridge.traces.stores.TraceStore``:
    its name is the URL scheme (``NAME`` for ``NAME://HOST:PORT/PROJECT``), ``pull(address,
    query)`` streams ``Span`` objects page by page, ``push(address, rows)`` sends the rows of
    ``ragbridge.traces.evaluations.evaluation_rows`` and returns warning lines, and ``keys`` names the
    environment variables its key is read from. A name registered twice is an error.
    """


@hookspec
def ragbridge_register_generators(register):
    """Register a library's test-set generator, for ``ragbridge synthesize --generator NAME``.

    Call ``register(generator)`` once per generator, where ``generator`` is a
    ``ragbridge.synthetic.Generator``: its ``name``, the kinds of question it makes, whether its
    library is installed (with the install hint), the library's environment defaults, and
    ``generate(request) -> list[GeneratedItem]``, which drives the library's generator through the judge
    the request carries (``request.judge``: every call through the run's judge gateway) over the
    corpus's passages. Registering must be cheap and must not import the library. A name registered
    twice is an error.
    """
