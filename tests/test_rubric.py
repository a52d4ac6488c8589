"""The rubric backend: rubrics as data (TOML and Python, the hash, errors), the prompts' hygiene, and
whole runs through the CLI against the stub judge (evidence, digests, summary, report, validate,
self-judging, diff and gate across rubric versions)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import EXAMPLE, ROOT, ragbridge_cli
from ragbridge import RunOptions, evaluate, load_cases
from ragbridge.judge import JudgeConfig
from ragbridge.rubric import Level, Rubric, RubricError, builtin_rubrics, load_rubrics

EXAMPLE_RUBRICS = ROOT / "examples" / "support-bot" / "rubrics.toml"
EXAMPLE_LABELS = ROOT / "examples" / "support-bot" / "labels-helpfulness.jsonl"


def scores_of(run_dir: Path) -> dict[tuple[str, str, str], dict]:
    return {(s["case_id"], s["backend"], s["metric"]): s
            for s in map(json.loads, (run_dir / "scores.jsonl").read_text().splitlines())}


def judge_args(stub) -> list[str]:
    return ["--judge-model", "stub-judge", "--judge-base-url", stub.base_url, "--cache-mode", "off",
            "--no-progress"]


# --------------------------------------------------------------------------------------------
# Rubrics as data


def helpfulness_in_python() -> Rubric:
    """The example file's rubric, written in Python (levels in another order, fields too)."""
    toml = load_rubrics(EXAMPLE_RUBRICS)[0]
    levels = [Level(value=lv.value, label=lv.label, description=lv.description, examples=list(lv.examples))
              for lv in reversed(toml.levels)]
    return Rubric(name="helpfulness", question=toml.question, fields=["answer", "question", "contexts"],
                  scale="1-5", pass_at=4, levels=levels)


def test_rubric_from_toml_and_from_python_have_the_same_hash():
    toml = load_rubrics(EXAMPLE_RUBRICS)[0]
    py = helpfulness_in_python()
    assert py == toml and py.hash == toml.hash and len(toml.hash) == 16
    # any change a judge would see is a new hash; the default pass_at is the top level, explicitly or not
    changed = py.model_copy(update={"question": py.question + "?"})
    assert Rubric.model_validate(changed.model_dump()).hash != toml.hash
    relaxed = Rubric.model_validate({**toml.model_dump(), "pass_at": 3})
    assert relaxed.hash != toml.hash and relaxed.threshold == 0.5 and toml.threshold == 0.75
    binary = dict(name="x", question="q?", fields=["answer"], scale="binary",
                  levels=[{"value": 1, "label": "y", "description": "yes"},
                          {"value": 0, "label": "n", "description": "no"}])
    assert Rubric.model_validate(binary).hash == Rubric.model_validate({**binary, "pass_at": 1}).hash


def test_builtin_rubrics_cover_the_judged_canonical_metrics():
    b = builtin_rubrics()
    assert sorted(b) == ["abstention", "answer_correctness", "answer_relevance", "context_relevance",
                         "faithfulness"]
    assert b["faithfulness"].mode == "claims" and b["context_relevance"].mode == "per_chunk"
    assert b["answer_correctness"].fields == ("question", "reference", "answer")
    assert b["answer_relevance"].requires == ("answer",)


@pytest.mark.parametrize("old, new, line, expected", [
    ("pass_at = 4", "pass_at = 6", 12, "pass_at: 6 is not a level of scale '1-5': set it to one of"),
    ("value = 3\n", "value = 7\n", 15, "level: scale '1-5' has levels 1, 2, 3, 4, 5: describe each"),
    ("reasons_first = true", "reasons_frist = true", 13, "reasons_frist: is not a rubric field"),
    ('scale = "1-5"', 'scale = "1-10"', 11, "scale: must be 'binary', 'three-level' or '1-5'"),
    ('name = "helpfulness"', 'name = "Helpful ness"', 8, "is not a metric name"),
    ('"contexts", "answer"]', '"context", "answer"]', 10, "fields.1: must be 'question', 'reference'"),
    ('scale = "1-5"', 'mode = "claims"', 11, 'mode: "claims" has its own verdicts'),
    ("[[rubric.level]]\nvalue = 5", "[[rubric.level]\nvalue = 5", 15, "not valid TOML"),
])
def test_bad_rubric_file_names_file_line_field_and_fix(tmp_path, old, new, line, expected):
    bad = tmp_path / "bad.toml"
    text = EXAMPLE_RUBRICS.read_text()
    assert old in text
    bad.write_text(text.replace(old, new))
    with pytest.raises(RubricError) as e:
        load_rubrics(bad)
    assert str(e.value).startswith(f"{bad}:{line}: "), str(e.value)
    assert expected in str(e.value)


