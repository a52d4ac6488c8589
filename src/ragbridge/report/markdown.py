"""The report as GitHub-flavoured Markdown: the same content as the HTML report, every piece of text
from the data escaped (`ragbridge.report.text.md_text`), so none can format, link or break a table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, TextIO, Union

from ..analysis.table import open_run
from ..judge.audit import calls_phrase
from ..run import Run
from ..run.summary import ALL
from .html import CHUNKS_SHOWN, FULL_BUDGET, FULL_CASES, cases_in_full, shown_cases
from .data import DIAGNOSIS_LISTED, listed_by_layer, report_data, reused_lines
from .text import (ci_text, column_lines, count, md_text, missed_lines, num, p_text, ragchecker_text,
                   version_change_lines)

__all__ = ["render_markdown", "write_markdown"]

_UNSCORED = ("undefined", "errored", "missing")


def render_markdown(run: Union[Run, str, Path], data: Optional[dict] = None, **kw) -> str:
    """The report as GitHub-flavoured Markdown (all data text escaped)."""
    import io

    buffer = io.StringIO()
    write_markdown(run, buffer, data, **kw)
    return buffer.getvalue()


class _Lines:
    """Lines written out as they are added (``out += [...]``, ``out.append(...)``), each with its line
    break: the report is written a section, and a case, at a time."""

    def __init__(self, out: TextIO):
        self._write = out.write

    def append(self, line: str) -> None:
        self._write(line + "\n")

    def __iadd__(self, lines: Iterable[str]) -> "_Lines":
        self._write("".join(line + "\n" for line in lines))
        return self


def write_markdown(run: Union[Run, str, Path], out: TextIO, data: Optional[dict] = None,
                   full: int = FULL_CASES, **kw) -> None:
    """Write the report as GitHub-flavoured Markdown to ``out``, a section (and a case) at a time; the
    cases in full are those of the HTML report (at most ``full``, the ones that matter first, each with
    its first chunks, within `FULL_BUDGET`), and the file says how many it leaves out."""
    run = open_run(run)
    d = data or report_data(run, **kw)
    lines = _Lines(out)
    for section in (_head, _moved, _gate, _sides, _halves, _by_tag, _diagnosis, _agreement, _validation,
                    _usage, _noise, _trend, _thresholds):
        section(d, lines)
    _cases(run, d, lines, full)


def _head(d: dict, out: list[str]) -> None:
    r = d["run"]
    joined = r.get("joined")
    out += [f"# ragbridge report: {md_text(r['path'] or ' + '.join(joined['runs'] if joined else []))}", ""]
    if r.get("stub_judge"):
        out += ["> **Stub judge.** Every judged score of this run came from ragbridge's deterministic stub "
                "judge, not a language model: the scores test the evaluation plumbing, not the answers.", ""]
    counts = r.get("counts") or {}
    ds = r["dataset"]
    out.append(f"- dataset: {md_text(ds.get('path'))} ({count(ds.get('n_cases'))} cases, "
               f"{md_text(ds.get('fingerprint'))})")
    out.append("- backends: " + ", ".join(f"{md_text(b)} {md_text(v or '')}".strip()
                                          for b, v in (r["backends"] or {}).items()))
    if r.get("judge"):
        out.append(f"- judge: {md_text(r['judge'].get('model'))} at {md_text(r['judge'].get('base_url'))}")
        if r["judge"].get("self_judging"):
            sj = r["judge"]["self_judging"]
            out.append(f"- **self-judging**: the judge is the system under test's own model "
                       f"({md_text(sj.get('generator_model'))}) on {sj.get('cases')} case(s); its scores "
                       "are likely inflated")
    if r.get("columns"):
        lines = column_lines(r["columns"], joined)
        out += [f"- {md_text(lines[0])}:"] + [f"  - {md_text(ln.strip())}" for ln in lines[1:]]
    out.append(f"- status: {md_text(r['status'])}; started {md_text(r['started_at'])}, "
               f"finished {md_text(r['finished_at'])}")
    out += [f"- scores: {counts.get('scores', 0)} ({counts.get('scored', 0)} scored, "
            f"{counts.get('undefined', 0)} undefined, {counts.get('errored', 0)} errored)", ""]
    for w in r.get("warnings") or []:
        out += [f"> ⚠️ warning: {md_text(w)}", ""]
    changes = version_change_lines(r.get("version_changes"))
    if changes:
        out += ["**Library versions in this run**", ""]
        out += [f"  - {md_text(ln.strip())}" if ln.startswith("  ") else f"- {md_text(ln)}" for ln in changes]
        out.append("")


def _moved(d: dict, out: list[str]) -> None:
    mv = d.get("moved")
    if not mv:
        return
    t = mv["totals"]
    out += [f"## What moved since {md_text(mv['base']['path'])}", "",
            f"{t['paired_scores']:,} paired scores: **{t['worse']:,} worse**, **{t['better']:,} better**, "
            f"{t['status_changed']:,} changed status.", ""]
    out += [f"- ⚠️ {md_text(w)}" for w in mv["warnings"]] + ([""] if mv["warnings"] else [])
    rows = [r for r in mv["summary"] if r["moved"]]
    if rows:
        out += ["| tag | backend | metric | paired | baseline | this run | change [CI] | p | worse | better "
                "| judge noise |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            noise = ("—" if r["within_noise"] is None
                     else f"{'within' if r['within_noise'] else 'beyond'} (band {num(r['noise_band'])})")
            out.append(f"| {md_text(r['tag'])} | {md_text(r['backend'])} | {md_text(r['metric'])} | "
                       f"{r['n_paired']} | {num(r['base_mean'])} | {num(r['new_mean'])} | "
                       f"{ci_text(r['delta'], r['ci_low'], r['ci_high'], 3, signed=True)} | "
                       f"{p_text(r['p_value'])} | {r['n_worse']} | {r['n_better']} | {noise} |")
        out.append("")
    for label, items in (("got worse", mv["worse"]), ("got better", mv["better"])):
        if items:
            out += [f"Cases that {label} (the {len(items)} largest):", "",
                    "| case | backend | metric | baseline | this run | change |", "|---|---|---|---|---|---|"]
            out += [f"| {md_text(r['case_id'])} | {md_text(r['backend'])} | {md_text(r['metric'])} | "
                    f"{num(r['base_value'])} | {num(r['new_value'])} | {num(r['delta'], signed=True)} |"
                    for r in items]
            out.append("")


def _gate(d: dict, out: list[str]) -> None:
    g = d.get("gate")
    if not g:
        return
    head = "no rule to check" if g["passed"] is None else ("✅ passed" if g["passed"] else "❌ failed")
    out += [f"## Gate: {head}", ""]
    if g.get("error"):
        out += [f"The gate could not be checked on this run: {md_text(g['error'])}", ""]
    if g.get("left_out"):
        out += ["Not checked here (they need `--baseline` or `--history`): "
                + "; ".join(md_text(x) for x in g["left_out"]), ""]
    if g["results"]:
        out += ["| # | backend | rule | figure | n | verdict | detail |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['rule']} | {md_text(r['backend'])} | {md_text(r['label'])} | {num(r['figure'])} | "
                f"{count(r['n'])} | {r['verdict']} | {md_text(r['detail'])} |" for r in g["results"]]
        out.append("")


#: what each side's questions are like, as the report names it
QUESTION_ROWS = (("n", "cases"), ("unanswerable", "share unanswerable"),
                 ("one_label", "share with one label"),
                 ("term_overlap", "term overlap of question and quoted passage"))


def _share(v) -> str:
    return "—" if v is None else f"{v:.0%}"


def _side(x: dict) -> str:
    extra = "".join(f", {x[c]} {lab}" for c, lab in (("n_undefined", "undef"), ("n_errored", "err"))
                    if x.get(c))
    return f"{num(x['mean'])} (n {x['n_scored'] or 0}{extra})"


def _sides(d: dict, out: list[str]) -> None:
    """Real and synthetic cases side by side: the first view of the results when the run has both."""
    sides = d.get("real_vs_synthetic")
    if not sides:
        return
    q = sides["questions"]
    out += ["## Real and synthetic questions", "",
            f"{q['real']['n']:,} cases are tagged `real` and {q['synthetic']['n']:,} `synthetic`. Generated "
            "questions copy their passage's wording, have one answer passage and seldom ask what the "
            "documents do not answer, so retrieval tends to score higher on them: read the real column "
            "for the system, the synthetic one for what it adds.", "",
            "| backend | metric | real | synthetic | difference |", "|---|---|---|---|---|"]
    for r in sides["rows"]:
        out.append(f"| {md_text(r['backend'])} | {md_text(r['metric'])} | {_side(r['real'])} | "
                   f"{_side(r['synthetic'])} | {num(r['difference'], signed=True)} |")
    out += ["", "What the questions are like:", "", "| | real | synthetic |", "|---|---|---|"]
    for key, label in QUESTION_ROWS:
        cells = [str(q[side][key]) if key == "n" else
                 num(q[side][key]) if key == "term_overlap" else _share(q[side][key])
                 for side in ("real", "synthetic")]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")


def _halves(d: dict, out: list[str]) -> None:
    idx = {(x["metric"], x["backend"]): x for x in d["summary"]}
    for half in ("retrieval", "generation"):
        ms = d["halves"][half]
        if not ms:
            continue
        bs = [b for b in d["backends"] if any((m, b) in idx for m in ms)]
        out += [f"## {half.capitalize()}", "", "| metric | " + " | ".join(md_text(b) for b in bs) + " |",
                "|---|" + "---|" * len(bs)]
        for m in ms:
            cells = []
            for b in bs:
                x = idx.get((m, b))
                if x is None:
                    cells.append("")
                    continue
                extra = [f"{x['n_undefined']} undef" if x["n_undefined"] else "",
                         f"{x['n_errored']} err" if x["n_errored"] else "",
                         f"{x['unsupported_share']:.0%} with an unsupported claim" if x["n_claims"] else "",
                         ragchecker_text(x)]
                more = "".join(", " + e for e in extra if e)
                cells.append(f"{num(x['mean'])}: {x['n_pass']:,} of {x['n_pass'] + x['n_fail']:,} pass "
                             f"≥ {x['threshold']:.3g} (n {x['n_scored']:,}{more})")
            out.append(f"| {md_text(m)} | " + " | ".join(cells) + " |")
        out.append("")


def _by_tag(d: dict, out: list[str]) -> None:
    if not d["summary_by_tag"]:
        return
    keys = [(x["backend"], x["metric"]) for x in d["summary"]]
    out += ["## Per tag (mean, n scored, undefined and errored when any)", "",
            "| tag | " + " | ".join(md_text(f"{b}:{m}") for b, m in keys) + " |",
            "|---|" + "---|" * len(keys)]
    for tag, rows in d["summary_by_tag"].items():
        ti = {(x["backend"], x["metric"]): x for x in rows}
        cells = []
        for k in keys:
            x = ti.get(k)
            if x is None:
                cells.append("")
                continue
            extra = "".join(f", {x[c]} {lab}" for c, lab in (("n_undefined", "undef"), ("n_errored", "err"))
                            if x[c])
            extra += f", {x['unsupported_share']:.0%} unsup." if x["n_claims"] else ""
            cells.append(f"{num(x['mean'])} ({x['n_scored']}{extra})")
        out.append(f"| {md_text(tag)} | " + " | ".join(cells) + " |")
    out.append("")


def _figure(row: dict, f: str) -> str:
    return ci_text(row[f], row[f + "_low"], row[f + "_high"])


def _agreement(d: dict, out: list[str]) -> None:
    out += ["## Agreement between backends", ""]
    if not d["agreement"]:
        out.append("No metric in this run is scored by two or more backends.")
        return
    out += ["95% posterior intervals in brackets (docs/report.md); kappa and agreement at the thresholds "
            "shown; "
            "PP/PF/FP/FF: both pass, only A passes, only B passes, both fail.", "",
            "| metric | A vs B | paired | Spearman | Kendall | Pearson | MAE | thresholds | kappa "
            "| agreement | PP/PF/FP/FF | not scored |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in d["agreement"]:
        ns = "; ".join(
            f"{md_text(a['backend_' + s])}: " + ", ".join(f"{a[s + '_' + k]:,} {k}" for k in _UNSCORED
                                                         if a[s + "_" + k])
            for s in ("a", "b") if any(a[s + "_" + k] for k in _UNSCORED))
        out.append(
            f"| {md_text(a['metric'])} | {md_text(a['backend_a'])} vs {md_text(a['backend_b'])} | "
            f"{a['n_paired']:,}/{a['n_cases']:,} | "
            + " | ".join(_figure(a, f) for f in ("spearman", "kendall", "pearson", "mae"))
            + f" | {a['threshold_a']:g} / {a['threshold_b']:g} | {_figure(a, 'kappa')} | "
            f"{_figure(a, 'agreement')} | "
            f"{a['both_pass']:,}/{a['a_pass_b_fail']:,}/{a['a_fail_b_pass']:,}/{a['both_fail']:,} | "
            f"{ns or '—'} |")
    out.append("")
    if not d["disagreements"]:
        return
    out += ["### Largest disagreements", "",
            "| metric | case | spread | " + " | ".join(md_text(b) for b in d["backends"]) + " |",
            "|---|---|---|" + "---|" * len(d["backends"])]
    for x in d["disagreements"]:
        per = {p["backend"]: p for p in x["backends"]}
        cells = []
        for b in d["backends"]:
            p = per.get(b)
            if not p:
                cells.append("")
                continue
            val = num(p["value"]) if p["status"] == "scored" else p["status"]
            cells.append(md_text(val) + (f"<br>{md_text(p['reason'])}" if p.get("reason") else ""))
        out.append(f"| {md_text(x['metric'])} | {md_text(x['case_id'])}<br>{md_text(x['question'])} | "
                   + ("scored by one, errored at another" if x.get("scored_by_one")
                      else f"{num(x['spread'])}{' ≠' if x['verdicts_differ'] else ''}")
                   + " | " + " | ".join(cells) + " |")
    out.append("")


def _diagnosis(d: dict, out: list[str]) -> None:
    g = d.get("diagnosis")
    if not g or not g["n_failing"]:
        return
    layers = list(g["counts"])
    out += ["## Diagnosis: which layer failed", "",
            f"{g['n_failing']:,} of {g['n_cases']:,} cases fail a metric; each gets the layer of the first "
            "question it fails (docs/diagnose.md).", "",
            "| slice | cases | failing | " + " | ".join(layers) + " |",
            "|---|---|---|" + "---|" * len(layers),
            f"| all | {g['n_cases']:,} | {g['n_failing']:,} | "
            + " | ".join(f"{g['counts'][x]:,}" for x in layers) + " |"]
    out += [f"| {md_text(r['tag'])} | {r['n_cases']:,} | {r['n_failing']:,} | "
            + " | ".join(f"{r[x]:,}" for x in layers) + " |" for r in g["by_tag"]]
    out += ["", "| case | layer | why |", "|---|---|---|"]
    n = DIAGNOSIS_LISTED
    for x, (group, in_layer) in listed_by_layer(g, n).items():
        out += [f"| {md_text(c['case_id'])} | {x} | {md_text(c['reason'])} |" for c in group]
        if in_layer > n:
            out.append(f"| … | {x} | and {in_layer - n:,} more: `ragbridge diagnose` on the run "
                       "lists every case |")
    out.append("")


def _validation(d: dict, out: list[str]) -> None:
    if not d.get("validation"):
        return
    out += ["## Against human labels", "",
            "Positive = pass. TPR: share of human passes the backend passes; TNR: share of human fails it "
            "fails; 95% posterior intervals in brackets (docs/report.md). Labels drawn by stratum are "
            "weighted by it.", "",
            "| metric | backend | threshold | labelled | scored | not scored | human pass/fail | TPR | TNR "
            "| missed fails | kappa | balanced accuracy | agreement | unsupported claims |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in d["validation"]:
        claims = f"{_figure(v, 'unsupported_share')} of {v['claims_answers']}" if v["claims_answers"] else "—"
        out.append(
            f"| {md_text(v['metric'])} | {md_text(v['backend'])} | {v['threshold']:g} | {v['n_labels']:,} | "
            f"{v['n_paired']:,} | {v['unscored']} | {v['human_pass']:,}/{v['human_fail']:,} | "
            f"{_figure(v, 'tpr')} | {_figure(v, 'tnr')} | {v['fp']:,}/{v['human_fail']:,} | "
            f"{_figure(v, 'kappa')} | {_figure(v, 'balanced_accuracy')} | {_figure(v, 'agreement')} | "
            f"{claims} |")
    out.append("")
    for metric, why in dict.fromkeys((v["metric"], v["not_random"]) for v in d["validation"]
                                     if v.get("not_random")):
        out.append(f"- **{md_text(metric)}: {md_text(why)}**")
    for v in d["validation"]:
        out += [f"- {md_text(line)}" for line in missed_lines(v, f"{v['metric']}, {v['backend']}")]
    out.append("")


def _usage(d: dict, out: list[str]) -> None:
    out += ["## Judge calls, tokens and time", "",
            "Wall time: from the start of scoring to the backend's last score (backends run side by side, "
            "so these overlap). Sum of call times: each score's own time added up; a backend scores many "
            "cases at once, so the sum can be many times its wall time.", "",
            "Judge calls: calls sent to the judge (every session's, as the run total counts them); "
            "requests: what the judge received, retries included; cached: answered from the judge cache.",
            "",
            "| backend | scores | reused | judge calls | requests | cached | prompt tokens "
            "| completion tokens | wall time (s) | sum of call times (s) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for u in d["judge_usage"]:
        out.append(f"| {md_text(u['backend'])} | {u['scores']} | {u['reused']} | {u['judge_calls']} | "
                   f"{u.get('requests', u['judge_calls'])} | {u.get('cache_hits', 0)} | "
                   f"{u['prompt_tokens']} | {u['completion_tokens']} | {num(u['wall_seconds'], 1)} | "
                   f"{u['call_seconds']:.1f} |")
    reused = reused_lines(d.get("reused_from"))
    if reused:
        out += ["", "Reused: " + " ".join(md_text(line) for line in reused)]
    j = (d["run"].get("counts") or {}).get("judge")
    if j:
        out += ["", f"Run total: {calls_phrase(j)}, "
                f"{j.get('prompt_tokens', 0)} prompt + {j.get('completion_tokens', 0)} completion tokens."]
    cost = d.get("cost") or {}
    if cost.get("priced"):
        cur = cost.get("currency", "USD")

        def money(v):
            return "unknown" if v is None else f"{v:.4f} {cur}"
        out += ["", f"Cost by the judge's price table: {money(cost.get('total'))} in all; "
                + ", ".join(f"{md_text(k)} {money(v)}" for k, v in (cost.get("by_metric") or {}).items())
                + ". Per case: each score's `cost` in the JSON report and `scores.jsonl`."]
    out.append("")


def _noise(d: dict, out: list[str]) -> None:
    n = d.get("noise") or {}
    if not n.get("figures"):
        return
    out += ["## Judge noise", "",
            f"Every judged score was taken {n['repeats']} times. Within-case SD: the spread of a case's "
            "repeats (pooled); flips: the share of cases whose verdict differs between repeats; alpha: "
            "test-retest reliability (Krippendorff, interval); MDE: the smallest change in the mean this "
            "set can detect against judge noise (power 0.8, two-sided 5%).", "",
            "| backend | metric | cases | within-case SD | flips | alpha | MDE |",
            "|---|---|---|---|---|---|---|"]
    for f in n["figures"]:
        out.append(f"| {md_text(f['backend'])} | {md_text(f['metric'])} | {f['n_cases']:,} | "
                   f"{num(f['within_sd'])} | {num(f['flip_share'], 2)} | {num(f['alpha'], 2)} | "
                   f"{num(f['mde'])} |")
    for key, rows in (n.get("top") or {}).items():
        out += ["", f"Spread per case, {md_text(key)} (largest first):", "",
                "| case | repeats | mean | SD | verdict flips |", "|---|---|---|---|---|"]
        for r in rows:
            vals = ", ".join(num(v, 2) for v in r["values"])
            out.append(f"| {md_text(r['case_id'])} | {vals} | {num(r['mean'])} | {num(r['sd'])} | "
                       f"{'yes' if r['flips'] else 'no'} |")
    out.append("")


def _trend(d: dict, out: list[str]) -> None:
    t = d.get("trend")
    if not t:
        return
    out += ["## Trend over runs", "",
            f"The mean of each metric in {len(t['runs'])} runs by start time (this run last): the "
            "least-squares slope per run with its t 95% interval, and the change points (binary "
            "segmentation, permutation test).", "",
            "| backend | metric | runs | means by run | slope per run [95% CI] | change points |",
            "|---|---|---|---|---|---|"]
    for row in t["summary"]:
        if row["tag"] != ALL:
            continue
        key = (row["backend"], row["metric"], row["tag"])
        means = ", ".join(f"#{s['position']} {num(s['mean'])}" for s in t["series"]
                          if (s["backend"], s["metric"], s["tag"]) == key)
        cps = ", ".join(f"before #{c['position']} ({num(c['shift'], signed=True)}, p {p_text(c['p_value'])})"
                        for c in t["changes"] if (c["backend"], c["metric"], c["tag"]) == key)
        ci = (f" [{num(row['slope_low'], 4, True)}, {num(row['slope_high'], 4, True)}]"
              if row["slope_low"] is not None else "")
        out.append(f"| {md_text(row['backend'])} | {md_text(row['metric'])} | {row['n_runs']} | {means} | "
                   f"{num(row['slope'], 4, True)}{ci} | {cps or 'none'} |")
    out.append("")


def _thresholds(d: dict, out: list[str]) -> None:
    out += ["## Thresholds", "",
            "A score passes at or above its threshold (with repeats: when a majority of them do). From "
            "`--threshold`, then the gates file (`--gates`), then the backend's own pass rule (a rubric's "
            "pass level), then the defaults: 0.5 for ranking and judged metrics, 1/k for precision@k and "
            "context_relevance, 1 for must_contain, must_not_contain and abstention, no bar (0) for "
            "span_precision@k, span_iou@k and precision_omega.", "",
            "| metric | backend | threshold | from | cases that fail |", "|---|---|---|---|---|"]
    for t in d["thresholds"]:
        out.append(f"| {md_text(t['metric'])} | {md_text(t['backend'])} | {t['threshold']:.3g} | "
                   f"{md_text(t['source'])} | {t['n_below']:,} of {t['n_scored']:,} |")
    out.append("")


def _cases(run: Run, d: dict, out: list[str], full: int = FULL_CASES) -> None:
    out += ["## Cases", ""]
    n = len(run.columns.cases)
    shown, _ = shown_cases(run, d, cases_in_full(d, run.columns, full), FULL_BUDGET)
    if len(shown) < n:
        out += [f"{len(shown):,} of {n:,} cases in full: the ones that matter first (errored, most "
                f"disagreeing, verdicts differing between backends, below a threshold), as the HTML report "
                f"shows them (`--full N` sets how many, within {FULL_BUDGET >> 20} MB of text). Every case's "
                "scores: `ragbridge report RUN --format json`; its chunks, answer and reasons: the run "
                "folder's `cases.jsonl` and `scores.jsonl`.", ""]
    for c in shown:
        out += [f"### {md_text(c['id'])}", ""]
        if c["tags"]:
            out += ["tags: " + ", ".join(md_text(t) for t in c["tags"])
                    + ("" if c["answerable"] else " (unanswerable)"), ""]
        if c["below"]:
            out += ["**Below threshold:** "
                    + "; ".join(f"{md_text(b['metric'])} ({md_text(b['detail'])})" for b in c["below"]), ""]
        out += [f"**Question.** {md_text(c['question'])}", "",
                f"**Answer.** {md_text(c['answer']) if c['answer'] else '_(none)_'}", ""]
        if c["reference"]:
            out += [f"**Reference.** {md_text(c['reference'])}", ""]
        if c["contexts"]:
            out += ["| rank | chunk | relevant | text |", "|---|---|---|---|"]
            for ch in c["contexts"]:
                rel = ("duplicate, dropped" if ch["duplicate"]
                       else f"yes (grade {ch['grade']})" if ch["relevant"]
                       else "judged not relevant" if ch["grade"] == 0 else "")
                out.append(f"| {ch['rank'] or ''} | {md_text(ch['id'])} | {rel} | {md_text(ch['text'])} |")
            out.append("")
            if c.get("chunks_hidden"):
                out += [f"{c['chunks_hidden']} more chunk(s) not shown (the first {CHUNKS_SHOWN} and the "
                        "relevant ones after them are).", ""]
        if c["scores"]:
            out += ["| metric | backend | value | reason |", "|---|---|---|---|"]
            for s in c["scores"]:
                val = num(s["value"]) if s["status"] == "scored" else s["status"]
                if s["passed"] is not None:
                    val += " pass" if s["passed"] else " fail"
                out.append(f"| {md_text(s['metric'])} | {md_text(s['backend'])} | {val} | "
                           f"{md_text(s['error'] or s['reason'])} |")
            out.append("")
