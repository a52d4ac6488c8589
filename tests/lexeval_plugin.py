"""A third party's plugin as its author writes it from plugins/README.md: ``ragbridge_lexeval``, a
backend for the library ``lexeval`` (a token-F1 metric of its own, registered, computed without a
judge, and ``answer_correctness`` asked of the judge), with an options model (``threshold``, the pass
mark of both; ``tokenizer``). `install` writes the library and the plugin as installed distributions
into a folder, puts it on ``sys.path`` and gives the plugin's module, for ``plugin_registered``."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

LIBRARY = '''
"""lexeval: token F1 and a judge prompt."""
import re
from collections import Counter

__version__ = "0.2.0"

TOKENIZERS = {"whitespace": lambda s: s.lower().split(), "word": lambda s: re.findall(r"\\w+", s.lower())}

JUDGE_PROMPT = (
    "LEXEVAL JUDGE v1. Decide whether the ANSWER states the same facts as the REFERENCE.\\n"
    "Reply with a JSON object {{\\"verdict\\": \\"yes\\" or \\"no\\", \\"reason\\": \\"...\\"}}.\\n"
    "QUESTION: {question}\\nANSWER: {answer}\\nREFERENCE: {reference}\\n"
)


def token_f1(answer, reference, tokenizer="word"):
    tok = TOKENIZERS[tokenizer]
    a, r = Counter(tok(answer)), Counter(tok(reference))
    common = sum((a & r).values())
    if not a or not r:
        return float("nan")
    if common == 0:
        return 0.0
    p, rc = common / sum(a.values()), common / sum(r.values())
    return 2 * p * rc / (p + rc)
'''

FILES = {
    "__init__.py": '''
        """ragbridge backend for lexeval."""
        from ragbridge.plugin import hookimpl
        {top_import}

        @hookimpl
        def ragbridge_register_metrics(register):
            from ragbridge.plugin import Metric

            register(Metric("lexeval_token_f1", kind={kind!r}, half="generation",
                            meaning={meaning!r}, pass_mark=0.5))


        @hookimpl
        def ragbridge_register_backends(register):
            from ragbridge.plugin import LazyBackend

            register(LazyBackend("lexeval", "ragbridge_lexeval.backend:LexevalBackend"))


        @hookimpl
        def ragbridge_register_stub_responders(register):
            from .stub import responder

            register(responder, first=False)
        ''',
    "options.py": '''
        from typing import Literal

        from ragbridge.plugin import JudgedOptions, Number, option


        class LexevalOptions(JudgedOptions):
            threshold: Number = {threshold}
            tokenizer: Literal["whitespace", "word"] = option("word", "How lexeval splits texts into tokens.")
        ''',
    "metrics.py": '''
        from ragbridge.plugin import JudgedMetric

        METRICS = {
            "lexeval_token_f1": JudgedMetric(name="lexeval_token_f1", native_name="token_f1",
                                             requires=("answer", "reference"), judge=False,
                                             description="token F1, answer vs reference (no judge)"),
            "answer_correctness": JudgedMetric(name="answer_correctness", native_name="judged_match",
                                               requires=("answer", "reference"),
                                               description="the judge: same facts as the reference (1 call)"),
        }
        ''',
    "backend.py": '''
        import json
        import math
        import re

        from ragbridge.plugin import JudgedBackend, async_http_client
        {backend_import}
        from .metrics import METRICS
        from .options import LexevalOptions

        MARK = {mark!r}


        class LexevalBackend(JudgedBackend):
            name = "lexeval"
            library = "lexeval"
            install_hint = "pip install lexeval"
            Options = LexevalOptions
            registry = METRICS
            {supports}

            async def open(self, ctx):
                judge = ctx.judge
                return judge and async_http_client(judge, base_url=judge.base_url(in_process=True) + "/",
                                                   headers={{"Authorization": f"Bearer {{judge.api_key}}"}})

            async def close(self, ctx):
                if ctx.session is not None:
                    await ctx.session.aclose()

            async def judge_case(self, metric, case, ctx, prepared):
                import lexeval

                {on_case}
                opts = ctx.options.of(self)
                if metric.name == "lexeval_token_f1":
                    value = lexeval.token_f1(case.answer, case.reference, opts.tokenizer)
                    if math.isnan(value):
                        return {{"value": None, "reason": "no tokens in the answer or the reference"}}
                    return {{"value": value, "native_value": value, "passed": value >= opts.threshold,
                            "reason": f"{{MARK}} token F1 = {{value:.3f}}"}}
                prompt = lexeval.JUDGE_PROMPT.format(question=case.question, answer=case.answer,
                                                     reference=case.reference)
                r = await ctx.session.post("chat/completions", json={{
                    "model": ctx.judge.config.model, "messages": [{{"role": "user", "content": prompt}}]}})
                r.raise_for_status()
                data = json.loads(re.search(r"\\{{.*\\}}", r.json()["choices"][0]["message"]["content"],
                                            re.S).group(0))
                value = 1.0 if data["verdict"] == "yes" else 0.0
                return {{"value": value, "native_value": data["verdict"], "passed": value >= opts.threshold,
                        "reason": f"{{MARK}} {{data.get('reason', '')}}"}}
        ''',
    "stub.py": '''
        import json
        import re

        from ragbridge.plugin import JudgeReply, is_supported


        def responder(req):
            text = "\\n".join(content for _role, content in req.messages)
            if "LEXEVAL JUDGE v1" not in text:
                return None
            answer = re.search(r"^ANSWER: (.*)$", text, re.M).group(1)
            reference = re.search(r"^REFERENCE: (.*)$", text, re.M).group(1)
            ok = is_supported(reference, answer)
            return JudgeReply(content=json.dumps({"verdict": "yes" if ok else "no", "reason": "stub"}),
                              responder="lexeval")
        ''',
}

DEFAULTS = {"top_import": "", "kind": "answer check",
            "meaning": "token F1 of answer vs reference (lexeval); 1 = same tokens",
            "threshold": 'option(0.5, "A score at or above this passes.", pass_mark=True, ge=0.0, le=1.0)',
            "backend_import": "", "mark": "v1", "on_case": "pass", "supports": ""}


def _dist(site: Path, name: str, version: str, top: str, package: bool = False) -> None:
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "top_level.txt").write_text(top + "\n")
    (dist / "RECORD").write_text(f"{top}/__init__.py,,\n" if package else f"{top}.py,,\n")


def install(site: Path, version: str = "0.1.1", library: bool = True, **changes: str):
    """The plugin (distribution ``ragbridge-lexeval`` at ``version``) and, with ``library``, lexeval
    0.2.0 written into ``site``, put first on ``sys.path``; returns the plugin's module. ``changes``
    replace parts of the plugin's source (`DEFAULTS`)."""
    forget()
    site.mkdir(parents=True, exist_ok=True)
    package = site / "ragbridge_lexeval"
    package.mkdir()
    parts = {**DEFAULTS, **changes}
    for name, source in FILES.items():
        text = textwrap.dedent(source)
        if name in ("__init__.py", "options.py", "backend.py"):
            text = text.format(**parts)
        (package / name).write_text(text)
    _dist(site, "ragbridge-lexeval", version, "ragbridge_lexeval", package=True)
    if library:
        (site / "lexeval.py").write_text(LIBRARY)
        _dist(site, "lexeval", "0.2.0", "lexeval")
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    return importlib.import_module("ragbridge_lexeval")


def forget() -> None:
    """The plugin and the library out of ``sys.modules`` (and their folders off ``sys.path``)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("lexeval", "ragbridge_lexeval")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not (Path(p) / "ragbridge_lexeval").is_dir()]