def test_bad_rubric_file_stops_the_run_before_anything_is_written(tmp_path, stub_judge):
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE_RUBRICS.read_text().replace("pass_at = 4", "pass_at = 6"))
    out = tmp_path / "run"
    res = ragbridge_cli("run", EXAMPLE, "--out", out, "--backend", "rubric", "--rubric", bad,
                        "--metric", "helpfulness", *judge_args(stub_judge))
    assert res.returncode == 2, res.stderr
    assert f"{bad}:12: rubric 'helpfulness', pass_at: 6 is not a level" in " ".join(res.stderr.split())
    assert not out.exists() and stub_judge.posts() == []


# --------------------------------------------------------------------------------------------
# Prompt hygiene


def test_one_system_prompt_per_rubric_and_exactly_the_named_fields(tmp_path, stub_judge):
    cases = load_cases(EXAMPLE)
    judge = JudgeConfig(model="stub-judge", base_url=stub_judge.base_url, cache_mode="off")
    run = evaluate(cases, backends=["rubric"], judge=judge,
                   options=RunOptions(backend_options={"rubric": {"files": [str(EXAMPLE_RUBRICS)]}}))
    assert run.complete and not [s for s in run.scores if s.error]
    posts = [p.body for p in stub_judge.posts("/chat/completions")]
    by_task: dict[tuple[str, str], set[str]] = {}
    users: dict[str, list[str]] = {}
    for body in posts:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        criterion = next(line for line in system.splitlines() if line.startswith("Criterion: "))
        by_task.setdefault((system.splitlines()[0], criterion), set()).add(system)
        users.setdefault(criterion[len("Criterion: "):], []).append(user)
        assert body["temperature"] == 0 and body["response_format"]["type"] == "json_schema"
    # the system prompt never varies with the case: one per rubric and task
    assert len(by_task) == 7  # 4 graded rubrics + helpfulness, and faithfulness' split and verify
    assert all(len(v) == 1 for v in by_task.values()), {k: len(v) for k, v in by_task.items()}
    # the user message shows exactly the rubric's fields, and never the case id or tags
    heads = {name: {line for u in us for line in u.splitlines() if line.startswith("### ")}
             for name, us in users.items()}
    assert heads["answer_relevance"] == {"### Question", "### Answer"}
    assert heads["answer_correctness"] == {"### Question", "### Reference answer", "### Answer"}
    assert heads["context_relevance"] == {"### Question", "### Passage"}
    assert heads["helpfulness"] == {"### Question", "### Context passages", "### Answer"}
    for u in [u for us in users.values() for u in us]:
        assert not any(c.id in u for c in cases) and "synthetic" not in u
    # the context is what the generator saw: every chunk's text verbatim, in order, a repeat kept
    dup = next(c for c in cases if c.id == "returns-label-validity")
    assert len({ch.id for ch in dup.contexts}) < len(dup.contexts)
    passages = "\n\n".join(f"[{i}] {ch.text}" for i, ch in enumerate(dup.contexts, 1))
    expected = "### Context passages\n" + passages
    whole = f"### Question\n{dup.question}\n\n{expected}\n\n### Answer\n{dup.answer}"
    assert sum(u == whole for u in users["helpfulness"]) == 1
    head = f"### Question\n{dup.question}\n"
    chunk_msgs = [u for u in users["context_relevance"] if u.startswith(head)]
    assert sorted(chunk_msgs) == sorted(f"{head}\n### Passage\n{ch.text}" for ch in dup.contexts)


# --------------------------------------------------------------------------------------------
# Whole runs through the CLI


