"""``ragbridge judge serve`` and ``ragbridge judge check``, the judge options every command that
calls the judge takes (`judge_options`, declared once here), and the judge configuration they read
(`judge_config`: the command line over ``ragbridge.toml`` over ``pyproject.toml``).
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.markup import escape

from .output import fail, out

__all__ = ["register", "judge_config", "judge_options", "JudgeOptions", "judge_serve", "judge_check"]

# The judge options: (parameter, JudgeConfig field, type, option). Every command that calls the judge
# takes all of them, through `judge_options`.
_OPTIONS: list[tuple[str, Optional[str], Any, Any]] = [
    ("judge_model", "model", Optional[str], typer.Option(None, "--judge-model", help="Judge model name.")),
    ("judge_base_url", "base_url", Optional[str], typer.Option(
        None, "--judge-base-url", help="Base URL of the judge (OpenAI-compatible; see docs/judges.md).")),
    ("judge_api_key_env", "api_key_env", Optional[str], typer.Option(
        None, "--judge-api-key-env", help="Environment variable that holds the judge's key (default "
                                          "OPENAI_API_KEY; none needed on this machine).")),
    ("embedding_model", "embedding_model", Optional[str], typer.Option(
        None, "--embedding-model", help="Embedding model name, for metrics that embed.")),
    ("cache_mode", "cache_mode", Optional[str], typer.Option(
        None, "--cache-mode", help="Judge cache: read-write, read-only or off.")),
    ("cache_path", "cache_path", Optional[Path], typer.Option(
        None, "--cache-path", help="Judge cache file (SQLite).")),
    ("max_concurrency", "max_concurrency", Optional[int], typer.Option(
        None, "--max-concurrency", help="Judge calls in flight at once, across all backends (default 8).")),
    ("requests_per_minute", "requests_per_minute", Optional[float], typer.Option(
        None, "--requests-per-minute", help="Judge requests started per minute, across all backends and "
                                            "workers (default: no limit).")),
    ("config", None, Optional[Path], typer.Option(
        None, "--config", help="Config file (default: ./ragbridge.toml, then [tool.ragbridge] in "
                               "./pyproject.toml).")),
]


@dataclass(frozen=True)
class JudgeOptions:
    """What the judge options of one command line say: the settings given (the others None) and the
    config file."""

    overrides: dict[str, Any]
    config: Optional[Path] = None

    def load(self):
        """The judge configuration (`judge_config`), or None when none is configured."""
        return judge_config(self.overrides, self.config)


def judge_options(command: Callable) -> Callable:
    """Give ``command`` the judge options: its parameter ``judge`` (a `JudgeOptions`) stands for
    them on the command line."""
    hints = typing.get_type_hints(command)
    signature = inspect.signature(command)
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in signature.parameters.values() if p.name != "judge"]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=typ)
             for name, _, typ, option in _OPTIONS]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name, None) for name, _, _, _ in _OPTIONS}
        overrides = {field: given[name] for name, field, _, _ in _OPTIONS if field is not None}
        return command(*args, judge=JudgeOptions(overrides, given["config"]), **kwargs)

    wrapper.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{p.name: p.annotation for p in own + added},
                               "return": hints.get("return", None)}
    return wrapper


def register(cli: typer.Typer) -> None:
    """The ``judge`` group of commands, with the root's plain-text help."""
    judge_cli = typer.Typer(help="The judge: serve the stub judge, check a configuration.", cls=cli.info.cls,
                            no_args_is_help=True, rich_markup_mode=None)
    judge_cli.command("serve")(judge_serve)
    judge_cli.command("check")(judge_check)
    cli.add_typer(judge_cli, name="judge")


def judge_config(overrides: dict, config: Optional[Path]):
    """The judge configuration from the CLI and config files, or None when none is configured.

    A configuration that is present but wrong (bad URL, unknown key, unreadable file) is an error
    here; one that is merely absent only matters if a planned metric needs a judge, which the runner
    says.
    """
    from ..judge import JudgeConfig, JudgeConfigError

    try:
        return JudgeConfig.load(overrides, config_file=config)
    except JudgeConfigError as exc:
        if " is not set" in str(exc) and not any(overrides.get(k) for k in ("model", "base_url")):
            return None
        fail(str(exc))


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
    """Check the judge configuration: the key is set and the endpoint answers."""
    from ..judge import JudgeGateway

    cfg = judge.load()
    if cfg is None:
        fail("no judge configured: pass --judge-model and --judge-base-url, or set [judge] in ragbridge.toml")
    gateway = JudgeGateway(cfg)
    try:
        gateway.start()
        gateway.preflight()
    except Exception as exc:
        fail(str(exc))
    finally:
        gateway.close()
    out.print(escape(f"judge ok: {cfg.model} at {cfg.public_dict().get('base_url')}"), highlight=False)
