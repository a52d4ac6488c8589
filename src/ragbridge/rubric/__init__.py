"""ragbridge's own judge: rubrics as data, claim-level faithfulness, pairwise comparison, human labels.

A built-in plugin, registered like any third-party one (the ``rubric`` entry point, and
``ragbridge.plugins``' list of built-ins for source checkouts). Its parts:

``rubrics``   the rubric model (pydantic), loaded from TOML or built in Python, with a content hash
``builtin/``  the built-in rubrics: faithfulness (claims), answer_relevance, answer_correctness,
              context_relevance (per chunk), abstention (judged by the model)
``prompts``   one fixed system prompt per rubric and task; the user message holds exactly the case
              fields the rubric names, the context as the generator saw it
``parse``     structured output: json_schema where the endpoint takes it, strict parsing always,
              ranges checked in code, re-asks within a budget, then an explicit error
``claims``    claim-level faithfulness (split, then one batched verdict call)
``backend``   the ``rubric`` backend
``pairwise``  ``ragbridge pairwise``: two runs' answers compared in both orders
``label``     ``ragbridge label``: a stratified sample as one offline HTML page that writes a labels file
``commands``  the CLI commands (``pairwise``, ``label``)
``stub``      the stub judge's answers to these prompts (registered through a hook)

On the command line::

    ragbridge run golden.jsonl --out runs/r --backend rubric --rubric my-rubrics.toml --metric helpfulness ...
    ragbridge label runs/r --metric helpfulness --n 50 --seed 1
    ragbridge validate runs/r --labels labels-helpfulness.jsonl --threshold rubric:helpfulness=0.75
    ragbridge pairwise runs/base runs/new --metric helpfulness --rubric my-rubrics.toml ...

From Python::

    from ragbridge.rubric import Level, Rubric, load_rubrics
    r = Rubric(name="helpfulness", question="...", fields=["question", "contexts", "answer"],
               scale="binary", levels=[Level(value=1, label="yes", description="..."),
                                       Level(value=0, label="no", description="...")])
    ragbridge.evaluate(cases, backends=["rubric"], metrics=["helpfulness"], judge=...,
                       options={"rubric": {"rubrics": [r]}})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..hookspecs import hookimpl

__all__ = ["Level", "Rubric", "RubricError", "load_rubrics", "builtin_rubrics"]

if TYPE_CHECKING:  # pragma: no cover
    from .rubrics import Level, Rubric, RubricError, builtin_rubrics, load_rubrics  # noqa: F401


def __getattr__(name: str) -> Any:
    """The rubric model's names, from ``rubrics`` when first used (registering the plugin imports
    neither it nor pydantic)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import rubrics

    return getattr(rubrics, name)


@hookimpl
def ragbridge_register_backends(register):
    from ragbridge.plugins import LazyBackend

    register(LazyBackend("rubric", "ragbridge.rubric.backend:RubricBackend"))


@hookimpl
def ragbridge_register_commands(cli):
    from .commands import register

    register(cli)


@hookimpl
def ragbridge_register_stub_responders(register):
    from .stub import RubricResponder

    register(RubricResponder(), first=True)
