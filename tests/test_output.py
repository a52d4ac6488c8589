"""What the commands print, as a user in a CI log sees it: every command's output at 80 and 200
columns through a pipe (a subprocess's stdout is not a terminal), ``--json`` on every result command
against the README's list of keys, ``diff`` showing what moved, ``gate``'s terminal, Markdown and
JUnit listing the same cases, the stub judge said on screen, help, and short reprs."""

from __future__ import annotations

import html
import json
import re
import shutil
import xml.etree.ElementTree as ET

import pytest

from conftest import EXAMPLE, ROOT, ragbridge_cli
from ragbridge import load_cases, load_run
from ragbridge.testing.stub_judge import StubJudge

WIDTHS = (80, 200)
CASES = load_cases(EXAMPLE)
GATES = """
[[gate]]
check = "faithfulness >= 0.9"

[[gate]]
check = "share(faithfulness >= 0.7) >= 0.95"
tags = ["real"]

[[gate]]
check = "faithfulness drop <= 0.001"
backend = "ragas"

[[gate]]
check = "recall@5 >= 0.5"
backend = "native"
"""


def cli(width: int, *args, **kw):
    return ragbridge_cli(*args, env={"COLUMNS": str(width)}, **kw)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A native run, a run judged by the stub judge (native, RAGAS, DeepEval), the same run with one
    case's RAGAS faithfulness dropped to 0.1, human labels and a gates file."""
    tmp = tmp_path_factory.mktemp("output")
    native = tmp / "native"
    r = cli(80, "run", EXAMPLE, "--out", native, "--no-progress")
    assert r.returncode == 0, r.stderr
    judged = tmp / "judged"
    with StubJudge() as stub:
        r = cli(80, "run", EXAMPLE, "--out", judged, "--backend", "native", "--backend", "ragas",
                "--backend", "deepeval", "--metric", "faithfulness", "--metric", "answer_relevance",
                "--metric", "recall@5", "--metric", "mrr", "--judge-model", "stub",
                "--judge-base-url", stub.base_url, "--cache-path", tmp / "cache.sqlite", "--no-progress")
    assert r.returncode == 0, r.stderr
    judged_stdout = r.stdout
    moved = tmp / "moved"
    shutil.copytree(judged, moved)
    lines, changed = [], None
    for line in (moved / "scores.jsonl").read_text().splitlines():
        s = json.loads(line)
        hit = (s["backend"], s["metric"]) == ("ragas", "faithfulness") and (s["value"] or 0) > 0.5
        if changed is None and hit:
            s["value"], changed = 0.1, s["case_id"]
        lines.append(json.dumps(s))
    (moved / "scores.jsonl").write_text("\n".join(lines) + "\n")
    labels = tmp / "labels.jsonl"
    labels.write_text("".join(
        json.dumps({"case_id": c.id, "metric": "faithfulness",
                    "label": "fail" if c.metadata.get("flaw") else "pass"}) + "\n"
        for c in CASES))
    gates = tmp / "gates.toml"
    gates.write_text(GATES)
    return {"native": native, "judged": judged, "moved": moved, "changed": changed, "labels": labels,
            "gates": gates, "tmp": tmp, "judged_stdout": judged_stdout}


def commands(runs) -> dict[str, tuple]:
    j, m = runs["judged"], runs["moved"]
    return {
        "rescore": ("rescore", runs["native"], "--no-progress"),
        "run": ("run", EXAMPLE, "--out", runs["tmp"] / "again", "--no-progress"),
        "backends": ("backends",),
        "compare": ("compare", j, "--resamples", "200"),
        "validate": ("validate", j, "--labels", runs["labels"], "--resamples", "200"),
        "calibrate": ("calibrate", j, "--from", "deepeval", "--to", "ragas", "--metric", "faithfulness",
                      "--threshold", "0.7", "--resamples", "200"),
        "diff": ("diff", j, m, "--resamples", "200", "--permutations", "200"),
        "gate": ("gate", m, "--config", runs["gates"], "--baseline", j, "--resamples", "200",
                 "--permutations", "200"),
    }


