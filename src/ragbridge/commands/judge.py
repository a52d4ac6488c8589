"""``ragbridge judge serve`` and ``ragbridge judge check``. The judge options every command that calls
the judge takes, and the configuration they make, are declared once: `ragbridge.commands.judge_options`
and `ragbridge.commands.JudgeOptions.load`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..errors import cli_text
from ..report.text import jsonable
from . import JudgeOptions, judge_options
from .output import err, fail, out, print_json, print_lines

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


#: how long ``judge check``'s timed call may take (a judge on a CPU takes minutes)
CHECK_SECONDS = 900.0


@judge_options
def judge_check(
    judge: JudgeOptions,
    quick: bool = typer.Option(False, "--quick", help="Only check the key, the endpoint and the models: "
                                                       "no structured-output probes, no timed call."),
    as_json: bool = typer.Option(False, "--json", help="Print what was checked as JSON."),
) -> None:
    """Check the judge configuration: the key is set, the endpoint answers and serves the models; then
    which ways of asking for a JSON object the server takes, and one timed judge call, with the timeout
    and concurrency they suggest for this machine."""
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
    result: dict = {"judge": cfg.public_dict(), "preflight": checked}
    probing = not quick and cfg.cache_mode != "read-only"
    if probing:
        from ..judge.probe import auto_mode, probe_modes, propose, time_call, time_two_at_once

        if not as_json:
            err.print("asking the judge in each structured-output mode, then one judge-sized call...",
                      markup=False, highlight=False)
        try:
            probed = probe_modes(cfg)
            used = auto_mode(probed)
            timed = time_call(cfg, used or "prompt", CHECK_SECONDS)
            if 200 <= timed["http"] < 300:
                timed["pair"] = time_two_at_once(cfg, used or "prompt", CHECK_SECONDS)
        except Exception as exc:
            fail(f"the judge answered the check, then failed: {cli_text(exc)}")
        configured = {"*": cfg.structured_output, **_backend_modes(judge.config)}
        result.update(structured_output={"modes": probed, "auto": used, "configured": configured},
                      timed_call=timed)
        if 200 <= timed["http"] < 300:
            result["proposed"] = propose(cfg, timed)
    if as_json:
        print_json(jsonable(result))
        return
    out.print(escape(f"judge ok: {cfg.model} at {cfg.public_dict().get('base_url')}"
                     + _how(checked.get("model_check"), checked)), highlight=False)
    if cfg.embedding_model:
        embedded = checked.get("embeddings", checked)
        out.print(escape(f"embeddings ok: {cfg.embedding_model} at {embedded.get('endpoint')}"
                         + _how(checked.get("embedding_model_check"), embedded)), highlight=False)
    if probing:
        print_lines(out, _check_lines(cfg, result))


def _backend_modes(config_file: Optional[Path]) -> dict[str, str]:
    """The backends whose ``structured_output`` the config files set (``[backends.NAME]``), with it."""
    from ..options import OptionError, config_tables

    try:
        tables = config_tables("backends", config_file)
    except OptionError:
        return {}  # a run says what is wrong with them
    return {name: table["structured_output"] for _, backends in tables for name, table in backends.items()
            if isinstance(table.get("structured_output"), str)}


def _check_lines(cfg, result: dict) -> list[str]:
    """What the probes and the timed call found, and the settings they suggest."""
    structured = result["structured_output"]
    lines = ["structured output (how a request for a JSON object is sent):"]
    for mode, found in structured["modes"].items():
        said = f" ({found['said']})" if found.get("said") else ""
        what = {"taken": "taken", "refused": f"refused, HTTP {found['http']}",
                "unusable": "answered, but not with the JSON object asked for",
                "failed": f"failed, HTTP {found['http']}"}[found["status"]]
        lines.append(f"  {mode}: {what}{said}")
    used = structured["auto"]
    refused = [m for m, found in structured["modes"].items() if found["status"] == "refused"]
    if not used:
        lines.append("  the server refuses every mode: set structured_output")
    elif not refused:
        lines.append("  the server refuses none: auto (the default) sends each request as its library asks")
    else:
        lines.append(f"  auto (the default) sends each request as its library asks and, when the server "
                     f"refuses that ({', '.join(refused)}), in {used}")
    for backend, mode in structured["configured"].items():
        found = structured["modes"].get(mode)
        who = "every backend" if backend == "*" else backend
        if found is not None and found["status"] == "taken":
            lines.append(f"  {who} is set to {mode}, which the server takes: "
                         + ("its requests go" if backend != "*" else "requests go") + f" as {mode}")
        if found is not None and found["status"] != "taken":
            lines.append(f"  warning: {who} is set to {mode}, which the server did not take: choose one "
                         "it takes (" + ("structured_output in [judge] of ragbridge.toml or "
                                         "--judge-structured-output" if backend == "*" else
                                         f"structured_output in [backends.{backend}] of ragbridge.toml or "
                                         f"--option {backend}.structured_output=MODE") + ")")
    timed = result["timed_call"]
    tokens = (f" ({timed['prompt_tokens']} prompt + {timed['completion_tokens']} completion tokens)"
              if timed.get("prompt_tokens") is not None else "")
    if not 200 <= timed["http"] < 300:
        lines.append(f"one judge-sized call: failed, HTTP {timed['http']}: {timed.get('said', '')}")
        return lines
    slots = f"; the server runs {timed['slots']} at once" if timed.get("slots") else ""
    lines.append(f"one judge-sized call took {timed['seconds']:.1f} s{tokens}{slots}")
    pair = timed.get("pair") or {}
    if pair.get("one_at_a_time") is not None:
        lines.append(f"two identical small calls sent at once took {pair['together']:.1f} s, one alone "
                     f"{pair['alone']:.1f} s: the server runs "
                     + ("one request at a time (the second waited for the first)" if pair["one_at_a_time"]
                        else "them side by side"))
    p = result["proposed"]
    changes = []
    if p["timeout"] != p["timeout_now"]:
        changes.append(f"timeout = {p['timeout']:g} (now {p['timeout_now']:g})")
    if p["max_concurrency"] != p["max_concurrency_now"]:
        changes.append(f"max_concurrency = {p['max_concurrency']} (now {p['max_concurrency_now']})")
    if changes:
        lines.append("proposed for this judge on this machine, in [judge] of ragbridge.toml (or "
                     "--judge-timeout, --max-concurrency): " + ", ".join(changes))
    else:
        lines.append(f"timeout {p['timeout_now']:g} s and max_concurrency {p['max_concurrency_now']} suit "
                     "this judge")
    return lines


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
