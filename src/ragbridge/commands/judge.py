"""``ragbridge judge serve`` and ``ragbridge judge check``. The judge options every command that calls
the judge takes, and the configuration they make, are declared once: `ragbridge.commands.judge_options`
and `ragbridge.commands.JudgeOptions.load`.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from ..errors import cli_text
from . import JudgeOptions, judge_options
from .output import fail, out

__all__ = ["register", "judge_serve", "judge_check"]

def register(cli: typer.Typer) -> None:
    """The ``judge`` group of commands, with the root's plain-text help."""
    judge_cli = typer.Typer(help="The judge: serve the stub judge, check a configuration.", cls=cli.info.cls,
                            no_args_is_help=True, rich_markup_mode=None)
    judge_cli.command("serve")(judge_serve)
    judge_cli.command("check")(judge_check)
    cli.add_typer(judge_cli, name="judge")


def judge_serve(
    stub: bool = typer.Option(
        False, "--stub", help="Serve the deterministic stub judge (the only server ragbridge ships)."),
    port: int = typer.Option(8808, "--port", help="Port on 127.0.0.1."),
    latency: float = typer.Option(0.0, "--latency", help="Seconds of delay per request."),
    fault_429: float = typer.Option(0.0, "--fault-rate-429", help="Share of requests answered 429."),
    fault_500: float = typer.Option(0.0, "--fault-rate-500", help="Share of requests answered 500."),
    fault_timeout: float = typer.Option(
        0.0, "--fault-rate-timeout", help="Share of requests held past the client's timeout."),
    fault_malformed: float = typer.Option(
        0.0, "--fault-rate-malformed", help="Share of answers whose content is malformed JSON."),
    seed: int = typer.Option(0, "--seed", help="Seed of the fault draws."),
) -> None:
    """Serve an OpenAI-compatible judge on 127.0.0.1 for testing eval plumbing without a key."""
    if not stub:
        fail("only the stub judge can be served: pass --stub")
    rates = {"429": fault_429, "500": fault_500, "timeout": fault_timeout, "malformed": fault_malformed}
    for name, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            fail(f"--fault-rate-{name} must be between 0 and 1, got {rate}")
    from ..testing.stub_judge import serve

    serve(port, latency=latency, fault_rate_429=fault_429, fault_rate_500=fault_500,
          fault_rate_timeout=fault_timeout, fault_rate_malformed=fault_malformed, seed=seed)


@judge_options
def judge_check(judge: JudgeOptions) -> None:
    """Check the judge configuration: the key is set, the endpoint answers and serves the models."""
    from ..judge import JudgeGateway

    cfg = judge.load()
    if cfg is None:
        fail("no judge configured: pass --judge-model and --judge-base-url, or set [judge] in ragbridge.toml")
    gateway = JudgeGateway(cfg)
    try:
        gateway.start()
        checked = gateway.preflight()
    except Exception as exc:
        fail(cli_text(exc))
    finally:
        gateway.close()
    out.print(escape(f"judge ok: {cfg.model} at {cfg.public_dict().get('base_url')}"
                     + _how(checked.get("model_check"), checked)), highlight=False)
    if cfg.embedding_model:
        embedded = checked.get("embeddings", checked)
        out.print(escape(f"embeddings ok: {cfg.embedding_model} at {embedded.get('endpoint')}"
                         + _how(checked.get("embedding_model_check"), embedded)), highlight=False)


def _how(found: Optional[str], checked: dict) -> str:
    """How the model was found served, as a note after "judge ok"."""
    if found is None:  # a recorded cache replayed: no server asked
        return " (not checked: cache_mode is read-only)"
    if found == "listed":
        return " (the server lists it)"
    if found == "any name":
        return " (the stub judge answers any model name)"
    if found == "answered":
        status = checked.get("models_status")
        why = "not in the server's list of models" if status == 200 else \
            f"the server lists no models: GET /models answered HTTP {status}"
        return f" ({why}, but it answered a request of it)"
    return f" (model {found})"