def readable(text: str, width: int) -> None:
    lines = text.splitlines()
    assert lines, "no output"
    assert not [ln for ln in lines if "…" in ln], "cut with an ellipsis"
    too_long = [ln for ln in lines if len(ln) > width]
    assert not too_long, f"{len(too_long)} line(s) wider than {width}: {too_long[:2]}"


def ci(row: dict, f: str, digits: int = 2) -> list[str]:
    """A figure and its interval as printed (a table may put the interval on the cell's second line;
    a value that rounds to zero has no sign: 0.00, not -0.00)."""
    def shown(v: float) -> str:
        text = f"{v:.{digits}f}"
        return text[1:] if text.startswith("-") and not text.strip("-0.") else text

    lo, hi = row.get(f"{f}_low"), row.get(f"{f}_high")
    interval = [] if lo is None or hi is None else [f"[{shown(lo)}, {shown(hi)}]"]
    return [shown(row[f])] + interval


def whole(text: str, name: str, doc: dict) -> list[str]:
    """Strings a reader needs, taken from the command's JSON, each of which must appear whole in ``text``."""
    flat = " ".join(text.split())  # a figure may sit on the second line of a table cell
    need = []
    if name in ("run", "rescore"):
        for row in doc["summary"]:
            need += [row["metric"], f"{row['mean']:.3f}" if row["mean"] is not None else "—"]
        need += [row["tag"] for row in doc["by_tag"]]
    elif name == "backends":
        need += [m["name"] for b in doc["backends"] for m in b["metrics"]]
    elif name == "compare":
        for row in doc["agreement"]:
            need += [row["metric"], f"{row['backend_a']} vs {row['backend_b']}"]
            need += [t for f in ("spearman", "kendall", "pearson", "mae", "kappa", "agreement")
                     if row[f] is not None for t in ci(row, f)]
        need += [row["case_id"] for row in doc["disagreements"]]
        need += [" ".join(row["question"].split()) for row in doc["disagreements"] if row["question"]]
    elif name == "validate":
        for row in doc["validation"]:
            need += [row["backend"]]
            need += [t for f in ("tpr", "tnr", "kappa", "balanced_accuracy") for t in ci(row, f)]
    elif name == "calibrate":
        need += [f"{doc['best']['threshold']:.3g}"] + [row["case_id"] for row in doc["flips"][:10]]
        need += [f"{row['kappa']:.3f}" for row in doc["curve"] if row["kappa"] is not None]
    elif name == "diff":
        for row in doc["summary"]:
            if row["moved"]:
                need += [row["metric"], f"{row['delta']:+.3f}",
                         f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"]
        need += [row["case_id"] for row in doc["worse"]]
    elif name == "gate":
        for r in doc["results"]:
            need += [r["label"], r["detail"]]
            if r["verdict"] == "fail":
                need += [i["case_id"] for i in r["cases_behind"][:10]]
    missing = [s for s in need if s not in text and s not in flat]
    return missing


@pytest.fixture(scope="module")
def docs(runs):
    """Each command's ``--json`` run: (completed process, parsed document)."""
    out = {}
    for name, args in commands(runs).items():
        res = cli(80, *args, "--json")
        assert res.returncode == (1 if name == "gate" else 0), (name, res.stderr)
        out[name] = (res, json.loads(res.stdout))  # the whole of stdout: exactly one document
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.slow
def test_every_command_reads_at_the_width_when_piped(runs, docs, width):
    for name, args in commands(runs).items():
        res = cli(width, *args)
        assert res.returncode == (1 if name == "gate" else 0), (name, res.stderr)
        readable(res.stdout, width)
        if res.stderr.strip():
            readable(res.stderr, width)
        missing = whole(res.stdout, name, docs[name][1])
        assert not missing, (name, missing)
    with StubJudge() as stub:
        others = [("judge", "check", "--judge-model", "m", "--judge-base-url", stub.base_url),
                  ("convert", EXAMPLE, runs["tmp"] / f"deepeval-{width}.json", "--to", "deepeval")]
        for args in others:
            res = cli(width, *args)
            assert res.returncode == 0, (args, res.stderr)
            readable(res.stdout, width)


def test_the_per_tag_table_keeps_metric_names_whole_at_80_columns(runs):
    res = cli(80, "rescore", runs["native"], "--no-progress")
    header = [ln for ln in res.stdout.splitlines() if " tag " in ln]
    names = {w for ln in header for w in re.findall(r"[\w@]+", ln)}
    assert {"abstention", "must_not_contain", "precision@5", "recall@5", "ndcg@5"} <= names, header
    wide = cli(200, "rescore", runs["native"], "--no-progress").stdout
    assert "Mean per tag, 1 of" not in wide  # at 200 columns one table holds every metric


def readme_keys() -> dict[str, set[str]]:
    """The top-level keys the README's "JSON output" table gives for each command."""
    section = (ROOT / "README.md").read_text().split("## JSON output", 1)[1].split("\n## ", 1)[0]
    keys = {}
    for line in section.splitlines():
        m = re.match(r"^\| (`[^|]+`) \| (.+) \|$", line)
        if not m:
            continue
        cell = m.group(2)
        while re.search(r"\([^()]*\)", cell):
            cell = re.sub(r"\([^()]*\)", "", cell)
        for cmd in re.findall(r"`([^`]+)`", m.group(1)):
            keys[cmd] = set(re.findall(r"`([^`]+)`", cell))
    return keys


def test_json_is_one_document_with_the_documented_keys(runs, docs):
    documented = readme_keys()
    assert set(commands(runs)) <= set(documented), set(commands(runs)) - set(documented)
    for name, (res, doc) in docs.items():
        assert set(doc) == documented[name], (name, set(doc) ^ documented[name])
        assert "NaN" not in res.stdout and "Infinity" not in res.stdout, name
    res, doc = docs["rescore"]  # notes go to stderr
    assert "resumed" in res.stderr and doc["counts"]["resumed_from"] > 0 and doc["stub_judge"] is False


def test_diff_shows_what_moved_and_all_with_all(runs, docs):
    j, m, changed = runs["judged"], runs["moved"], runs["changed"]
    res = cli(80, "diff", j, m, "--resamples", "200", "--permutations", "200")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert changed in out and "ragas faithfulness" in out and "(--all lists them)" in out
    tags = next(c.tags for c in CASES if c.id == changed)
    per_tag = re.search(r"^ragas faithfulness: (.*?)(?=^\S)", out[out.index("Per tag"):], re.M | re.S)
    per_tag = per_tag.group(1)
    assert all(f"{t} " in " ".join(per_tag.split()) for t in tags), out  # the slices whose mean moved
    assert "native mrr" not in out and "deepeval" not in out  # nothing that did not move
    assert len(out.splitlines()) < 40
    every = cli(200, "diff", j, m, "--all", "--resamples", "200", "--permutations", "200").stdout
    assert "mrr" in every and "deepeval" in every and "(--all lists them)" not in every
    doc = docs["diff"][1]
    assert [r["case_id"] for r in doc["worse"]] == [changed] and doc["totals"]["worse"] == 1
    assert sum(r["moved"] for r in doc["summary"]) == 1 + len(tags)


def test_gate_terminal_markdown_and_junit_list_the_same_cases(runs):
    md, xml = runs["tmp"] / "gate.md", runs["tmp"] / "gate.xml"
    for top in ("10", "3"):
        res = cli(200, "gate", runs["moved"], "--config", runs["gates"], "--baseline", runs["judged"],
                  "--markdown", md, "--junit", xml, "--top", top, "--resamples", "200",
                  "--permutations", "200")
        assert res.returncode == 1, res.stderr
        terminal = re.findall(r"^(.+): the cases behind it \((\d+) of (\d+)\):$", res.stdout, re.M)
        markdown = [(html.unescape(re.sub(r"\\(.)", r"\1", label)), shown, total) for label, shown, total in
                    re.findall(r"^### ❌ (.+)\n\nThe cases behind it \((\d+) of (\d+)\):$",
                               md.read_text(), re.M)]
        junit = [(f.text.splitlines()[0], *re.search(r"cases behind it \((\d+) of (\d+)\)", f.text).groups())
                 for f in ET.parse(xml).iter("failure")]
        assert terminal and terminal == markdown == junit
        assert any(int(shown) == int(top) < int(total) for _, shown, total in terminal)
        listed_md = re.findall(r"^\| ([\w-]+) \| [\d.]+ \|", md.read_text(), re.M)
        listed_term = re.findall(r"^  ([\w-]+): [\d.]+", res.stdout, re.M)
        assert listed_term == listed_md and listed_term


def test_a_stub_judged_run_says_so(runs):
    said = "judged by the stub judge"
    assert [ln for ln in runs["judged_stdout"].splitlines() if said in ln] == [
        "judged by the stub judge: these judged scores test plumbing, not answer quality"]
    assert said not in cli(80, "rescore", runs["native"], "--no-progress").stdout


def test_help_shows_flags_as_flags_and_a_value_after_a_flag_is_refused(tmp_path):
    res = cli(80, "run", "--help")
    assert res.returncode == 0
    readable(res.stdout, 80)
    assert "<bool>" not in res.stdout
    assert re.search(r"^  --overwrite\s+Replace the run folder", res.stdout, re.M), res.stdout
    assert re.search(r"^  --k <int>", res.stdout, re.M) and "[tool.ragbridge]" in res.stdout
    assert res.stdout.startswith("Usage: ragbridge run ")
    top = cli(80, "--help").stdout
    readable(top, 80)
    assert "..." not in top.split("Commands:")[1]  # every command's summary whole
    assert "into the same folder." in " ".join(top.split())
    for args, flag in ((("run", EXAMPLE, "--out", tmp_path / "r", "--overwrite", "true"), "--overwrite"),
                       (("diff", "a", "b", "--no-tags", "false"), "--no-tags"),
                       (("judge", "serve", "--stub", "yes"), "--stub")):
        bad = cli(80, *args)
        assert bad.returncode == 2 and bad.stdout == ""
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1, bad.stderr
        assert lines[0].startswith(f"error: {flag} is a flag and takes no value"), bad.stderr
    assert not (tmp_path / "r").exists()


def test_reprs_are_one_short_line(runs):
    from ragbridge.analysis.diff import diff_runs
    from ragbridge.analysis.gate import run_gates

    run = load_run(runs["judged"])
    assert repr(run) == f"Run({str(runs['judged'])!r}, 53 cases, {len(run.scores)} scores, complete)"
    assert str(run) == repr(run)
    d = diff_runs(runs["judged"], runs["moved"], n_resamples=100, n_permutations=100)
    report = run_gates(runs["moved"], runs["gates"], baseline=runs["judged"], resamples=100, permutations=100)
    objects = [run, run.manifest, d, report, report.results[0], *run.cases, *run.scores]
    for obj in objects:
        for text in (repr(obj), str(obj)):
            assert "\n" not in text and len(text) <= 300, text
    case = next(c for c in run.cases if len(c.question) > 60)
    assert repr(case).startswith(f"Case(id={case.id!r}, question=")
    assert f"{len(case.contexts)} contexts" in repr(case)
    assert repr(d).endswith("1 worse, 0 better, 0 changed status)")
    assert "judge='stub (stub)'" in repr(run.manifest)


@pytest.mark.slow
def test_the_per_tag_tables_split_as_measuring_each_whole_table_does(runs, monkeypatch):
    """The per-tag tables are split by each column's width, measured once; at every width the
    tables (or the lines) printed are those that measuring every candidate table whole, with rich's
    own measure, gives."""
    import io

    from rich.console import Console

    from ragbridge.commands import summary
    from ragbridge.commands.output import fits, print_lines

    calls = []
    real = summary._print_by_tag
    monkeypatch.setattr(summary, "_print_by_tag", lambda *a: (calls.append(a), real(*a)))

    def console(width):
        return Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)

    def whole_table_split(con, title, by_tag, metrics):
        parts: list[list[str]] = [[]]
        for m in metrics:
            if parts[-1] and not fits(con, summary._tag_table(None, by_tag, parts[-1] + [m])):
                parts.append([])
            parts[-1].append(m)
        tables = [summary._tag_table(title + (f", {i} of {len(parts)}" if len(parts) > 1 else ""), by_tag, p)
                  for i, p in enumerate(parts, 1)]
        if all(fits(con, t) for t in tables):
            for t in tables:
                con.print(t)
        else:
            print_lines(con, [title] + [
                f"{tag} ({n:,} cases): "
                + ", ".join(f"{m} {summary._cell(means, shares, m)}" for m in metrics)
                for tag, n, means, shares in by_tag])
        return parts

    splits = set()
    for width, run in [(w, r) for r in ("native", "judged") for w in range(24, 220, 5)]:
        got = console(width)
        summary.print_summary(load_run(runs[run]).summary_rows(), got)
        _, title, by_tag, metrics = calls[-1]
        want = console(width)
        splits.add(len(whole_table_split(want, title, by_tag, metrics)))
        printed = got.file.getvalue()
        assert printed.endswith(want.file.getvalue()), (run, width)
    assert {1, 2} <= splits and max(splits) >= 3  # one table, two, and more were all exercised