@pytest.fixture(scope="module")
def rubric_run(tmp_path_factory):
    """Every built-in rubric and the example's helpfulness, plus native, on the example (CLI, stub judge)."""
    from ragbridge.testing import StubJudge

    out = tmp_path_factory.mktemp("rubric") / "run"
    with StubJudge() as stub:
        res = ragbridge_cli("run", EXAMPLE, "--out", out, "--backend", "rubric", "--backend", "native",
                            "--rubric", EXAMPLE_RUBRICS, *judge_args(stub), env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    return out, res


def test_cli_run_records_hashes_evidence_and_the_unsupported_share(rubric_run):
    out, res = rubric_run
    manifest = json.loads((out / "run.json").read_text())
    digests = manifest["digests"]["rubric"]
    rubrics = {**builtin_rubrics(), "helpfulness": load_rubrics(EXAMPLE_RUBRICS)[0]}
    assert digests == {name: r.hash for name, r in rubrics.items()}
    assert manifest["options"]["backend_options"] == {"rubric": {"files": [str(EXAMPLE_RUBRICS)]}}
    assert manifest["judge"]["stub"] is True and "self_judging" not in manifest["judge"]
    scores = scores_of(out)
    rub = [s for s in scores.values() if s["backend"] == "rubric"]
    assert len(rub) == 53 * 6 and not [s for s in rub if s["error"]]
    assert all(s["native_value"]["hash"] == digests[s["metric"]] for s in rub)
    assert all(s["judge_calls"] >= 1 and s["prompt_tokens"] > 0 for s in rub)
    # claim-level faithfulness: every claim with its verdict; the unsupported ones verbatim in the reason
    wrong = scores[("claims-damage-deadline", "rubric", "faithfulness")]
    claims = wrong["evidence"]["claims"]
    bad = [c for c in claims if c["verdict"] != "SUPPORTED"]
    assert bad and wrong["value"] == (len(claims) - len(bad)) / len(claims) and wrong["passed"] is False
    assert all(f'"{c["text"]}"' in wrong["reason"] for c in bad)
    assert any("14 days" in c["text"] and c["verdict"] == "CONTRADICTED" for c in bad)
    good = scores[("billing-refund-window", "rubric", "faithfulness")]
    assert good["value"] == 1.0 and good["passed"] is True and good["evidence"]["claims"]
    # per chunk: one verdict per retrieved chunk, in order
    dup = scores[("returns-label-validity", "rubric", "context_relevance")]
    assert [c["id"] for c in dup["evidence"]["chunks"]] == [
        ch.id for ch in next(c for c in load_cases(EXAMPLE) if c.id == "returns-label-validity").contexts]
    chunks = dup["evidence"]["chunks"]
    assert dup["value"] == sum(c["relevant"] for c in chunks) / len(chunks)
    # the summary shows the unsupported-claim share beside the mean, overall and per tag
    def unsupported(s: dict) -> bool:
        return any(c["verdict"] != "SUPPORTED" for c in s["evidence"]["claims"])

    faith = [s for s in rub if s["metric"] == "faithfulness" and s["evidence"]["claims"]]
    n_bad, n_claims = sum(map(unsupported, faith)), len(faith)
    line = next(ln for ln in res.stdout.splitlines() if "rubric" in ln and "faithfulness" in ln)
    assert line.rstrip(" │").endswith(f"{n_bad / n_claims:.0%}"), line
    assert "unsup.: share of answers with at least one unsupported claim" in " ".join(res.stdout.split())
    assert max(len(ln) for ln in res.stdout.splitlines()) <= 80
    tagged = [s for s in faith if s["case_id"].startswith("unanswerable")]
    share = sum(map(unsupported, tagged)) / len(tagged)
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("│ unanswerable")]  # one per tag table
    assert any(f"({share:.0%})" in row for row in rows), rows


@pytest.mark.slow
def test_report_and_validate_read_the_typed_evidence(rubric_run, tmp_path):
    out, _ = rubric_run
    md = tmp_path / "report.md"
    res = ragbridge_cli("report", out, "--format", "md", "--out", md, "--resamples", "0")
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    assert "with an unsupported claim" in text and "unsup." in text
    labels = tmp_path / "labels.jsonl"
    graded = [("claims-damage-deadline", "fail"), ("billing-refund-window", "pass"),
              ("notifications-sms-cost", "fail"), ("billing-vat-id", "pass")]
    labels.write_text("".join(json.dumps({"case_id": c, "metric": "faithfulness", "label": lab}) + "\n"
                              for c, lab in graded))
    res = ragbridge_cli("validate", out, "--labels", labels, "--backend", "rubric", "--threshold", "rubric=1",
                        "--json")
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)["validation"][0]
    scores = scores_of(out)
    claims = [scores[(cid, "rubric", "faithfulness")]["evidence"]["claims"] for cid, _ in graded]
    expected = sum(any(c["verdict"] != "SUPPORTED" for c in cs) for cs in claims)
    assert row["claims_answers"] == 4 and row["unsupported_answers"] == expected
    # the rubric backend joins compare as a peer (abstention: judged by the model vs the native check)
    res = ragbridge_cli("compare", out, "--metric", "abstention", "--json", "--resamples", "0")
    assert res.returncode == 0, res.stderr
    pair = json.loads(res.stdout)["agreement"][0]
    assert {pair["backend_a"], pair["backend_b"]} == {"native", "rubric"} and pair["n_paired"] == 4


