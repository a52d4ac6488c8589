"""Synthetic golden sets: ``ragbridge synthesize`` (and ``ragbridge.synthesize``) on the bundled
chunking corpus, judged by the stub judge's generation answers; the three weaknesses measured beside
the real set; review; faults (a corpus that cannot be read, a reply that is not a question, a budget
spent mid-way, a kill); RAGAS' and DeepEval's own generators through the gateway; a real run on the
result and the report's real-beside-synthetic view."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ragbridge
from ragbridge.formats.corpus import place_cases, read_corpus
from ragbridge.lexical import BM25, copied_run, copied_terms, terms
from ragbridge.synthetic.passages import cut_passages
from ragbridge.synthetic.plan import allocate, parse_mix
from ragbridge.synthetic.weaknesses import measure
from ragbridge.stub.responders import JudgeReply, register, responders, unregister
from ragbridge.testing import StubJudge

from conftest import ROOT, needs_backend, ragbridge_cli, stub_judge_config
from test_output import readme_keys

CORPUS = ROOT / "examples" / "chunking" / "corpus"
GOLDEN = ROOT / "examples" / "chunking" / "golden.jsonl"
MIX = "single=0.5,multi=0.2,paraphrased=0.2,unanswerable=0.1"


def _judge_args(stub, cache: Path) -> list[str]:
    return ["--judge-model", "stub-judge", "--judge-base-url", stub.base_url, "--cache-path", str(cache)]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class _Responder:
    """A judge of the test's own for one generation prompt (first line of its system prompt), ahead
    of the registered ones; removed when the test ends."""

    def __init__(self, task_line: str, answer) -> None:
        self.name, self.task_line, self.answer = "test", task_line, answer

    def __call__(self, req):
        if req.system.split("\n", 1)[0] == self.task_line:
            obj = self.answer(req)
            return JudgeReply(json.dumps(obj)) if obj is not None else None
        return None


@pytest.fixture
def own_responder():
    added = []

    def add(task_line, answer):
        responders()  # the plugins' responders first, so this one goes ahead of them
        added.append(register(_Responder(task_line, answer), first=True))

    yield add
    for r in added:
        unregister(r)


def test_a_synthetic_set_has_every_kind_labelled_by_spans_placed_in_the_corpus(stub_judge, tmp_path):
    out = tmp_path / "synth.jsonl"
    result = ragbridge.synthesize(CORPUS, n=20, out=out, mix=MIX, seed=3,
                                  judge=stub_judge_config(stub_judge, cache=tmp_path / "c.sqlite"))
    assert result.status == "complete" and result.stub
    corpus = read_corpus(CORPUS)
    passages = cut_passages(corpus)
    bm25 = BM25([p.text for p in passages])
    cases = ragbridge.load_cases(out)
    assert [c.id for c in cases] == [c.id for c in result.cases]
    planned = allocate(parse_mix(MIX), 20)
    made = {k: sum(1 for c in cases if c.metadata["synthetic"]["kind"] == k) for k in planned}
    assert result.counts["made"] + result.counts["dropped"] == 20 == sum(planned.values())
    assert all(made[k] + sum(1 for d in result.dropped if d["kind"] == k) == planned[k] for k in planned)
    assert all(made[k] > 0 for k in planned)
    for c in cases:
        kind = c.metadata["synthetic"]["kind"]
        assert "synthetic" in c.tags and c.question.endswith("?")
        if kind == "unanswerable":
            assert c.answerable is False and not c.relevant_spans and "unanswerable" in c.tags
            # no passage answers it: no reference answer to score against, what is missing said apart
            assert c.reference is None and not c.reference_contexts and c.metadata["synthetic"]["missing"]
            # checked against every passage of a small corpus, not only the ones it was written near
            assert sorted(c.metadata["synthetic"]["checked_against"]) == sorted(p.key for p in passages)
            continue
        assert c.reference
        assert c.answerable and c.relevant_spans
        for s in c.relevant_spans:  # each quote is the document's own text at its offsets
            assert corpus.texts[s.doc][s.start:s.end] == s.quote  # exactly, white space and all
        docs = [s.doc for s in c.relevant_spans]
        if kind == "multi":
            assert 2 <= len(docs) <= 3 and len(set(docs)) == len(docs) and "multi-hop" in c.tags
        else:
            assert len(docs) == 1
        if kind == "paraphrased":
            passage = c.reference_contexts[0]
            original = c.metadata["synthetic"]["original_question"]
            kept = bm25.weight(copied_terms(c.question, passage))
            assert kept <= 0.5 * bm25.weight(copied_terms(original, passage))
            assert copied_run(c.question, passage) < 3
    # the set is a golden set a run can use: its quotes place against the corpus
    assert len(place_cases(cases, corpus)) == len(cases)


def test_the_weaknesses_are_measured_as_defined():
    corpus = read_corpus(CORPUS)
    passages = cut_passages(corpus)
    text = corpus.texts["refunds.md"]
    quote = "Refunds go back to the card the rental was paid with"
    start = text.index(quote)
    other = "Group bookings of six bikes or more must be made at least 48 hours in advance"
    o_start = corpus.texts["rentals.md"].index(other)
    cases = [
        ragbridge.Case(id="a", question="Do refunds reach my card or cash?",
                       relevant_spans=[{"doc": "refunds.md", "start": start, "end": start + len(quote)}]),
        ragbridge.Case(id="b", question="Rules for groups?",
                       relevant_spans=[{"doc": "refunds.md", "quote": "they can be cancelled free of charge"},
                                       {"doc": "rentals.md", "start": o_start, "end": o_start + len(other)}]),
        ragbridge.Case(id="c", question="Is there a student discount?", answerable=False),
    ]
    m = measure(cases, corpus)
    # a: refund, reach, card, cash -> refund and card are in the quote; b: rule, group -> group only
    assert terms(cases[0].question) == ["refund", "reach", "card", "cash"]
    assert terms(cases[1].question) == ["rule", "group"]
    assert m["copied_terms"] == pytest.approx((2 + 1) / 2)
    assert m["one_passage"] == 0.5 and m["unanswerable"] == pytest.approx(1 / 3)
    assert m["n"] == 3 and m["n_labelled"] == 2
    bm25 = BM25([p.text for p in passages])
    ranks = []
    for case in place_cases(cases[:2], corpus):
        labelled = {i for s in case.relevant_spans for i in passages.covering(s.doc, s.start, s.end)}
        ranks.append(next(r for r, i in enumerate(bm25.ranking(case.question), 1) if i in labelled))
    assert m["bm25_mrr"] == pytest.approx(sum(1 / r for r in ranks) / 2)
    assert m["bm25_top1"] == sum(r == 1 for r in ranks) / 2


def test_the_cli_prints_the_weaknesses_beside_the_real_set(stub_judge, tmp_path):
    out = tmp_path / "synth.jsonl"
    args = ["synthesize", CORPUS, "--n", "30", "--mix", MIX, "--out", out, "--compare-to", GOLDEN,
            *_judge_args(stub_judge, tmp_path / "c.sqlite")]
    r = ragbridge_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == readme_keys()["synthesize"]  # the README's "JSON output" table
    rows = {row["measure"]: row for row in doc["weaknesses"]}
    corpus = read_corpus(CORPUS)
    real = measure(ragbridge.load_cases(GOLDEN), corpus)
    synthetic = measure(ragbridge.load_cases(out), corpus)
    for key, row in rows.items():
        assert row["real"] == pytest.approx(real[key]) and row["synthetic"] == pytest.approx(synthetic[key])
    # the first known weakness: the generated questions copy their passage
    assert rows["copied_terms"]["synthetic"] > rows["copied_terms"]["real"]
    assert rows["bm25_mrr"]["synthetic"] > rows["bm25_mrr"]["real"]
    assert rows["unanswerable"]["real"] == 0 and rows["unanswerable"]["synthetic"] > 0
    # the same side by side on a terminal of 80 columns, nothing cut (the same cache: no new call)
    r = ragbridge_cli(*args, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout and all(len(line) <= 80 for line in r.stdout.splitlines())
    assert "real" in r.stdout and "synthetic" in r.stdout and "passage terms the question repeats" in r.stdout


def test_a_quote_that_is_not_in_the_passage_is_dropped_and_counted(stub_judge, tmp_path, own_responder):
    from ragbridge.synthetic.prompts import TASKS

    own_responder(TASKS["single"], lambda req: {"question": "What do the refund rules say?",
                                                 "answer": "Refunds take two weeks.",
                                                 "quote": "Refunds are paid back within two weeks."})
    result = ragbridge.synthesize(CORPUS, n=4, out=tmp_path / "s.jsonl", mix="single=1,multi=1",
                                  judge=stub_judge_config(stub_judge))
    assert result.status == "complete"
    assert result.counts["dropped_by_reason"] == {"unplaced": 2}
    assert {c.metadata["synthetic"]["kind"] for c in result.cases} == {"multi"}
    assert len(_lines(tmp_path / "s.jsonl")) == 2


def test_an_unanswerable_question_the_corpus_answers_is_dropped(stub_judge, tmp_path, own_responder):
    from ragbridge.synthetic.prompts import TASKS

    # "unanswerable", but a passage says it word for word: the BM25 retrieval and the check find it
    own_responder(TASKS["unanswerable"], lambda req: {
        "question": "Are refunds paid back to the card the rental was paid with?", "missing": "nothing"})
    result = ragbridge.synthesize(CORPUS, n=3, out=tmp_path / "s.jsonl", mix="unanswerable=1",
                                  judge=stub_judge_config(stub_judge))
    assert result.counts["dropped_by_reason"] == {"answered": 3} and result.counts["made"] == 0
    assert not (tmp_path / "s.jsonl").read_text()
    checks = [p for p in stub_judge.posts("/chat/completions")
              if p.body["messages"][0]["content"].startswith(TASKS["answered"])]
    assert checks and "refunds.md" in checks[0].body["messages"][1]["content"]


def test_a_reply_that_is_not_a_question_fails_cleanly_and_can_be_dropped(stub_judge, tmp_path, own_responder):
    from ragbridge.synthetic.prompts import TASKS

    own_responder(TASKS["single"], lambda req: {"question": "Refunds take fourteen days.", "answer": "x",
                                                 "quote": "y"})
    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "6", "--mix", "single=1,multi=1", "--out", out,
            *_judge_args(stub_judge, tmp_path / "c.sqlite")]
    r = ragbridge_cli(*args)
    assert r.returncode == 3, r.stderr
    assert "must be a question ending with a question mark" in r.stderr
    assert "Refunds take fourteen days." in r.stderr and "--drop-failed" in r.stderr
    assert not out.exists()  # nothing half written
    kept = _lines(tmp_path / "s.work" / "items.jsonl")
    assert {i["kind"] for i in kept} == {"multi"} and len(kept) == 3
    asked = len(stub_judge.posts("/chat/completions"))
    r = ragbridge_cli(*args, "--drop-failed")
    assert r.returncode == 0, r.stderr
    assert len(_lines(out)) == 3 and "dropped: the judge's reply was unusable 3" in r.stdout
    # the multi questions were not asked again; each failed single was asked again (3 attempts)
    assert len(stub_judge.posts("/chat/completions")) - asked == 3 * 3


@pytest.mark.parametrize("corpus,mix,message", [
    ("missing", None, "no such file or folder"),
    ("empty", None, "holds no document"),
    ("latin1.md", None, "is not UTF-8 text"),
    ("chunking", "single=1,often=2", "unknown kind 'often'"),
    ("chunking", "single=x", "the weight of single must be a number"),
    ("refunds", "multi=1", "need passages of two or more documents"),
])
def test_bad_input_is_an_error_and_nothing_is_written(stub_judge, tmp_path, corpus, mix, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "latin1.md").write_bytes("Caf\xe9 rules.\n".encode("latin-1"))
    path = {"chunking": CORPUS, "refunds": CORPUS / "refunds.md"}.get(corpus, tmp_path / corpus)
    out = tmp_path / "runs" / "s.jsonl"
    r = ragbridge_cli("synthesize", path, "--out", out, *(["--mix", mix] if mix else []),
                      *_judge_args(stub_judge, tmp_path / "c.sqlite"))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists() and not stub_judge.posts("/chat/completions")


def test_a_judge_that_cannot_answer_is_refused_before_anything_is_written(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = ragbridge_cli("synthesize", CORPUS, "--out", tmp_path / "runs" / "s.jsonl", "--judge-model", "m",
                      "--judge-base-url", f"http://127.0.0.1:{port}/v1",
                      "--cache-path", tmp_path / "c.sqlite")
    assert r.returncode == 2 and "unreachable" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_real_set_whose_quotes_are_not_in_the_corpus_is_refused_before_any_call(stub_judge, tmp_path):
    real = tmp_path / "real.jsonl"
    ragbridge.write_cases([ragbridge.Case(id="r1", question="Can I pay in cash?", relevant_spans=[
        {"doc": "refunds.md", "quote": "Cash is accepted at every shop."}])], real)
    r = ragbridge_cli("synthesize", CORPUS, "--out", tmp_path / "runs" / "s.jsonl", "--compare-to", real,
                      *_judge_args(stub_judge, tmp_path / "c.sqlite"))
    assert r.returncode == 2 and "real.jsonl (case 1): field 'relevant_spans[0]'" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists() and not stub_judge.posts()


def test_a_budget_spent_mid_way_stops_cleanly_and_the_same_command_goes_on(stub_judge, tmp_path):
    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "16", "--mix", MIX, "--out", out,
            *_judge_args(stub_judge, tmp_path / "c.sqlite")]
    r = ragbridge_cli(*args, "--max-calls", "7")
    assert r.returncode == 4, r.stderr
    assert "judge budget spent" in r.stderr and not out.exists()
    assert (tmp_path / "s.work" / "judge-calls.log").read_text().count("c\n") == 7
    r = ragbridge_cli(*args, "--max-calls", "7")  # the budget holds over both sessions
    assert r.returncode == 4 and (tmp_path / "s.work" / "judge-calls.log").read_text().count("c\n") == 7
    r = ragbridge_cli(*args, "--max-calls", "100")
    assert r.returncode == 0, r.stderr
    # the same set, for the same calls, as one session without a budget
    whole = tmp_path / "whole.jsonl"
    r = ragbridge_cli("synthesize", CORPUS, "--n", "16", "--mix", MIX, "--out", whole,
                      *_judge_args(stub_judge, tmp_path / "c2.sqlite"))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == whole.read_bytes()
    calls = [(tmp_path / f"{n}.work" / "judge-calls.log").read_text().count("c\n") for n in ("s", "whole")]
    assert calls[0] == calls[1]


def test_a_dry_run_writes_nothing_and_counts_the_calls_a_run_makes(stub_judge, tmp_path):
    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "12", "--mix", MIX, "--out", out,
            *_judge_args(stub_judge, tmp_path / "c.sqlite"), "--json"]
    r = ragbridge_cli(*args, "--dry-run")
    assert r.returncode == 0, r.stderr
    planned = json.loads(r.stdout)
    assert planned["status"] == "dry-run" and planned["written"] == {}
    assert all(row["synthetic"] is None for row in planned["weaknesses"])  # the stub's, not measured
    shown = repr(ragbridge.synthesize(CORPUS, n=12, mix=MIX, out=out, dry_run=True,
                                      judge=stub_judge_config(stub_judge, cache=tmp_path / "c.sqlite")))
    calls = planned["judge"]["calls"]
    assert shown == (f"Synthesis(dry-run: 12 questions planned by ragbridge; about {calls} judge call(s) to "
                     "make, nothing called or written)")
    assert not out.exists() and not (tmp_path / "s.work").exists() and not stub_judge.posts()
    r = ragbridge_cli(*args)
    done = json.loads(r.stdout)
    assert planned["judge"]["calls"] == done["judge"]["calls"] == len(stub_judge.posts("/chat/completions"))
    assert planned["counts"] == done["counts"]
    r = ragbridge_cli(*args, "--dry-run")  # now everything is made: nothing left to spend
    assert json.loads(r.stdout)["judge"] == {}


def test_a_work_folder_of_other_settings_is_refused(stub_judge, tmp_path):
    out = tmp_path / "s.jsonl"
    judge = _judge_args(stub_judge, tmp_path / "c.sqlite")
    assert ragbridge_cli("synthesize", CORPUS, "--n", "4", "--out", out, *judge).returncode == 0
    r = ragbridge_cli("synthesize", CORPUS, "--n", "5", "--out", out, *judge)
    assert r.returncode == 2 and "other settings (n: 4, now 5)" in r.stderr and "--overwrite" in r.stderr
    assert len(_lines(out)) <= 4
    r = ragbridge_cli("synthesize", CORPUS, "--n", "5", "--out", out, "--overwrite", *judge)
    assert r.returncode == 0 and len(_lines(out)) <= 5
    assert len(_lines(tmp_path / "s.work" / "items.jsonl")) == 5


def test_review_drops_questions_with_why_before_they_enter_the_set(stub_judge, tmp_path):
    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "6", "--mix", "single=1", "--out", out, "--review",
            *_judge_args(stub_judge, tmp_path / "c.sqlite")]
    r = ragbridge_cli(*args)
    assert r.returncode == 0, r.stderr
    review = tmp_path / "s.review.csv"
    assert review.exists() and not out.exists()
    rows = list(csv.reader(review.open(encoding="utf-8")))
    assert rows[0] == ["id", "kind", "question", "answer", "passages", "decision", "why", "copies"]
    assert len(rows) == 7
    for row in rows[1:]:  # what of its passage each question copies, for the reviewer to see
        assert row[7] and row[7].split(", ") == copied_terms(row[2], row[4])
    rows[2][5] = "drop"
    csv.writer(review.open("w", encoding="utf-8", newline="")).writerows(rows)
    r = ragbridge_cli(*args)  # a drop without a reason is refused: nothing written
    assert r.returncode == 2 and "s.review.csv:3: field 'why'" in r.stderr and not out.exists()
    rows[2][6] = "copies the passage word for word"
    csv.writer(review.open("w", encoding="utf-8", newline="")).writerows(rows)
    calls = len(stub_judge.posts())
    r = ragbridge_cli(*args)
    assert r.returncode == 0, r.stderr
    assert len(stub_judge.posts()) == calls  # the questions were made already: no judge call
    kept = [c["id"] for c in _lines(out)]
    assert rows[2][0] not in kept and len(kept) == 5
    (dropped,) = _lines(tmp_path / "s.dropped.jsonl")
    assert dropped["id"] == rows[2][0]
    assert dropped["metadata"]["review"] == {"dropped": True, "why": "copies the passage word for word"}


@pytest.mark.slow  # a generation killed with SIGKILL, then resumed: about 15 s
def test_a_generation_killed_with_sigkill_resumes_without_making_anything_twice(tmp_path):

    with StubJudge(latency=0.3) as slow, StubJudge() as fast:
        out = tmp_path / "s.jsonl"
        cmd = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "synthesize",
               str(CORPUS), "--n", "24", "--mix", MIX, "--out", str(out), "--max-concurrency", "2",
               *_judge_args(slow, tmp_path / "c.sqlite")]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        items = tmp_path / "s.work" / "items.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not items.exists() or items.read_text().count("\n") < 6):
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        settled = items.read_text().count("\n")
        assert 6 <= settled < 24 and not out.exists()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        slots = [i["slot"] for i in _lines(items)]
        assert len(slots) == len(set(slots)) == 24  # nothing made twice
        whole = tmp_path / "whole.jsonl"
        r = ragbridge_cli("synthesize", CORPUS, "--n", "24", "--mix", MIX, "--out", whole,
                          *_judge_args(fast, tmp_path / "c2.sqlite"))
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == whole.read_bytes()


def test_the_combined_set_runs_with_the_corpus_and_the_report_sets_real_beside_synthetic(stub_judge,
                                                                                         tmp_path):
    from ragbridge.report.data import report_data
    from ragbridge.report.markdown import render_markdown

    both = tmp_path / "both.jsonl"
    result = ragbridge.synthesize(CORPUS, n=20, out=tmp_path / "s.jsonl", mix=MIX, compare_to=GOLDEN,
                                  combined=both, judge=stub_judge_config(stub_judge))
    cases = ragbridge.load_cases(both)
    real = ragbridge.load_cases(GOLDEN)
    assert [c.id for c in cases[:len(real)]] == [c.id for c in real]
    assert all("real" in c.tags for c in cases[:len(real)]) and len(cases) == len(real) + len(result.cases)
    # a retriever: BM25 over the heading chunks (what examples/chunking/retrieve.py does)
    corpus = read_corpus(CORPUS)
    chunks = [p for p in cut_passages(corpus)]
    bm25 = BM25([p.text for p in chunks])
    retrieved = []
    for c in cases:
        top = bm25.ranking(c.question)[:5]
        record = c.model_dump(exclude_defaults=True)
        record["contexts"] = [{"id": chunks[i].key, "text": chunks[i].text, "doc": chunks[i].doc}
                              for i in top]
        retrieved.append(ragbridge.Case.model_validate(record))
    run = ragbridge.evaluate(retrieved, metrics=["recall@5", "mrr"], corpus=CORPUS, out=tmp_path / "run")
    data = report_data(run)
    sides = data["real_vs_synthetic"]
    by_tag = data["summary_by_tag"]
    for row in sides["rows"]:
        means = {t: next(r["mean"] for r in by_tag[t] if r["metric"] == row["metric"])
                 for t in ("real", "synthetic")}
        assert row["real"]["mean"] == means["real"] and row["synthetic"]["mean"] == means["synthetic"]
        assert row["difference"] == pytest.approx(means["synthetic"] - means["real"])
    q = sides["questions"]
    assert q["real"]["n"] == len(real) and q["synthetic"]["n"] == len(result.cases)
    assert q["synthetic"]["unanswerable"] == sum(not c.answerable for c in result.cases) / len(result.cases)
    assert q["synthetic"]["term_overlap"] > q["real"]["term_overlap"]
    md = render_markdown(run)
    assert md.index("## Real and synthetic questions") < md.index("## Retrieval")
    # without both tags there is no such view
    only = ragbridge.evaluate(retrieved[len(real):], metrics=["recall@5"], corpus=CORPUS)
    assert report_data(only)["real_vs_synthetic"] is None


@pytest.mark.slow  # the CLI end to end, as docs/synthetic.md runs it: about 20 s
def test_a_real_run_on_the_synthetic_set_and_the_html_report_shows_both_first(stub_judge, tmp_path):
    both = tmp_path / "both.jsonl"
    r = ragbridge_cli("synthesize", CORPUS, "--n", "20", "--out", tmp_path / "s.jsonl", "--compare-to",
                      GOLDEN, "--combined", both, *_judge_args(stub_judge, tmp_path / "c.sqlite"))
    assert r.returncode == 0, r.stderr
    chunks = tmp_path / "chunks.jsonl"
    for script, args in (("chunk.py", [CORPUS, "--by", "heading", "--out", chunks]),
                         ("retrieve.py", [both, chunks, "--k", "5", "--out", tmp_path / "bm25.jsonl"])):
        subprocess.run([sys.executable, str(ROOT / "examples" / "chunking" / script), *map(str, args)],
                       check=True, capture_output=True)
    r = ragbridge_cli("run", tmp_path / "bm25.jsonl", "--corpus", CORPUS, "--out", tmp_path / "run",
                      "--k", "5", "--no-progress", "-m", "recall@5", "-m", "mrr")
    assert r.returncode == 0, r.stderr
    assert ragbridge_cli("report", tmp_path / "run", "--out", tmp_path / "report.html").returncode == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'href="#sides"' in page and page.index('id="sides"') < page.index('id="grid"')


def test_an_unknown_generator_or_a_kind_it_does_not_make_is_an_error(stub_judge, tmp_path):
    judge = _judge_args(stub_judge, tmp_path / "c.sqlite")
    r = ragbridge_cli("synthesize", CORPUS, "--out", tmp_path / "s.jsonl", "--generator", "nope", *judge)
    assert r.returncode == 2 and "no generator named 'nope'; the generators are ragbridge" in r.stderr
    from ragbridge.plugins import registered

    for name, gen in registered("ragbridge_register_generators", "generator").items():
        assert set(gen.kinds) < {"single", "multi", "paraphrased", "unanswerable"}
        if gen.available():
            r = ragbridge_cli("synthesize", CORPUS, "--out", tmp_path / "s.jsonl", "--generator", name,
                              "--mix", "single=1,unanswerable=1", *judge)
            assert r.returncode == 2 and f"this generator makes {', '.join(gen.kinds)}" in r.stderr


def test_library_items_whose_contexts_are_not_in_the_corpus_are_dropped_and_counted():
    from ragbridge.synthetic.delegate import GeneratedItem, cases_from_items

    corpus = read_corpus(CORPUS)
    passages = cut_passages(corpus)
    items = [GeneratedItem("What is a full cover?", "3 euros a day.", [passages[2].text]),
             GeneratedItem("What about refunds?", "In 14 days.",
                           [passages[2].text, "A passage of no document."], kind="multi"),
             GeneratedItem("What about theft?", None, ["Report the theft to the police  within\n24 hours"])]
    made, dropped = cases_from_items(items, corpus, passages, "lib", "m")
    assert [d["detail"] for d in dropped] == ["reference context(s) 2 of 2 are not in the corpus"]
    first, third = (ragbridge.Case.model_validate(m["case"]) for m in made)
    placed = first.relevant_spans[0]
    assert (placed.start, placed.end) == (passages[2].start, passages[2].end)
    s = third.relevant_spans[0]  # located with white space collapsed
    quoted = "Report the theft to the police within 24 hours"
    assert corpus.texts[s.doc][s.start:s.end].split() == quoted.split()


def _library_generation(stub, tmp_path, generator: str, n: int = 8):
    out = tmp_path / f"{generator}.jsonl"
    r = ragbridge_cli("synthesize", CORPUS, "--generator", generator, "--n", n, "--mix",
                      "single=0.7,multi=0.3", "--out", out, "--compare-to", GOLDEN,
                      *_judge_args(stub, tmp_path / "c.sqlite"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    corpus = read_corpus(CORPUS)
    cases = ragbridge.load_cases(out)
    assert cases and doc["counts"]["made"] == len(cases)
    for c in cases:
        assert c.metadata["synthetic"]["generator"] == generator and c.metadata["synthetic"]["library"]
        for s, ctx in zip(c.relevant_spans, c.reference_contexts):  # each context placed where it is
            assert corpus.texts[s.doc][s.start:s.end] == ctx
    # every call went through the gateway: one audit line per request, the stub answering those the
    # cache did not (a library may ask the same twice: two questions of the same passages)
    audit = _lines(tmp_path / f"{generator}.work" / "judge-audit.jsonl")
    upstream = [a for a in audit if not a["cache_hit"]]
    assert len(upstream) == len(stub.posts()) == doc["judge"]["calls"]
    assert len(audit) - len(upstream) == doc["judge"]["cache_hits"]
    assert {a["backend"] for a in audit} == {"synthetic"}
    # the set in the library's own dataset object, and back: the questions, answers and contexts hold
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the library's object cannot hold (tags) is named
        back = ragbridge.load_cases(ragbridge.to_library(cases, generator))
    assert [(c.question, c.reference, c.reference_contexts) for c in back] == [
        (c.question, c.reference, c.reference_contexts) for c in cases]
    return doc, cases, stub.posts()


@pytest.mark.slow  # RAGAS' whole test-set pipeline against the stub: about 15 s
@needs_backend("ragas")
def test_ragas_testset_generator_runs_through_the_gateway_with_offline_embeddings(stub_judge, tmp_path):
    doc, cases, posts = _library_generation(stub_judge, tmp_path, "ragas")
    # RAGAS' embeddings went to the judge endpoint's /embeddings: the stub's, through the gateway
    assert any(p.path.endswith("/embeddings") for p in posts)
    assert {c.metadata["synthetic"]["library"]["synthesizer"] for c in cases} <= {
        "single_hop_specific_query_synthesizer", "multi_hop_specific_query_synthesizer"}
    rows = {r["measure"]: r for r in doc["weaknesses"]}
    assert rows["copied_terms"]["synthetic"] > rows["copied_terms"]["real"]


@pytest.mark.slow  # DeepEval's synthesizer against the stub: about 15 s
@needs_backend("deepeval")
def test_deepeval_synthesizer_runs_through_the_gateway(stub_judge, tmp_path):
    doc, cases, posts = _library_generation(stub_judge, tmp_path, "deepeval")
    assert all("evolutions" in c.metadata["synthetic"]["library"] for c in cases)
    assert any(len(c.relevant_spans) > 1 for c in cases)  # multi-passage contexts, each labelled
    assert not any(math.isnan(r["synthetic"]) for r in doc["weaknesses"] if r["synthetic"] is not None)


@pytest.mark.slow  # DeepEval's synthesizer twice: about 15 s
@needs_backend("deepeval")
def test_a_library_generator_stopped_by_the_budget_goes_on_from_the_judge_cache(tmp_path):
    out = tmp_path / "s.jsonl"
    # a judge slow enough that the library has calls in flight when the budget refuses one
    with StubJudge(latency=0.3) as judge:
        args = ["synthesize", CORPUS, "--generator", "deepeval", "--n", "6", "--out", out,
                *_judge_args(judge, tmp_path / "c.sqlite"), "--json"]
        r = ragbridge_cli(*args, "--max-calls", "10")
        assert r.returncode == 4, r.stderr
        assert "kept in the judge cache" in r.stderr and not out.exists()
        first = json.loads(r.stdout)["judge"]
        # every call sent is in the summary, those the library left in flight when it stopped too
        assert first["calls"] == 10 and first["refused"] > 0
        r = ragbridge_cli(*args, "--max-calls", "100")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    # every call the first session paid for (those in flight when it stopped too) is answered by the
    # cache; the budget counts both sessions
    assert again["judge"]["cache_hits"] >= first["calls"] and again["judge"]["calls"] <= 90
    assert len(_lines(out)) == again["counts"]["made"] > 0


def _passage_of(req) -> str:
    from ragbridge.synthetic.stub import _passages

    return _passages(req.user)[0]


def test_a_rewording_that_only_adds_words_to_the_question_is_dropped(stub_judge, tmp_path, own_responder):
    from ragbridge.synthetic.prompts import TASKS

    # the question with a greeting in front: fewer of its words are the passage's, none of the passage's
    # words it copied is gone
    def padded(req):
        original = req.user.split("### Question", 1)[1].strip().splitlines()[0]
        return {"question": "Hello there, one quick and friendly question from a customer: " + original}

    own_responder(TASKS["reword"], padded)
    result = ragbridge.synthesize(CORPUS, n=2, out=tmp_path / "s.jsonl", mix="paraphrased=1",
                                  judge=stub_judge_config(stub_judge))
    assert result.counts["made"] == 0 and result.counts["dropped_by_reason"] == {"not_reworded": 2}
    assert all("keeps 100% of the passage's wording" in d["detail"] for d in result.dropped)


@pytest.mark.parametrize("cut,reason", [
    (lambda s: s[1:-2], "unplaced"),  # a quote that starts and ends inside the passage's words
    (lambda s: " ".join(s.split()[:2]), "short_quote"),  # two words label no answer
])
def test_a_quote_is_whole_words_of_the_passage_and_labels_an_answer(stub_judge, tmp_path, own_responder,
                                                                    cut, reason):
    from ragbridge.synthetic.prompts import TASKS
    from ragbridge.synthetic.stub import _sentences

    own_responder(TASKS["single"], lambda req: {
        "question": "What does the passage say?", "answer": "What it says.",
        "quote": cut(_sentences(_passage_of(req))[0])})
    result = ragbridge.synthesize(CORPUS, n=2, out=tmp_path / "s.jsonl", mix="single=1",
                                  judge=stub_judge_config(stub_judge))
    assert result.counts["made"] == 0 and result.counts["dropped_by_reason"] == {reason: 2}


def test_multi_passage_questions_are_written_only_from_related_passages(stub_judge, tmp_path):
    from ragbridge.synthetic.prompts import TASKS

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "bikes.md").write_text(
        "# Bike rental\n\nA bike rented for a day must be returned before the shop closes at six in the "
        "evening. Late returns are charged a second day.\n", encoding="utf-8")
    (corpus / "pasta.md").write_text(
        "# Cooking pasta\n\nBoil the water with a spoonful of salt before the pasta goes in, and stir it "
        "in the first minute so that nothing sticks together.\n", encoding="utf-8")
    result = ragbridge.synthesize(corpus, n=4, out=tmp_path / "s.jsonl", mix="single=1,multi=1",
                                  judge=stub_judge_config(stub_judge))
    assert result.status == "complete"
    assert result.counts["dropped_by_reason"] == {"unrelated": 2}
    assert {c.metadata["synthetic"]["kind"] for c in result.cases} == {"single"}
    asked = [p.body["messages"][0]["content"] for p in stub_judge.posts("/chat/completions")]
    assert not any(m.startswith(TASKS["multi"]) for m in asked)  # dropped without a judge call


def test_library_questions_that_are_lists_or_copies_of_their_context_are_dropped():
    from ragbridge.synthetic.delegate import GeneratedItem, cases_from_items

    corpus = read_corpus(CORPUS)
    passages = cut_passages(corpus)
    ctx = passages[2].text
    copied = " ".join(ctx.split()[:12])
    items = [GeneratedItem(str([ctx[:60]]), "x", [ctx]),  # a list written out, as DeepEval may
             GeneratedItem(copied, "x", [ctx]),
             GeneratedItem("What does full cover cost a day?", "3 euros.", [ctx])]
    made, dropped = cases_from_items(items, corpus, passages, "lib", "m")
    assert [d["reason"] for d in dropped] == ["not_a_question", "not_a_question"]
    assert "a list written out" in dropped[0]["detail"] and "copy of its context" in dropped[1]["detail"]
    assert [m["question"] for m in made] == ["What does full cover cost a day?"]


def test_a_corpus_file_with_a_byte_order_mark_gives_spans_without_it(stub_judge, tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    text = (CORPUS / "refunds.md").read_text(encoding="utf-8")
    (corpus / "refunds.md").write_text(text, encoding="utf-8-sig")  # as Windows editors save it
    out = tmp_path / "s.jsonl"
    result = ragbridge.synthesize(corpus, n=3, out=out, mix="single=1", judge=stub_judge_config(stub_judge))
    assert result.status == "complete" and result.counts["made"] == 3
    assert "\ufeff" not in out.read_text(encoding="utf-8")
    docs = read_corpus(corpus)
    for c in place_cases(ragbridge.load_cases(out), docs):  # the offsets are the file's, as a run reads it
        s = c.relevant_spans[0]
        assert docs.texts[s.doc][s.start:s.end].split() == s.quote.split()


def test_a_large_corpus_checks_unanswerable_questions_by_bm25_and_the_judges_embeddings(
        stub_judge, tmp_path, monkeypatch):
    from ragbridge.synthetic import generate

    monkeypatch.setattr(generate, "WHOLE_CORPUS", 3)
    monkeypatch.setattr(generate, "CHECK_TOP", 2)
    result = ragbridge.synthesize(CORPUS, n=2, out=tmp_path / "s.jsonl", mix="unanswerable=1",
                                  judge=stub_judge_config(stub_judge, embedding_model="stub-embedder"))
    assert result.status == "complete"
    embedded = stub_judge.posts("/embeddings")
    assert embedded and all(p.body["model"] == "stub-embedder" for p in embedded)
    for c in result.cases:  # BM25's two first, then the embeddings' nearest that BM25 did not give
        assert 2 < len(c.metadata["synthetic"]["checked_against"]) <= 4


@pytest.mark.parametrize("flag,named", [("--out", "--out"), ("--combined", "--combined"),
                                        ("--cache-path", "the judge cache (--cache-path)")])
def test_an_output_that_cannot_be_written_is_refused_before_the_judge_is_called(stub_judge, tmp_path, flag,
                                                                                named):
    (tmp_path / "notes.txt").write_text("a file, not a folder\n", encoding="utf-8")
    bad = tmp_path / "notes.txt" / "synth.jsonl"
    out = bad if flag == "--out" else tmp_path / "s.jsonl"
    judge = _judge_args(stub_judge, bad if flag == "--cache-path" else tmp_path / "c.sqlite")
    extra = ["--compare-to", GOLDEN, "--combined", bad] if flag == "--combined" else []
    r = ragbridge_cli("synthesize", CORPUS, "--n", "4", "--out", out, *extra, *judge)
    assert r.returncode == 2, r.stderr
    assert f"{named} {bad} cannot be written" in " ".join(r.stderr.split())
    assert "is a file, not a folder" in r.stderr
    assert stub_judge.posts() == []  # the judge not called, not even to check it
    assert not (tmp_path / "s.work").exists() and not (tmp_path / "s.jsonl").exists()


def _closed_reader(stub, tmp_path, generator: str) -> tuple[int, Path]:
    """A generation whose stdout and stderr reader goes away at once (``| head``, a log pipe closed):
    its exit status (None: still running after a minute) and its output path."""
    out = tmp_path / "s.jsonl"
    p = subprocess.Popen([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                          "synthesize", str(CORPUS), "--generator", generator, "--n", "4",
                          "--mix", "single=1",
                          "--out", str(out), *map(str, _judge_args(stub, tmp_path / "c.sqlite")),
                          "--embedding-model", "stub-embedder"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    p.stderr.close()
    try:
        return p.wait(timeout=60), out
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None, out


def test_a_generation_whose_output_pipe_is_closed_still_writes_its_set(stub_judge, tmp_path):
    status, out = _closed_reader(stub_judge, tmp_path, "ragbridge")
    assert status == 0 and len(_lines(out)) == 4


@pytest.mark.slow  # RAGAS' test-set pipeline: about 10 s
@needs_backend("ragas")
def test_the_ragas_generator_does_not_hang_when_its_output_pipe_is_closed(stub_judge, tmp_path):
    status, out = _closed_reader(stub_judge, tmp_path, "ragas")  # its progress bars used to deadlock
    assert status == 0 and out.exists()


@pytest.mark.slow  # docs/synthetic.md's first commands, as a reader runs them: about 20 s
def test_the_figures_of_the_synthetic_page_are_what_its_commands_print(stub_judge, tmp_path):
    import re

    from test_docs import DOC_JUDGE_URL, DOCS, _shims, bash_blocks

    page = (DOCS / "synthetic.md").read_text(encoding="utf-8")
    texts = re.findall(r"^```text\n(.*?)^```", page, re.M | re.S)
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    _shims(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "80"}
    printed = []
    for block in bash_blocks(DOCS / "synthetic.md")[:3]:
        script = block.replace(DOC_JUDGE_URL, stub_judge.base_url)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        printed.append([line.rstrip() for line in r.stdout.splitlines()])
    for shown, out in zip(texts[:2], printed):  # the output the page shows, line for line
        for line in shown.splitlines():
            assert line == "..." or line.rstrip() in out, line
    report = (work / "runs" / "both-report.md").read_text(encoding="utf-8").splitlines()
    rows = [line for line in page.splitlines()
            if line.startswith(("| native |", "| cases |", "| share ", "| term overlap"))]
    assert len(rows) == 8 and all(line in report for line in rows)


def test_a_dry_run_prints_the_plan_and_the_calls_not_the_stubs_questions(tmp_path):
    out = tmp_path / "s.jsonl"
    # a judge that is not the stub (nothing listens there: a dry run calls nothing)
    r = ragbridge_cli("synthesize", CORPUS, "--n", "12", "--mix", MIX, "--out", out, "--dry-run",
                      "--judge-model", "gpt-4o-mini", "--judge-base-url", "http://127.0.0.1:9/v1",
                      "--cache-path", tmp_path / "c.sqlite", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert text.startswith("dry run: 12 questions planned by ragbridge (single 6, multi 3, paraphrased 2, "
                           "unanswerable 1); nothing was called or written")
    assert "the generation would make about" in text and "an estimate" in text
    # what the stub judge simulated is no prediction of what the judge will write
    for said in ("written by the stub judge", "dropped", "would be made", "passage ranked first by BM25"):
        assert said not in text
    assert not out.exists() and not (tmp_path / "s.work").exists()


def test_the_weaknesses_after_review_are_those_of_the_questions_kept(stub_judge, tmp_path):
    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "6", "--mix", "single=1", "--out", out, "--review", "--json",
            *_judge_args(stub_judge, tmp_path / "c.sqlite")]
    assert ragbridge_cli(*args).returncode == 0
    review = tmp_path / "s.review.csv"
    rows = list(csv.reader(review.open(encoding="utf-8")))
    for row in rows[2:]:
        row[5:7] = ["drop", "unnatural"]
    csv.writer(review.open("w", encoding="utf-8", newline="")).writerows(rows)
    r = ragbridge_cli(*args)
    assert r.returncode == 0, r.stderr
    shown = {row["measure"]: row["synthetic"] for row in json.loads(r.stdout)["weaknesses"]}
    corpus = read_corpus(CORPUS)
    kept = measure(ragbridge.load_cases(out), corpus)
    everything = measure([*ragbridge.load_cases(out), *ragbridge.load_cases(tmp_path / "s.dropped.jsonl")],
                         corpus)
    assert kept["n"] == 1 and kept["copied_terms"] != everything["copied_terms"]
    assert all(shown[k] == pytest.approx(kept[k]) for k in shown)


@pytest.mark.slow  # DeepEval's synthesizer against the stub: about 10 s
@needs_backend("deepeval")
def test_deepeval_questions_that_are_its_context_written_out_are_dropped(stub_judge, tmp_path):
    from ragbridge_deepeval.generator_stub import TEMPLATES, _after

    def echo(req):  # a model that answers with the context list it was given, as DeepEval shows it
        if req.user.strip().startswith(TEMPLATES["inputs"]):
            return JudgeReply(json.dumps({"data": [{"input": _after(req.user, "Context:", "JSON:")}]}),
                              tool_name=req.tool_name)
        return None

    echo.name = "test"
    responders()
    added = register(echo, first=True)
    try:
        out = tmp_path / "s.jsonl"
        r = ragbridge_cli("synthesize", CORPUS, "--generator", "deepeval", "--n", "3", "--mix", "single=1",
                          "--out", out, *_judge_args(stub_judge, tmp_path / "c.sqlite"), "--json")
    finally:
        unregister(added)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["counts"]["made"] == 0 and doc["counts"]["dropped_by_reason"] == {"not_a_question": 3}
    assert all("a list written out" in d["detail"] for d in doc["dropped"])
    assert _lines(out) == []


def test_edits_made_in_review_are_kept_and_what_was_made_from_is_not_changed(stub_judge, tmp_path):
    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "4", "--mix", "single=1", "--out", out, "--review",
            *_judge_args(stub_judge, tmp_path / "c.sqlite")]
    assert ragbridge_cli(*args).returncode == 0
    review = tmp_path / "s.review.csv"
    import pandas as pd  # the reviewer's spreadsheet: read, edited, saved

    sheet = pd.read_csv(review, keep_default_na=False)
    generated = sheet.loc[1, "question"]
    sheet.loc[1, "question"] = "How long does a refund take to reach me?"
    sheet.loc[1, "answer"] = "About two weeks."
    made_from = sheet.loc[2, "passages"]
    sheet.loc[2, "passages"] = "something else"
    sheet.to_csv(review, index=False)
    r = ragbridge_cli(*args)  # the labelled passages are what the question was made from
    assert r.returncode == 2 and "s.review.csv:4: field 'passages'" in r.stderr and not out.exists()
    sheet.loc[2, "passages"] = made_from
    sheet.to_csv(review, index=False)
    r = ragbridge_cli(*args)
    assert r.returncode == 0, r.stderr
    assert "review: 0 dropped, 1 edited" in r.stdout
    cases = {c.id: c for c in ragbridge.load_cases(out)}
    edited = cases[sheet.loc[1, "id"]]
    assert edited.question == "How long does a refund take to reach me?"
    assert edited.reference == "About two weeks."
    assert edited.metadata["review"]["edited"]["question"] == generated
    assert edited.relevant_spans  # still labelled where it was made from
    assert all("review" not in c.metadata for i, c in cases.items() if i != edited.id)


def test_the_stub_judge_started_again_on_another_port_goes_on_with_the_same_work_folder(stub_judge, tmp_path):

    out = tmp_path / "s.jsonl"
    args = ["synthesize", CORPUS, "--n", "6", "--mix", "single=1", "--out", out, "--json"]
    r = ragbridge_cli(*args, *_judge_args(stub_judge, tmp_path / "c.sqlite"), "--max-calls", "3")
    assert r.returncode == 4, r.stderr
    first = json.loads(r.stdout)["counts"]["made"]
    with StubJudge() as again:  # the same stub, started again: another port
        assert again.base_url != stub_judge.base_url
        r = ragbridge_cli(*args, *_judge_args(again, tmp_path / "c.sqlite"))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["counts"]["made"] == 6 > first
        # what the first session made is not asked again
        assert len(again.posts("/chat/completions")) == 6 - first
    # another judge model is another judge: refused
    r = ragbridge_cli(*args, *_judge_args(stub_judge, tmp_path / "c.sqlite")[2:], "--judge-model", "other")
    assert r.returncode == 2 and "other settings (judge" in r.stderr


def test_a_rewording_may_keep_a_name_but_no_longer_phrase_of_the_passage():
    from ragbridge.synthetic.prompts import Problem, check_reword

    passages = cut_passages(read_corpus(CORPUS))
    bm25 = BM25([p.text for p in passages])
    passage = next(p for p in passages if "The Commuter plan costs 19 euros a month" in p.text)
    original = ("What does the Commuter plan cost a month and how many rental hours on city bikes does it "
                "give?")
    check = check_reword(passage, original, bm25)
    # a name has no other wording: two passage words in a row are kept
    assert check({"question": "How much do I pay for the Commuter plan, and how long may I ride?"})
    with pytest.raises(Problem, match="repeats 4 of its words in a row"):
        check({"question": "What do I get with rental hours on city bikes?"})
