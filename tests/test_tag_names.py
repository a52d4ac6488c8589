"""Tags are names compared exactly, by the rule ids follow: white space at their ends dropped, Unicode
NFC, a tag holding a character that does not print refused. So ``café`` typed as one character and as
``e`` and a combining accent is one tag, in the cases read from every input (JSONL, CSV, the light
canonical path, dicts, DataFrames), in a gate rule's ``tags`` and in ``--tag`` filters."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pandas as pd
import pytest

from conftest import EXAMPLE, ragbridge_cli
import ragbridge
from ragbridge import load_cases, load_run

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")
assert NFC != NFD


def _golden(path: Path, tags_of: dict[int, list[str]], ensure_ascii: bool = False) -> Path:
    """The support-bot golden set, case ``i`` tagged ``tags_of[i]`` (its own tags kept)."""
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    for i, tags in tags_of.items():
        rows[i]["tags"] = rows[i].get("tags", []) + tags
    path.write_text("".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_tag_in_nfc_and_in_nfd_is_one_tag_in_the_run_and_its_gate(tmp_path):
    """Two cases tagged café, one in NFC and one in NFD; the gate rule names café in NFD with min_n
    2: it held on one case of the two before (and so failed: n 1), and the summary had two café rows."""
    golden = _golden(tmp_path / "golden.jsonl", {0: [NFC], 1: [NFD]})
    run = ragbridge_cli("run", golden, "--out", tmp_path / "run", "--backend", "native", "--no-progress",
                        "--json")
    assert run.returncode == 0, run.stderr
    rows = [r for r in json.loads(run.stdout)["by_tag"] if r["metric"] == "recall@5"
            and unicodedata.normalize("NFC", r["tag"]) == NFC]
    assert [(r["tag"], r["n"]) for r in rows] == [(NFC, 2)]
    gates = tmp_path / "gates.toml"
    gates.write_text(f'[[gate]]\ncheck = "recall@5 >= 0.5"\ntags = ["{NFD}"]\nmin_n = 2\n', encoding="utf-8")
    gate = ragbridge_cli("gate", tmp_path / "run", "--config", gates, "--json")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    (result,) = json.loads(gate.stdout)["results"]
    assert result["n"] == 2 and result["tags"] == [NFC] and result["verdict"] == "pass"


def test_every_input_gives_a_tag_in_one_form(tmp_path):
    """The same set with a tag in NFD and with white space at its ends, read from canonical JSONL
    (the light path: records already canonical but for the tag; and \\u-escaped), CSV written by
    pandas, a list of dicts and a DataFrame: each case's tags are NFC, stripped, each once; and the
    light path's run has the fingerprint of the set written in NFC (the same canonical lines)."""
    tags_of = {0: [NFD, f" {NFC} "], 2: [NFD]}
    raw = _golden(tmp_path / "nfd.jsonl", tags_of)
    escaped = _golden(tmp_path / "escaped.jsonl", tags_of, ensure_ascii=True)
    plain = _golden(tmp_path / "nfc.jsonl", {0: [NFC], 2: [NFC]})
    records = [c.model_dump(mode="json") for c in load_cases(EXAMPLE)]
    for i, tags in tags_of.items():
        records[i]["tags"] = records[i]["tags"] + tags
    frame = pd.DataFrame(records)
    csv = tmp_path / "golden.csv"
    flat = frame.copy()
    for col in ("contexts", "relevant", "relevant_spans", "reference_contexts", "must_contain",
                "must_not_contain", "metadata"):
        flat[col] = flat[col].map(json.dumps)
    flat["tags"] = flat["tags"].map("|".join)
    flat.to_csv(csv, index=False)
    expected = load_cases(plain)
    assert expected[0].tags[-1] == NFC and expected[2].tags[-1] == NFC
    for source in (raw, escaped, csv, records, frame):
        cases = load_cases(source)
        assert [c.tags for c in cases] == [c.tags for c in expected], type(source)
        assert cases[0].tags.count(NFC) == 1 and NFD not in cases[0].tags
    fingerprints = []
    for name, source in (("nfd", raw), ("nfc", plain)):
        ragbridge.evaluate(source, backends=["native"], metrics=["recall@5"], out=tmp_path / name)
        fingerprints.append(load_run(tmp_path / name).manifest.dataset["fingerprint"])
        assert load_run(tmp_path / name).cases[0].tags.count(NFC) == 1
    assert fingerprints[0] == fingerprints[1]


def test_a_case_tagged_twice_in_two_forms_counts_once(tmp_path):
    golden = _golden(tmp_path / "golden.jsonl", {0: [NFC, NFD]})
    run = ragbridge.evaluate(golden, backends=["native"], metrics=["recall@5"], out=tmp_path / "run")
    assert run.cases[0].tags.count(NFC) == 1 and NFD not in run.cases[0].tags
    rows = [r for r in run.summary_rows() if unicodedata.normalize("NFC", r["tag"]) == NFC]
    assert [(r["tag"], r["n"]) for r in rows] == [(NFC, 1)]


@pytest.mark.parametrize("tag", ["a\x1b[31mb", "x\u202ey", "zero\u200bwidth", ""])
def test_a_tag_that_does_not_print_is_refused_naming_line_and_field(tmp_path, tag):
    golden = _golden(tmp_path / "golden.jsonl", {3: [tag]})
    res = ragbridge_cli("run", golden, "--out", tmp_path / "run", "--no-progress")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{golden}:4: field 'tags'" in res.stderr and not (tmp_path / "run").exists()


def test_gate_rule_and_filters_take_a_tag_in_any_form(tmp_path):
    """diff --tag and trend --tag with café in NFD find the cases tagged café in NFC (before: "no
    such tag", exit 2); a gate rule's tag that does not print is refused, naming the rule."""
    golden = _golden(tmp_path / "golden.jsonl", {0: [NFC], 1: [NFC]})
    for name in ("a", "b"):
        ragbridge.evaluate(golden, backends=["native"], metrics=["recall@5"], out=tmp_path / name)
    diff = ragbridge_cli("diff", tmp_path / "a", tmp_path / "b", "--tag", NFD, "--all", "--json")
    assert diff.returncode == 0, diff.stderr
    assert NFC in {r.get("tag") for r in json.loads(diff.stdout)["summary"]}
    trend = ragbridge_cli("trend", tmp_path / "a", tmp_path / "b", "--by-tag", "--tag", NFD, "--json")
    assert trend.returncode == 0, trend.stderr
    assert NFC in {r["tag"] for r in json.loads(trend.stdout)["summary"]}
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "recall@5 >= 0.5"\ntags = ["caf\\u00e9\\u202e"]\n', encoding="utf-8")
    gate = ragbridge_cli("gate", tmp_path / "a", "--config", gates)
    assert gate.returncode == 2 and "holds U+202E" in gate.stderr, gate.stderr
    assert "\u202e" not in gate.stderr
