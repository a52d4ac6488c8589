"""DeepEval's ``Synthesizer`` behind ``ragbridge synthesize --generator deepeval``.

DeepEval writes goldens from contexts (``a_generate_goldens_from_contexts``): ragbridge gives it one
context per question of the plan (`ragbridge.synthetic.plan`), a passage for a ``single`` question
and two or three passages of different documents for a ``multi`` one, one golden per context.
DeepEval then does what it always does: writes an input from the context, has its critic score it
(and rewrite it below the quality threshold), evolves it once (one of its seven evolutions, drawn
with Python's ``random``, seeded with ``--seed``; the draws happen in concurrent tasks, so which
golden gets which evolution can change from run to run), and writes the expected output from the
context.
DeepEval makes neither paraphrased nor unanswerable questions.

The model is the backend's judge (`backend.build_judge`: DeepEval's ``OpenAIModel`` on the gateway's
in-process transport, with the gateway's own key), so every call is cached, counted against the
budget and audited; DeepEval's telemetry, ``.env`` loading and own retries are off
(`env.environment`), and its progress bars are drawn on a console of their own that is never shown.
No embeddings are needed: the contexts are given, not built from documents.

What comes back: each golden's ``input`` (the question), ``expected_output`` (the answer) and
``context``, the passages it was written from, placed by ragbridge in the documents as span labels;
DeepEval's evolutions and input quality score go into ``metadata.synthetic.library``. (DeepEval adds
the cost of each call to a running total that an unpriced model name breaks; ragbridge counts cost
in its gateway, so that total is switched off.)
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

from ragbridge.plugin import GeneratedItem, Generator, GeneratorRequest

from . import env

__all__ = ["DeepEvalGenerator"]


class DeepEvalGenerator(Generator):
    name = "deepeval"
    module = "deepeval"
    install_hint = "pip install 'ragbridge[deepeval]'"
    kinds = ("single", "multi")

    def environment(self) -> dict[str, str]:
        return env.environment()

    def generate(self, request: GeneratorRequest) -> list[GeneratedItem]:
        from ragbridge.plugin import applied_environment, async_http_client, http_client

        judge = request.judge
        contexts = [[request.passages[i].text for i in slot.passages] for slot in request.slots]
        if not contexts:
            return []
        with contextlib.ExitStack() as stack:
            stack.enter_context(applied_environment(env.runtime_environment(judge)))
            stack.callback(env.settle_telemetry)
            client, sync_client = async_http_client(judge), http_client(judge)
            stack.callback(sync_client.close)
            goldens = asyncio.run(self._goldens(judge, contexts, client, sync_client))
        order = {tuple(c): i for i, c in enumerate(contexts)}
        goldens.sort(key=lambda g: (order.get(tuple(g.context or ()), len(order)), g.input or ""))
        out = []
        for g in goldens:
            meta = dict(g.additional_metadata or {})
            out.append(GeneratedItem(
                question=g.input or "", answer=g.expected_output, contexts=list(g.context or []),
                kind="multi" if len(g.context or []) > 1 else "single",
                metadata={k: meta[k] for k in ("evolutions", "synthetic_input_quality") if k in meta}))
        return out

    async def _goldens(self, judge: Any, contexts: list[list[str]], client: Any, sync_client: Any) -> list:
        from deepeval.synthesizer import Synthesizer
        from deepeval.synthesizer.config import FiltrationConfig
        from rich.console import Console
        from rich.progress import Progress

        from .backend import build_judge

        try:
            model = build_judge(judge, "synthetic", "deepeval", client, sync_client)
            synthesizer = Synthesizer(model=model, filtration_config=FiltrationConfig(critic_model=model),
                                      max_concurrent=judge.config.max_concurrency)
            synthesizer.synthesis_cost = None  # see the module docstring
            quiet = Progress(console=Console(file=io.StringIO()))
            bar = quiet.add_task("goldens", total=len(contexts))
            with judge.tag_scope("synthetic", "deepeval:questions"):
                return await synthesizer.a_generate_goldens_from_contexts(
                    contexts=contexts, max_goldens_per_context=1, include_expected_output=True,
                    _reset_cost=False, _progress=quiet, _pbar_id=bar)
        finally:
            await client.aclose()
