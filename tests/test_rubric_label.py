"""``ragbridge label``: the stratified sample, and the offline page in a real headless Chromium, driven
over the DevTools protocol as a person would use it: grade, note, save, and ``ragbridge validate``
reads the file the browser saved. Every text from the data is shown as text and runs nothing."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge import Case, Chunk, load_cases, write_cases
from ragbridge.rubric import load_rubrics
from test_rubric import EXAMPLE_RUBRICS, scores_of

HOSTILE_Q = "<script>document.documentElement.setAttribute('data-pwned','q')</script> Can I get a refund?"
HOSTILE_A = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','a')\"> 14 days."
HOSTILE_CHUNK = "</textarea><script>document.documentElement.setAttribute('data-pwned','c')</script> 14 days."
HOSTILE_ID = "evil\"><b>case</b>"


def chromium() -> Optional[str]:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fds 3 and 4, NUL-separated JSON)."""

    def __init__(self, profile: Path):
        exe = chromium()
        if exe is None:
            pytest.skip("no Chromium on PATH (Debian: apt-get install chromium)")
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def on_fds_3_and_4() -> None:
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=on_fds_3_and_4, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        with os.fdopen(self._r, "rb", buffering=0) as f:
            while chunk := f.read(1 << 16):
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    msg = json.loads(raw)
                    if "id" in msg:
                        with self._cond:
                            self._replies[msg["id"]] = msg
                            self._cond.notify_all()
                    else:
                        self.events.put(msg)

    def send(self, method: str, params: Optional[dict] = None, session: Optional[str] = None) -> dict:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: self._next in self._replies, timeout=60):
                raise TimeoutError(f"no answer to {method}")
            reply = self._replies.pop(self._next)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_for(self, method: str, where=lambda params: True, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.events.get(timeout=max(0.05, deadline - time.monotonic()))
            if msg.get("method") == method and where(msg.get("params", {})):
                return msg["params"]

    def open(self, url: str, downloads: Path) -> str:
        """A new page at ``url`` whose downloads go to ``downloads``; returns its session."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads),
                                                  "eventsEnabled": True})
        self.send("Page.enable", session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired")
        return session

    def js(self, session: str, expression: str) -> Any:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                        session=session)
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    """The example's first 15 cases and a hostile one, judged by helpfulness, faithfulness and
    context_relevance with the stub judge."""
    from ragbridge.testing import StubJudge

    tmp = tmp_path_factory.mktemp("label")
    cases = load_cases(EXAMPLE)[:15] + [Case(
        id=HOSTILE_ID, question=HOSTILE_Q, answer=HOSTILE_A, tags=["billing", "x\" onmouseover=\"alert(1)"],
        contexts=[Chunk(id="refunds.md#<i>1</i>", text=HOSTILE_CHUNK),
                  Chunk(id="plain#2", text="Plain text.")])]
    data = tmp / "golden.jsonl"
    write_cases(cases, data)
    out = tmp / "run"
    with StubJudge() as stub:
        metrics = ["--metric", "helpfulness", "--metric", "faithfulness", "--metric", "context_relevance"]
        res = ragbridge_cli("run", data, "--out", out, "--backend", "rubric", "--rubric", EXAMPLE_RUBRICS,
                            *metrics, "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                            "--cache-mode", "off", "--no-progress")
    assert res.returncode == 0, res.stderr
    return out


def label(run: Path, *args: str) -> dict:
    res = ragbridge_cli("label", run, *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.slow
def test_the_sample_is_stratified_by_verdict_and_reproducible(labelled_run, tmp_path):
    scores = scores_of(labelled_run)
    verdict = {cid: s["passed"] for (cid, b, m), s in scores.items() if m == "helpfulness"}
    n_pass = sum(verdict.values())
    assert 2 <= n_pass <= len(verdict) - 2  # both verdicts occur in this run
    info = label(labelled_run, "--metric", "helpfulness", "--n", "4", "--seed", "7",
                 "--out", tmp_path / "p.html")
    picked = info["case_ids"]
    assert len(picked) == 4 and sum(verdict[c] for c in picked) == 2  # half judged pass, half fail
    assert info["pass"] == info["fail"] == 2 and info["threshold"] == 0.75
    assert label(labelled_run, "--metric", "helpfulness", "--n", "4", "--seed", "7",
                 "--out", tmp_path / "q.html")["case_ids"] == picked
    assert (tmp_path / "p.html").read_text() == (tmp_path / "q.html").read_text()
    others = {tuple(label(labelled_run, "--metric", "helpfulness", "--n", "4", "--seed", str(s),
                          "--out", tmp_path / "r.html")["case_ids"]) for s in range(8)}
    assert len(others) > 1
    # more than the run holds of one verdict: the other side fills up; more than the run: every case
    info = label(labelled_run, "--metric", "helpfulness", "--n", "100", "--out", tmp_path / "all.html")
    assert sorted(info["case_ids"]) == sorted(verdict) and info["pass"] == n_pass
    # the strata: the judge's verdicts on the whole run, which the page carries into every label
    assert info["strata"] == {"pass": n_pass, "fail": len(verdict) - n_pass}
    # within a verdict the draw is uniform: over many seeds each case of a side is drawn about as often
    from collections import Counter

    from ragbridge import load_run
    from ragbridge.rubric.label import sample_for_labels

    run, rubric = load_run(labelled_run), load_rubrics(EXAMPLE_RUBRICS)[0]
    drawn = Counter(c.id for seed in range(400) for c, _ in sample_for_labels(run, "helpfulness", "rubric",
                                                                                rubric, 4, seed))
    for side in (True, False):
        counts = [drawn[c] for c in verdict if verdict[c] is side]
        expected = 400 * 2 / len(counts)
        assert all(abs(k - expected) < 5 * (expected ** 0.5) for k in counts), (side, counts)


def test_label_refuses_a_rubric_other_than_the_runs(labelled_run, tmp_path):
    changed = tmp_path / "v2.toml"
    changed.write_text(EXAMPLE_RUBRICS.read_text().replace("pass_at = 4", "pass_at = 3"))
    res = ragbridge_cli("label", labelled_run, "--metric", "helpfulness", "--rubric", changed)
    assert res.returncode == 2
    judged_by = f"but {labelled_run} was judged by hash {load_rubrics(EXAMPLE_RUBRICS)[0].hash}"
    assert judged_by in " ".join(res.stderr.split())
    res = ragbridge_cli("label", labelled_run)
    assert res.returncode == 2 and "--metric" in res.stderr


def test_grading_in_chromium_saves_labels_that_validate_reads(labelled_run, browser, tmp_path):
    page = tmp_path / "label.html"
    info = label(labelled_run, "--metric", "helpfulness", "--n", "16", "--seed", "2", "--out", page)
    assert HOSTILE_ID in info["case_ids"] and len(info["case_ids"]) == 16
    html = page.read_text()
    assert "<script>document" not in html and "<img src=x" not in html and html.count("<script>") == 1
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    s = browser.open(page.as_uri(), downloads)
    root = browser.js(s, "[document.documentElement.getAttribute('data-label-ready'), "
                         "document.documentElement.getAttribute('data-pwned')]")
    assert root == ["1", None]  # the page's own script ran; nothing from the data did
    text = browser.js(s, "document.body.innerText")
    assert HOSTILE_Q in text and HOSTILE_A in text and HOSTILE_CHUNK in text
    shown = browser.js(s, "[...document.querySelectorAll('section.case')].map(e => e.dataset.caseId)")
    assert shown == info["case_ids"]
    # the judge's verdict is not on the page; the rubric's levels are
    assert "stub judge" not in text and "Mostly resolved" in text
    # grade 15 of the 16 cases by clicking the levels' labels, write a note on one, leave the last ungraded
    levels = {cid: (i % 5) + 1 for i, cid in enumerate(info["case_ids"][:-1])}
    for i, cid in enumerate(info["case_ids"][:-1]):
        browser.js(s, f"[...document.querySelectorAll('section.case')][{i}]"
                      f".querySelector('input[value=\"{levels[cid]}\"]').closest('label').click()")
    browser.js(s, "document.querySelector('section.case textarea').value = 'see </script> the <b>chunk</b>'")
    assert browser.js(s, "document.getElementById('progress').textContent") == "15 of 16 graded"
    browser.js(s, "document.getElementById('save').click()")
    done = browser.wait_for("Browser.downloadProgress", lambda p: p.get("state") in ("completed", "canceled"))
    assert done["state"] == "completed"
    assert browser.js(s, "document.getElementById('status').textContent") == (
        "Saved 15 label(s) to labels-helpfulness.jsonl (1 not graded yet).")
    saved = downloads / "labels-helpfulness.jsonl"
    rows = [json.loads(x) for x in saved.read_text().splitlines()]
    rubric = load_rubrics(EXAMPLE_RUBRICS)[0]
    assert [r["case_id"] for r in rows] == info["case_ids"][:-1]
    judged_pass = {cid: s["passed"] for (cid, b, m), s in scores_of(labelled_run).items()
                   if m == "helpfulness"}
    for r in rows:
        lv = levels[r["case_id"]]
        assert (r["level"], r["label"], r["value"]) == (lv, "pass" if lv >= 4 else "fail", (lv - 1) / 4)
        assert r["metric"] == r["rubric"] == "helpfulness" and r["rubric_hash"] == rubric.hash
        # the sampling design travels with the label
        assert r["stratum"] == ("pass" if judged_pass[r["case_id"]] else "fail")
        assert r["stratum_size"] == info["strata"][r["stratum"]]
        assert (r["stratum_backend"], r["stratum_threshold"]) == ("rubric", 0.75)
    assert rows[0]["note"] == "see </script> the <b>chunk</b>" and "note" not in rows[1]
    # validate reads the saved file as it is
    res = ragbridge_cli("validate", labelled_run, "--labels", saved, "--threshold", "rubric:helpfulness=0.75",
                        "--json")
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)["validation"][0]
    judged = {cid: s["value"] >= 0.75 for (cid, b, m), s in scores_of(labelled_run).items()
              if m == "helpfulness"}
    human = {r["case_id"]: r["label"] == "pass" for r in rows}
    assert row["n_labels"] == row["n_paired"] == 15 and row["design"] == "stratified"
    assert row["missed_fails"] == [c for c in info["case_ids"][:-1] if judged[c] and not human[c]]
    assert row["missed_passes"] == [c for c in info["case_ids"][:-1] if human[c] and not judged[c]]
    assert (row["tp"], row["fn"], row["fp"], row["tn"]) == (
        sum(human[c] and judged[c] for c in human), sum(human[c] and not judged[c] for c in human),
        sum(not human[c] and judged[c] for c in human), sum(not human[c] and not judged[c] for c in human))


@pytest.mark.parametrize("metric", ["context_relevance", "faithfulness"])
def test_per_chunk_and_claim_rubrics_are_graded_in_their_own_terms(labelled_run, browser, tmp_path, metric):
    page = tmp_path / "label.html"
    info = label(labelled_run, "--metric", metric, "--n", "3", "--seed", "5", "--out", page)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    s = browser.open(page.as_uri(), downloads)
    cases = {c.id: c for c in load_cases(labelled_run / "cases.jsonl")}
    if metric == "context_relevance":  # a verdict per passage: the first relevant (1), the others not (0)
        browser.js(s, "document.querySelectorAll('section.case').forEach(sec => "
                      "sec.querySelectorAll('fieldset.chunk').forEach((f, j) => "
                      "f.querySelector(`input[value=\"${j === 0 ? 1 : 0}\"]`).click()))")
    else:  # pass / fail for the whole answer
        browser.js(s, "document.querySelectorAll('section.case').forEach((sec, i) => "
                      "sec.querySelector(`fieldset.grade input[value=\"${i % 2}\"]`).click())")
    browser.js(s, "document.getElementById('save').click()")
    assert browser.wait_for("Browser.downloadProgress",
                            lambda p: p.get("state") in ("completed", "canceled"))["state"] == "completed"
    rows = [json.loads(x) for x in (downloads / f"labels-{metric}.jsonl").read_text().splitlines()]
    assert [r["case_id"] for r in rows] == info["case_ids"]
    for i, r in enumerate(rows):
        if metric == "context_relevance":
            n = len(cases[r["case_id"]].contexts)
            assert r["chunks"] == [True] + [False] * (n - 1) and r["value"] == pytest.approx(1 / n)
            assert r["label"] == ("pass" if 1 / n >= 0.5 else "fail")
        else:
            assert (r["value"], r["label"], r["level"]) == (i % 2, "pass" if i % 2 else "fail", None)
