"""Synthetic golden sets: questions generated from a corpus that know where their answer is, and
say what they cannot test.

``ragbridge synthesize CORPUS --n 200 --out synth.jsonl`` (``ragbridge.synthesize(...)``) asks the
run's judge, through the judge gateway (cache, budget, audit log, dry run), for questions written
from the corpus's passages, in a mix of kinds: single-passage, multi-passage (two or three passages
of different documents), paraphrased (reworded away from the passage's terms, checked), and
unanswerable (near the corpus's topics, not answered by it, checked against it). Each case carries
span labels quoting its source passages, placed in the documents (a question whose quote cannot be
placed is dropped and counted), a reference answer, the tags ``synthetic`` and its kind, and how it
was made in ``metadata.synthetic``. A library's own generator can make the questions instead
(``--generator NAME``, registered by its plugin: `delegate`); its reference contexts become the span
labels.

Every set is measured for the three known weaknesses of generated questions (`weaknesses`): how
much of the question's wording its passage holds (and how easily BM25 finds that passage), how many
have exactly one answer passage, how many are unanswerable; beside a real set with ``--compare-to``.
A person can review the questions before they enter the golden set (`review`).

The package, one concern a module (the lexical measures, terms, term overlap and BM25, are
`ragbridge.lexical`, which the report uses too):

``passages``    the corpus cut into passages
``plan``        kinds, the mix, the slots of a generation
``prompts``     the generation prompts and the checks of their replies
``generate``    ragbridge's own generator: the slots made through the judge
``delegate``    a library's generator: the interface plugins implement, its items placed
``work``        the work folder that lets a generation resume
``review``      the review file
``weaknesses``  the three weaknesses, measured
``synthesis``   `synthesize`: the whole, from corpus to golden set
``commands``    the CLI command, ``ragbridge synthesize``
``stub``        the stub judge's answers to the generation prompts (registered through a hook)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..hookspecs import hookimpl

__all__ = ["synthesize", "synthesize_async", "Synthesis", "SynthError", "measure", "Generator",
           "GeneratorRequest", "GeneratedItem"]

_EXPORTS = {"synthesize": ".synthesis", "synthesize_async": ".synthesis", "Synthesis": ".synthesis",
            "SynthError": ".synthesis", "measure": ".weaknesses", "Generator": ".delegate",
            "GeneratorRequest": ".delegate", "GeneratedItem": ".delegate"}

if TYPE_CHECKING:  # pragma: no cover
    from .delegate import GeneratedItem, Generator, GeneratorRequest  # noqa: F401
    from .synthesis import Synthesis, SynthError, synthesize, synthesize_async  # noqa: F401
    from .weaknesses import measure  # noqa: F401


def __getattr__(name: str) -> Any:
    """The package's names, from their modules when first used (registering the plugin imports none)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


@hookimpl
def ragbridge_register_commands(cli):
    from .commands import register

    register(cli)


@hookimpl
def ragbridge_register_stub_responders(register):
    from .stub import SynthResponder

    register(SynthResponder(), first=True)