def test_a_run_judged_by_the_systems_own_model_is_flagged(tmp_path, stub_judge):
    out = tmp_path / "run"
    res = ragbridge_cli("run", EXAMPLE, "--out", out, "--backend", "rubric", "--metric", "answer_relevance",
                        "--generator-model", "openai/Stub-Judge", *judge_args(stub_judge))
    assert res.returncode == 0, res.stderr
    assert "self-judging" in res.stderr and "openai/Stub-Judge" in res.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["judge"]["self_judging"] == {"generator_model": "openai/Stub-Judge", "cases": 53}
    assert manifest["options"]["generator_model"] == "openai/Stub-Judge"
    html = tmp_path / "r.html"
    assert ragbridge_cli("report", out, "--out", html, "--resamples", "0").returncode == 0
    assert ("Self-judging:</strong> the judge is the system under test's own model "
            "(<code>openai/Stub-Judge</code>) on 53 case(s)") in html.read_text()
    # per case, from the golden set's metadata
    data = tmp_path / "g.jsonl"
    rows = [json.loads(x) for x in EXAMPLE.read_text().splitlines()[:4]]
    rows[1]["metadata"]["generator_model"] = "stub-judge"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out2 = tmp_path / "run2"
    assert ragbridge_cli("run", data, "--out", out2, "--backend", "rubric", "--metric", "answer_relevance",
                         *judge_args(stub_judge)).returncode == 0
    assert json.loads((out2 / "run.json").read_text())["judge"]["self_judging"]["cases"] == 1
    out3 = tmp_path / "run3"
    assert ragbridge_cli("run", EXAMPLE, "--out", out3, "--backend", "rubric", "--metric", "answer_relevance",
                         "--generator-model", "gpt-4o-mini", *judge_args(stub_judge)).returncode == 0
    assert "self_judging" not in json.loads((out3 / "run.json").read_text())["judge"]


@pytest.mark.slow
def test_a_changed_rubric_is_rescored_warned_by_diff_and_refused_by_gate(tmp_path, stub_judge):
    v1 = tmp_path / "v1.toml"
    shutil.copy(EXAMPLE_RUBRICS, v1)
    v2 = tmp_path / "v2.toml"
    v2.write_text(EXAMPLE_RUBRICS.read_text().replace("pass_at = 4", "pass_at = 3"))
    h1, h2 = load_rubrics(v1)[0].hash, load_rubrics(v2)[0].hash
    base, new = tmp_path / "base", tmp_path / "new"
    for out, f in ((base, v1), (new, v2)):
        res = ragbridge_cli("run", EXAMPLE, "--out", out, "--backend", "rubric", "--rubric", f, "--metric",
                            "helpfulness", "--metric", "answer_relevance", *judge_args(stub_judge))
        assert res.returncode == 0, res.stderr
    res = ragbridge_cli("diff", base, new)
    assert res.returncode == 0, res.stderr
    text = " ".join((res.stdout + res.stderr).split())
    assert f"rubric:helpfulness was judged by a different rubric in the two runs (hash {h1} -> {h2})" in text
    assert "rubric:answer_relevance was judged" not in text
    gates = tmp_path / "gates.toml"
    gates.write_text(textwrap.dedent("""
        [[gate]]
        check = "helpfulness drop <= 0.05"
        backend = "rubric"
    """))
    res = ragbridge_cli("gate", new, "--config", gates, "--baseline", base)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "different rubric" in " ".join(res.stderr.split())
    gates.write_text(gates.read_text().replace("helpfulness drop", "answer_relevance drop"))
    assert ragbridge_cli("gate", new, "--config", gates, "--baseline", base).returncode == 0
    # rescoring the base folder with the new rubric scores that metric again, the other one is kept
    before = scores_of(base)
    stub_judge.reset()
    res = ragbridge_cli("rescore", base, "--backend", "rubric", "--rubric", v2, "--metric", "helpfulness",
                        "--metric", "answer_relevance", *judge_args(stub_judge)[:-1])
    assert res.returncode == 0, res.stderr
    note = "rubric changed since the folder was scored, scored again: rubric:helpfulness"
    assert note in " ".join(res.stdout.split())
    after = scores_of(base)
    assert json.loads((base / "run.json").read_text())["digests"]["rubric"]["helpfulness"] == h2
    assert {s["native_value"]["hash"] for k, s in after.items() if k[2] == "helpfulness"} == {h2}
    assert all(after[k] == before[k] for k in before if k[2] == "answer_relevance")
    assert len(stub_judge.posts("/chat/completions")) == 53
    assert ragbridge_cli("diff", base, new).returncode == 0
    assert "different rubric" not in ragbridge_cli("diff", base, new).stdout
