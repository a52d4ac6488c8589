"""The rubric plugin's commands: ``ragbridge pairwise`` and ``ragbridge label``.

Both find a run's rubric the way the run did: the files named with ``--rubric`` (default: the files
recorded in the run's options), on top of the built-in rubrics. When the run recorded a content hash
for the metric, the rubric found must have the same hash (else exit 2: a page or a comparison by
another rubric than the run's would be silently different).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ..commands import JudgeOptions, judge_options

if TYPE_CHECKING:  # pragma: no cover
    from ..run import Run
    from .rubrics import Rubric

# The commands import what they use when they run: registering them (every ``ragbridge`` command
# line, ``--help`` included) imports neither the runner, the report nor the rubrics.

__all__ = ["register", "rubric_of_run"]


def rubric_of_run(run: Run, metric: Optional[str], files: Optional[List[Path]]) -> Rubric:
    """The rubric ``run`` judged ``metric`` by (see the module docstring). Raises RubricError."""
    from .rubrics import RubricError, rubric_set

    opts = ((run.manifest.options or {}).get("backend_options") or {}).get("rubric") or {}
    recorded = opts.get("files") or []
    if files:
        chosen = [str(f) for f in files]
    else:
        chosen = [recorded] if isinstance(recorded, str) else list(recorded)
    rubrics = rubric_set(chosen, [] if files else (opts.get("rubrics") or []))
    digests = run.manifest.digests.get("rubric", {})
    if metric is None:
        if len(digests) != 1:
            raise RubricError("name the metric with --metric: the run scored "
                              + (", ".join(sorted(digests)) + " with the rubric backend" if digests
                                 else "no rubric metric"))
        metric = next(iter(digests))
    rubric = rubrics.get(metric)
    where = ", ".join(chosen) or "the built-in rubrics"
    if rubric is None:
        raise RubricError(f"no rubric named {metric!r} in {where} (rubrics: {', '.join(sorted(rubrics))}); "
                          "pass the file that defines it with --rubric")
    if metric in digests and digests[metric] != rubric.hash:
        raise RubricError(f"rubric {metric!r} from {where} has hash {rubric.hash}, but {run.path} was judged "
                          f"by hash {digests[metric]}: pass the rubric file the run used with --rubric (or "
                          "score the run again with this one)")
    return rubric


def _pct(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def register(cli) -> None:
    def _run(path: Path, what: str) -> Run:
        from ..commands.output import fail
        from ..run import RunError, load_run

        try:
            return load_run(path)
        except (RunError, ValueError) as exc:
            fail(f"{what}: {exc}")

    @cli.command("label")
    def label_cmd(
        run_dir: Path = typer.Argument(..., help="Run folder scored by the rubric backend."),
        metric: Optional[str] = typer.Option(None, "--metric", "-m", help="Metric (rubric) to label."),
        n: int = typer.Option(50, "--n", help="Cases to draw."),
        seed: int = typer.Option(0, "--seed", help="Seed: the same run, metric and seed, the same sample."),
        backend: str = typer.Option("rubric", "--backend", "-b", help="Backend whose verdicts stratify."),
        rubric: List[Path] = typer.Option(None, "--rubric", help="Rubric file (default: the run's)."),
        out_file: Optional[Path] = typer.Option(None, "--out", "-o",
                                                help="Page to write (default RUN/label-METRIC.html)."),
        as_json: bool = typer.Option(False, "--json", help="Print what was drawn as JSON."),
    ) -> None:
        """Write an offline page to grade a stratified sample of a run by a rubric (labels for validate)."""
        from rich.markup import escape

        from ..commands.output import fail, out, print_json, refuse_overwriting
        from ..formats.files import write_atomic
        from ..run.folder import run_files
        from .label import label_summary, render_page, sample_for_labels, strata_of
        from .rubrics import RubricError

        if n < 1:
            fail(f"--n must be at least 1, got {n}")
        refuse_overwriting(out_file, *run_files(run_dir), *(rubric or ()))
        r = _run(run_dir, "run")
        try:
            rub = rubric_of_run(r, metric, rubric)
        except RubricError as exc:
            fail(str(exc))
        if not any(s.metric == rub.name and s.backend == backend for s in r.scores):
            scored = sorted({f"{s.backend}:{s.metric}" for s in r.scores})
            fail(f"{run_dir}: backend {backend!r} scored no {rub.name!r} in this run; "
                 f"it scored: {', '.join(scored) or 'nothing'}")
        picked = sample_for_labels(r, rub.name, backend, rub, n, seed)
        if not picked:
            fail(f"{run_dir}: no case has a scored {backend}:{rub.name} to label")
        target = out_file or (run_dir / f"label-{rub.name}.html")
        sizes = {side: len(cs) for side, cs in strata_of(r, rub.name, backend, rub).items()}
        page = render_page(rub, picked, str(run_dir), seed, sizes, backend)
        try:
            write_atomic(target, page)
        except OSError as exc:
            fail(f"cannot write {target}: {exc.strerror or exc}")
        info = {**label_summary(picked), "page": str(target), "metric": rub.name, "rubric_hash": rub.hash,
                "labels_file": f"labels-{rub.name}.jsonl", "threshold": rub.threshold,
                "case_ids": [c.id for c, _ in picked], "strata": sizes}
        if as_json:
            print_json(info)
            return
        tags = ", ".join(f"{t} {k}" for t, k in info["tags"].items())
        out.print(f"label page written to [bold]{escape(str(target))}[/]: {info['n']} case(s), "
                  f"{info['pass']} of the {sizes['pass']} the judge passed and {info['fail']} of the "
                  f"{sizes['fail']} it failed" + (f" (of {n} asked)" if info["n"] < n else ""),
                  highlight=False)
        out.print(f"[dim]tags: {escape(tags)}[/]", highlight=False)
        out.print("open it in a browser, grade each case and press Save labels; then validate the judge "
                  "with the file your browser saved:", highlight=False)
        out.print(f"  ragbridge validate {escape(str(run_dir))} --labels {info['labels_file']} "
                  f"--threshold {backend}:{rub.name}={rub.threshold:g}", highlight=False, soft_wrap=True)

    @cli.command("pairwise")
    @judge_options
    def pairwise_cmd(
        base_dir: Path = typer.Argument(..., help="Base run folder."),
        new_dir: Path = typer.Argument(..., help="New run folder (the same cases, other answers)."),
        metric: Optional[str] = typer.Option(None, "--metric", "-m", help="Rubric to compare by."),
        rubric: List[Path] = typer.Option(None, "--rubric", help="Rubric file (TOML); default: built-ins."),
        seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
        resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples (at least 100)."),
        top: int = typer.Option(5, "--top", help="Cases to list on each side."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
        out_json: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the JSON here."),
        judge: JudgeOptions = JudgeOptions({}),
    ) -> None:
        """Ask the judge which run's answer is better, case by case, in both orders (win/tie/loss)."""
        import asyncio

        from rich.markup import escape

        from ..commands.output import err, fail, out, print_json, refuse_overwriting
        from ..formats.files import write_atomic
        from ..judge import JudgeGateway
        from ..run.folder import run_files
        from ..report.text import jsonable
        from .pairwise import compare_runs
        from .rubrics import RubricError, load_rubrics

        if resamples < 100:
            fail(f"--resamples must be at least 100, got {resamples}")
        refuse_overwriting(out_json, *run_files(base_dir), *run_files(new_dir), *(rubric or ()))
        base, new = _run(base_dir, "base run"), _run(new_dir, "new run")
        try:
            if metric is None:  # the one rubric of the one file given
                own = load_rubrics(rubric[0]) if rubric and len(rubric) == 1 else []
                if len(own) != 1:
                    fail("name the rubric to compare by with --metric (or pass one file defining one rubric)")
                metric = own[0].name
            rub = rubric_of_run(new, metric, rubric or None)
        except RubricError as exc:
            fail(str(exc))
        cfg = judge.load()
        if cfg is None:
            fail("no judge configured: pass --judge-model and --judge-base-url, or set [judge] in "
                 "ragbridge.toml")
        gateway = JudgeGateway(cfg)
        try:
            gateway.preflight()
            gateway.start()
            res = asyncio.run(compare_runs(base, new, rub, gateway,
                                           seed=seed, n_resamples=resamples))
        except Exception as exc:  # the judge cannot be used at all
            fail(str(exc))
        finally:
            gateway.close()
        data = jsonable({"base": str(base_dir), "new": str(new_dir), **res.to_dict()})
        if out_json is not None:
            try:
                write_atomic(out_json, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            except OSError as exc:
                fail(f"cannot write {out_json}: {exc.strerror or exc}")
        if as_json:
            print_json(data)
            return
        n = res.n_decided
        out.print(f"[bold]Pairwise[/]: {escape(str(new_dir))} (new) vs {escape(str(base_dir))} (base) by "
                  f"rubric {escape(rub.name)} ({rub.hash}), judge {escape(res.judge_model)}"
                  + (" [yellow](stub)[/]" if res.stub else ""), highlight=False)
        out.print(f"{res.n_paired} paired case(s): {res.n_both_orders} judged in both orders, "
                  f"{res.identical} identical (ties, no call), {res.errored} errored"
                  + "".join(f"; {k2}: {v}" for k2, v in res.skipped.items()), highlight=False)
        out.print(f"new better {res.wins} ({_pct(res.wins / n if n else float('nan'))}), tie {res.ties} "
                  f"({_pct(res.ties / n if n else float('nan'))}), base better {res.losses} "
                  f"({_pct(res.losses / n if n else float('nan'))})", highlight=False)
        ci = "" if math.isnan(res.net_low) else f" [95% CI {res.net_low:+.3f}, {res.net_high:+.3f}]"
        out.print("net preference (wins - losses) / n: "
                  + ("—" if math.isnan(res.net) else f"{res.net:+.3f}") + ci, highlight=False)
        out.print(f"position bias: the verdict flipped with the order on {res.position_flips} of "
                  f"{res.n_both_orders} case(s) ({_pct(res.position_bias)})", highlight=False)
        for side, label in (("new", "new better"), ("base", "base better")):
            shown = [it for it in res.items if it.get("outcome") == side and not it.get("error")][:top]
            for it in shown:
                out.print(f"  {label}: {escape(it['case_id'])}: {escape(it.get('reason_base_first', ''))}",
                          highlight=False)
        errors = [it for it in res.items if it.get("error")]
        for it in errors[:top]:
            err.print(f"[red]error[/] {escape(it['case_id'])}: {escape(it['error'])}", highlight=False)
        out.print(f"[dim]judge: {res.judge_calls} call(s); replies asked as {res.structured}[/]",
                  highlight=False)