def _said(stderr: str, label: str) -> list[str]:
    """The ``label:`` messages of stderr, each joined from its wrapped lines (continuations indented)."""
    out: list[str] = []
    going = False
    for line in stderr.splitlines():
        if line.startswith(f"{label}:"):
            out.append(line)
        elif going and line.startswith("    "):
            out[-1] += " " + line.strip()
            continue
        going = line.startswith(f"{label}:")
    return out


def test_warnings_and_notes_are_wrapped_at_80_columns_piped_and_an_error_is_one_line(tmp_path):
    """A note (the format a file was read as) and a warning (repeated chunk ids), piped at 80 columns:
    each is wrapped at spaces with its continuation indented, no line wider than 80, nothing lost
    (the message joined again is the whole message). An error stays one line, whole."""
    import ragbridge

    frame = ragbridge.to_library(CASES[:6], "ragas").to_pandas()  # a RAGAS team's frame, saved by pandas
    frame.to_csv(tmp_path / "ragas.csv", index=False)
    r = cli(80, "run", "ragas.csv", "--out", "run", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    readable(r.stderr, 80)
    [note] = _said(r.stderr, "note")
    assert note == ("note: ragas.csv: read as format 'ragas' (its fields: reference_context_ids); name a "
                    "format to override")
    [warning] = _said(r.stderr, "warning")
    assert "repeated chunk id(s) in 2 case(s)" in warning and warning.endswith("counts at its first rank")
    (tmp_path / "tags.jsonl").write_text(json.dumps({"id": "a", "question": "Can I get a refund?",
                                                     "tags": "billing"}) + "\n")
    bad = cli(80, "run", "tags.jsonl", "--out", "bad", "--no-progress", cwd=tmp_path)
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    assert bad.stderr.splitlines() == [
        "error: tags.jsonl:1: field 'tags': must be a list of texts, got the text "
        "'billing': write it as a list, [\"billing\"] (in a CSV cell, texts are separated by '|')"]


def test_a_long_reason_is_cut_at_the_end_of_a_word():
    """A case block's reason is cut after a word, never inside one, and a reason only a little over
    the limit is shown whole."""
    from ragbridge.commands.analysis import REASON_CHARS, cut_reason

    reason = "0.000: " + "kb/doc-39398.md#s6-3 (not retrieved), " * 4 + "and 1 more"
    cut = cut_reason(reason)
    assert len(cut) <= REASON_CHARS + len(" [...]") and cut.endswith("(not retrieved) [...]"), cut
    assert reason.startswith(cut[:-len(" [...]")])
    assert cut_reason(reason[:REASON_CHARS + 10]) == reason[:REASON_CHARS + 10]
    assert cut_reason("x" * 400) == "x" * REASON_CHARS + " [...]"


def test_a_wrapped_reason_keeps_a_figure_with_its_pass_mark_and_the_lines_come_out_whole():
    """A diagnosis reason wrapped at any width keeps ``0.00 < 0.5`` on one line (a reader of a CI log
    must not find ``< 0.5`` at the start of the next), and a listing of many lines prints each whole,
    in order, nothing lost."""
    import io

    from rich.console import Console

    from ragbridge.commands.output import print_lines

    reason = ("no relevant chunk in the top 10: recall@10 (native) 0.00 < 0.5; "
              "ndcg@10 (native) 0.4996 < 0.5; hit@10 (native) 1.00 >= 0.5")
    for width in range(24, 120):
        con = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
        print_lines(con, [f"  case-1: {reason}"])
        text = con.file.getvalue()
        for figure in ("0.00 < 0.5", "0.4996 < 0.5", "1.00 >= 0.5"):
            assert figure in text, (width, text)
        assert " ".join(text.split()) == " ".join(f"case-1: {reason}".split())
    con = Console(width=80, file=io.StringIO(), color_system=None, force_terminal=False)
    print_lines(con, [f"line {i}" for i in range(5000)])
    assert con.file.getvalue().splitlines() == [f"line {i}" for i in range(5000)]


def test_a_p_value_of_one_and_a_value_rounded_to_zero_print_as_numbers():
    """A p-value of 1 prints as ``1.00`` (three significant digits, as every other), and a negative
    value that rounds to zero prints without its sign (``0.000``, not ``-0.000``)."""
    from ragbridge.report.text import num
    from ragbridge.verdicts import p_text

    assert [p_text(p) for p in (1.0, 0.5, 0.0312, 0.0004)] == ["1.00", "0.5", "0.0312", "<0.001"]
    assert [num(-0.0001), num(-0.0, signed=True), num(-0.5), num(-0.006, 2), num(-0.004, 2, True)] == [
        "0.000", "+0.000", "-0.500", "-0.01", "+0.00"]


def test_a_runs_counts_print_with_thousands_separators(runs):
    """The run's one-line repr, its notebook view and the summary tables (the overall one, its lines
    at a narrow width, the per-tag one) write a count of a large run as the other commands do."""
    import io

    from rich.console import Console

    from ragbridge.commands import summary

    run = load_run(runs["native"])
    run.manifest.dataset["n_cases"] = 1_234_567
    run.manifest.counts["scores"] = 7_654_321
    assert "1,234,567 cases, 7,654,321 scores" in repr(run)
    assert "1,234,567 cases, 7,654,321 scores" in run._repr_html_()
    rows = run.summary_rows()
    for r in rows:
        r.update(n_scored=1_234_567, n_undefined=12_345, n=1_246_912)
    for width in (200, 30):
        con = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
        summary.print_summary(rows, con)
        printed = con.file.getvalue()
        assert "1,234,567" in printed and "12,345" in printed and "1,246,912" in printed, printed
        assert "1234567" not in printed and "12345" not in printed
