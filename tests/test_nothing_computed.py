"""A first run on an unlabelled set: RAGAS data without relevance labels scored by the native
metrics computes nothing. The run says why and what to run instead, on the terminal and in --json,
and exits 5; the suggested command then scores the set."""

from __future__ import annotations

import json

from conftest import ROOT, ragbridge_cli


def _legacy(tmp_path):
    rows = [json.loads(line) for line in (ROOT / "examples" / "support-bot" / "ragas-dataset.jsonl")
            .read_text().splitlines() if line.strip()]
    path = tmp_path / "legacy.jsonl"
    path.write_text("".join(json.dumps({"question": r["user_input"], "contexts": r["retrieved_contexts"],
                                        "answer": r["response"], "ground_truth": r["reference"]}) + "\n"
                            for r in rows))
    return path


def test_an_unlabelled_set_says_what_is_missing_and_what_to_run(tmp_path, stub_judge):
    data = _legacy(tmp_path)
    p = ragbridge_cli("run", data, "--out", tmp_path / "r", "--no-progress")
    assert p.returncode == 5, p.stderr
    assert "—" not in p.stdout  # no table of dashes
    text = " ".join(p.stderr.split())
    assert "nothing was computed: all 180 scores are undefined" in text
    assert "native hit@5, map, mrr, ndcg@5, precision@5, recall@5: no relevance labels (20 case(s))" in text
    assert "none has: relevance labels (relevant)" in text
    # no case is unanswerable: abstention, undefined on every other case, is not suggested
    assert "rubric: answer_correctness, answer_relevance, context_relevance, faithfulness" in text
    assert "phoenix: faithfulness, context_relevance\n" in p.stderr.replace("\n    ", " ")
    assert "`ragbridge judge serve --stub` runs a stub judge" in text
    command = text.split("to score them: ")[1].split(" (another backend")[0]
    assert command.startswith(f"ragbridge run {data} --out {tmp_path / 'r'} --backend ")
    assert (tmp_path / "r" / "scores.jsonl").exists()

    p = ragbridge_cli("run", data, "--out", tmp_path / "r", "--no-progress", "--json")
    assert p.returncode == 5
    doc = json.loads(p.stdout)["nothing_computed"]
    recall = next(m for m in doc["metrics"] if m["metric"] == "recall@5")
    assert recall == {"backend": "native", "metric": "recall@5", "n": 20,
                      "reasons": [{"reason": "no relevance labels", "cases": 20}]}
    assert doc["fields"]["relevant"] == 0 and doc["fields"]["answer"] == 20
    rubric = next(j for j in doc["judged"] if j["backend"] == "rubric")
    assert {"answer_correctness", "answer_relevance", "context_relevance",
            "faithfulness"} <= set(rubric["metrics"]) and "abstention" not in rubric["metrics"]

    # what it says to run, with the judge filled in (the rubric backend, ragbridge's own judge)
    args = command.split()[1:]
    args[args.index("--backend") + 1] = "rubric"
    args[args.index("MODEL")] = "stub-judge"
    args[args.index("URL")] = stub_judge.base_url
    p = ragbridge_cli(*args, "--no-progress", "--json", env={"OPENAI_API_KEY": "sk-test"})
    assert p.returncode == 0, p.stderr
    done = json.loads(p.stdout)
    assert done["nothing_computed"] is None and done["counts"]["scored"] == 100


def test_a_set_that_computes_something_is_not_flagged(tmp_path, example_path):
    p = ragbridge_cli("run", example_path, "--out", tmp_path / "r", "--no-progress", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["nothing_computed"] is None
