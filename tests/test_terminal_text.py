"""Nothing a terminal acts on reaches it from the data: case ids, tags, reasons, paths and rule names
holding ESC [31m, a bell, U+202E (right-to-left override) and a C1 control (CSI, U+009B) are shown as
escapes by every command, piped as in CI; ``--json`` stays one valid document holding the values
exactly; files keep the data as it is.

A run folder named with those characters, a target whose error says them and a gate rule named with
them carry the hostile text through run, rescore, diff, gate, diagnose, trend, compare, report and
export-scores; a case id and a tag holding them are refused with a message that shows them escaped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge.report.text import json_escaped, terminal_text

HOSTILE = "x\x1b[31mred\x07bell\u202eevil\x9bc1"
SHOWN = "x\\x1b[31mred\\x07bell\\u202eevil\\x9bc1"  # how a terminal shows it
#: every character a terminal acts on: C0 but tab and line feed, DEL, C1, bidirectional controls
ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")

TARGET = f'''
import json
CASES = {{}}
for line in open({str(EXAMPLE)!r}, encoding="utf-8"):
    record = json.loads(line)
    CASES[record["question"]] = record
FIRST = list(CASES)[:2]


def pipeline(question):
    if question in FIRST:
        raise RuntimeError("the retriever said " + {HOSTILE!r})
    record = CASES[question]
    return {{"answer": record.get("answer", ""), "contexts": record.get("contexts", [])}}
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """Two runs of the support-bot questions through a target that fails on two of them with the
    hostile text, in folders named with it, and a gates file with a rule named with it."""
    tmp = tmp_path_factory.mktemp("terminal")
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("answer", None)
        row.pop("contexts", None)
    (tmp / "golden.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp / "hostile_target.py").write_text(TARGET, encoding="utf-8")
    (tmp / "gates.toml").write_text(f'[[gate]]\nname = {json.dumps(HOSTILE)}\ncheck = "error_rate <= 0"\n\n'
                                    '[[gate]]\ncheck = "recall@5 >= 0.99"\n', encoding="utf-8")
    for name in ("base-", "run-"):
        res = ragbridge_cli("run", "golden.jsonl", "--out", name + HOSTILE, "--target",
                            "hostile_target:pipeline", "--no-progress", cwd=tmp)
        assert res.returncode == 3, res.stderr  # two errored cases
    return tmp


def _clean(res) -> None:
    found = ACTING.findall(res.stdout + res.stderr)
    assert not found, f"{len(found)} control character(s) reached the terminal: {sorted(set(found))!r}"


R, B = "run-" + HOSTILE, "base-" + HOSTILE
TEXT_COMMANDS = {
    "run": ["run", "golden.jsonl", "--out", R, "--target", "hostile_target:pipeline", "--no-progress",
            "--overwrite"],
    "rescore": ["rescore", R, "--backend", "native", "--metric", "mrr", "--no-progress"],
    "diff": ["diff", B, R],
    "gate": ["gate", R, "--config", "gates.toml"],
    "diagnose": ["diagnose", R],
    "trend": ["trend", B, R],
    "compare": ["compare", B, R],
    "report": ["report", R],
    "export-scores": ["export-scores", R, "--to", "jsonl", "--out", "scores.jsonl"],
}


#: each command's exit: the target's two errors (3), the gate's error rule (1), a run not from traces (2)
EXPECTED = {"run": 3, "rescore": 3, "gate": 1, "export-scores": 2}


@pytest.mark.parametrize("name", list(TEXT_COMMANDS))
def test_every_command_shows_the_hostile_text_escaped(hostile, name):
    res = ragbridge_cli(*TEXT_COMMANDS[name], cwd=hostile)
    assert res.returncode == EXPECTED.get(name, 0), res.stdout + res.stderr
    _clean(res)
    assert SHOWN in res.stdout + res.stderr, res.stdout + res.stderr  # shown, escaped


JSON_COMMANDS = {
    "run": (["run", "golden.jsonl", "--out", R, "--target", "hostile_target:pipeline", "--no-progress",
             "--overwrite", "--json"], lambda d: d["run"]),
    "diff": (["diff", B, R, "--json"], lambda d: d["new"]["path"]),
    "gate": (["gate", R, "--config", "gates.toml", "--json"], lambda d: d["results"][0]["label"]),
    "diagnose": (["diagnose", R, "--json"], lambda d: d["run"]),
    "trend": (["trend", B, R, "--json"], lambda d: d["runs"][1]["path"]),
    "report": (["report", R, "--format", "json", "--out", "-"], lambda d: d["run"]["path"]),
}


@pytest.mark.parametrize("name", list(JSON_COMMANDS))
def test_json_output_is_valid_and_exact_and_safe_on_a_terminal(hostile, name):
    args, pick = JSON_COMMANDS[name]
    res = ragbridge_cli(*args, cwd=hostile)
    _clean(res)
    value = pick(json.loads(res.stdout))
    assert HOSTILE in value, value


def test_report_on_stdout_shows_the_text_escaped_and_the_file_keeps_it(hostile):
    res = ragbridge_cli("report", R, "--format", "html", "--out", "-", cwd=hostile)
    assert res.returncode == 0, res.stderr
    _clean(res)
    assert SHOWN in res.stdout
    written = ragbridge_cli("report", R, "--format", "json", "--out", "report.json", cwd=hostile)
    assert written.returncode == 0, written.stderr
    _clean(written)
    assert json.loads((hostile / "report.json").read_text(encoding="utf-8"))["run"]["path"] == R
    errors = [json.loads(line)["error"] for line in (hostile / R / "scores.jsonl").read_text().splitlines()]
    assert any(e and HOSTILE in e for e in errors)  # the run folder keeps the target's text exactly


@pytest.mark.parametrize("field", ["id", "tags"])
def test_an_id_or_a_tag_holding_control_characters_is_refused_and_shown_escaped(tmp_path, field):
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()[:3]]
    rows[1][field] = HOSTILE if field == "id" else ["real", HOSTILE]
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for extra in ([], ["--json"]):
        res = ragbridge_cli("run", golden, "--out", tmp_path / "run", "--no-progress", *extra)
        assert res.returncode == 2, res.stdout + res.stderr
        _clean(res)
        assert f"field '{field}'" in res.stderr and "x\\x1b[31mred\\x07bell\\u202eevil\\x9bc1" in res.stderr


def test_terminal_text_and_json_escaped():
    """Every C0 control but tab and line feed, DEL, every C1 control, the bidirectional controls and
    the line separators are escaped; text that prints is left as it is; a JSON document escaped so
    reads back to the same values."""
    acting = ([chr(c) for c in range(0x20) if c not in (9, 10)] + [chr(c) for c in range(0x7F, 0xA0)]
              + list("\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"))
    for ch in acting:
        shown = terminal_text(f"a{ch}b")
        assert not ACTING.search(shown) and shown.startswith("a\\") and shown.endswith("b"), repr(ch)
    assert terminal_text("café 中文 ok\tx\ny — 👍") == "café 中文 ok\tx\ny — 👍"
    doc = {"id": "".join(acting), "tags": [HOSTILE, "café"]}
    text = json_escaped(json.dumps(doc, ensure_ascii=False, indent=2))
    assert not ACTING.search(text) and json.loads(text) == doc


@pytest.mark.parametrize("command", ["gate", "diff", "diagnose", "trend", "report"])
def test_a_run_folder_edited_to_hold_a_hostile_id_or_tag_is_refused_and_shown_escaped(hostile, tmp_path,
                                                                                      command):
    """A run's cases.jsonl edited to give a case an id or a tag holding the hostile text: every
    command that reads the run refuses it (exit 2, naming the line and the field), the message shows
    the text escaped."""
    import shutil

    for what in ("id", "tags"):
        run_dir = tmp_path / what
        shutil.copytree(hostile / R, run_dir)
        lines = (run_dir / "cases.jsonl").read_text(encoding="utf-8").splitlines()
        record = json.loads(lines[2])
        record[what] = HOSTILE if what == "id" else [HOSTILE]
        lines[2] = json.dumps(record)
        (run_dir / "cases.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        args = {"gate": ["gate", run_dir, "--config", "gates.toml"], "diff": ["diff", hostile / B, run_dir],
                "diagnose": ["diagnose", run_dir], "trend": ["trend", hostile / B, run_dir],
                "report": ["report", run_dir, "--out", tmp_path / "report.html"]}[command]
        res = ragbridge_cli(*args, cwd=hostile)
        assert res.returncode == 2, res.stdout + res.stderr
        _clean(res)
        assert f"cases.jsonl:3: field '{what}'" in res.stderr and SHOWN in res.stderr, res.stderr
