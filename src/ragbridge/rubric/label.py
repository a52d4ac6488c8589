"""Human labels without a labelling service: a stratified sample on one offline HTML page.

`sample_for_labels` draws up to ``n`` cases a backend scored for one metric, stratified by the
judge's verdict (`ragbridge.verdicts.verdict` at the rubric's pass rule): half the sample from the
cases the judge passed and half from those it failed (the rest from the other side when one runs
short), each half a simple random sample of its side (seeded), so rare verdicts are in the sample.
The sample is therefore not a uniform sample of the run, and the labels say how it was drawn: each
label carries its ``stratum`` (the judge's verdict), ``stratum_size`` (the cases of the run in that
stratum), ``stratum_backend`` and ``stratum_threshold``, by which ``validate`` weights every figure
(`ragbridge.analysis.labels`).

`render_page` writes one self-contained page (no network, no CDN; a Content-Security-Policy lets only
its own inline script run, by hash). For each case it shows exactly what the judge saw under the
rubric (the question, the reference answer, the context passages as the generator saw them, the
answer: whichever the rubric names), never the judge's verdict, and asks the rubric's question with
its scale: one level per case (mode ``whole``), "is every claim supported?" (``claims``) or relevant
or not per passage (``per_chunk``). Every text from the data is escaped. "Save labels" downloads
``labels-<metric>.jsonl``, one line per graded case::

    {"case_id": "...", "metric": "helpfulness", "label": "pass", "value": 0.75, "level": 4,
     "rubric": "helpfulness", "rubric_hash": "...", "note": "...", "stratum": "fail",
     "stratum_size": 23, "stratum_backend": "rubric", "stratum_threshold": 0.75}

which ``ragbridge validate RUN --labels FILE`` reads (``label`` is pass/fail by the rubric's pass
rule; ``--threshold rubric:<metric>=<the rubric's threshold>`` compares the judge the same way).
"""

from __future__ import annotations

import base64
import hashlib
import random
from collections import defaultdict
from typing import Any, Sequence

from ..run import Run
from ..schema import Case, Score
from ..verdicts import verdict
from .rubrics import Rubric

__all__ = ["sample_for_labels", "strata_of", "render_page"]


def _verdict(score: Score, rubric: Rubric) -> str:
    return "pass" if verdict(score, rubric.threshold) else "fail"


def strata_of(run: Run, metric: str, backend: str, rubric: Rubric) -> dict[str, list[Case]]:
    """The run's cases ``backend`` scored for ``metric``, by the judge's verdict (``pass``, ``fail``),
    in id order."""
    scores = {s.case_id: s for s in run.scores if s.metric == metric and s.backend == backend
              and s.status == "scored"}
    sides: dict[str, list[Case]] = {"pass": [], "fail": []}
    for case in sorted((c for c in run.cases if c.id in scores), key=lambda c: c.id):
        sides[_verdict(scores[case.id], rubric)].append(case)
    return sides


def sample_for_labels(run: Run, metric: str, backend: str, rubric: Rubric, n: int,
                      seed: int = 0) -> list[tuple[Case, str]]:
    """Up to ``n`` (case, judge verdict) pairs, stratified as the module docstring says."""
    sides = strata_of(run, metric, backend, rubric)
    rng = random.Random(seed)
    take = {"pass": min(len(sides["pass"]), n // 2 + (n % 2 if rng.random() < 0.5 else 0))}
    take["fail"] = min(len(sides["fail"]), n - take["pass"])
    take["pass"] = min(len(sides["pass"]), n - take["fail"])
    picked = [(c, side) for side in ("pass", "fail") for c in rng.sample(sides[side], take[side])]
    rng.shuffle(picked)  # the grader does not see the strata
    return picked


_SCRIPT = r"""
(function () {
  var doc = document;
  var cases = Array.prototype.slice.call(doc.querySelectorAll("section.case"));
  var status = doc.getElementById("status");
  function answered(sec) {
    var mode = sec.dataset.mode;
    if (mode === "per_chunk") {
      var groups = sec.querySelectorAll("fieldset.chunk");
      var levels = [];
      for (var i = 0; i < groups.length; i++) {
        var c = groups[i].querySelector("input:checked");
        if (!c) { return null; }
        levels.push(parseInt(c.value, 10));
      }
      return levels;
    }
    var checked = sec.querySelector("fieldset.grade input:checked");
    return checked ? parseInt(checked.value, 10) : null;
  }
  function label(sec) {
    var got = answered(sec);
    if (got === null) { return null; }
    var mode = sec.dataset.mode, passAt = parseInt(sec.dataset.passAt, 10);
    var passMark = parseFloat(sec.dataset.passMark);
    var lo = parseInt(sec.dataset.lo, 10), hi = parseInt(sec.dataset.hi, 10);
    var rec = {case_id: sec.dataset.caseId, metric: sec.dataset.metric};
    var value, level = null;
    if (mode === "per_chunk") {
      var rel = got.filter(function (v) { return v >= passAt; }).length;
      value = got.length ? rel / got.length : 0;
      rec.label = value >= passMark ? "pass" : "fail";
      rec.chunks = got.map(function (v) { return v >= passAt; });
    } else if (mode === "claims") {
      value = got; rec.label = got === 1 ? "pass" : "fail";
    } else {
      level = got; value = (got - lo) / (hi - lo); rec.label = got >= passAt ? "pass" : "fail";
    }
    rec.value = value; rec.level = level;
    rec.rubric = sec.dataset.rubric; rec.rubric_hash = sec.dataset.rubricHash;
    rec.stratum = sec.dataset.stratum; rec.stratum_size = parseInt(sec.dataset.stratumSize, 10);
    rec.stratum_backend = doc.body.dataset.stratumBackend;
    rec.stratum_threshold = parseFloat(doc.body.dataset.stratumThreshold);
    var note = sec.querySelector("textarea").value.trim();
    if (note) { rec.note = note; }
    return rec;
  }
  function progress() {
    var done = cases.filter(function (s) { return answered(s) !== null; }).length;
    doc.getElementById("progress").textContent = done + " of " + cases.length + " graded";
    return done;
  }
  doc.addEventListener("change", progress);
  doc.getElementById("save").addEventListener("click", function () {
    var recs = cases.map(label).filter(function (r) { return r !== null; });
    var text = recs.map(function (r) { return JSON.stringify(r); }).join("\n") + (recs.length ? "\n" : "");
    var a = doc.createElement("a");
    a.href = URL.createObjectURL(new Blob([text], {type: "application/x-ndjson"}));
    a.download = doc.body.dataset.filename;
    doc.body.appendChild(a);
    a.click();
    a.remove();
    status.textContent = "Saved " + recs.length + " label(s) to " + a.download +
      (recs.length < cases.length ? " (" + (cases.length - recs.length) + " not graded yet)" : "") + ".";
    doc.documentElement.setAttribute("data-saved", String(recs.length));
  });
  progress();
  doc.documentElement.setAttribute("data-label-ready", "1");
})();
"""

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: 1rem 1.5rem 4rem;
       color: #1d1d1f; }
header { border-bottom: 1px solid #ddd; margin-bottom: 1rem; }
.rubric { background: #f6f7f9; padding: .6rem 1rem; border-radius: 6px; }
section.case { border: 1px solid #ddd; border-radius: 6px; padding: .2rem 1rem 1rem; margin: 1.2rem 0; }
h2 { font-size: 1.05rem; } h3 { font-size: .9rem; margin: .9rem 0 .2rem; color: #555; }
.text { white-space: pre-wrap; margin: 0; }
ol.passages li { white-space: pre-wrap; margin-bottom: .4rem; }
fieldset { border: 1px solid #ccc; border-radius: 6px; margin-top: .8rem; }
label.level { display: block; margin: .25rem 0; } .muted { color: #666; font-size: .9em; }
textarea { width: 100%; min-height: 2.5rem; margin-top: .5rem; }
.bar { position: sticky; bottom: 0; background: #fff; border-top: 1px solid #ddd; padding: .6rem 0; }
button { font-size: 1rem; padding: .35rem 1rem; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Label {{ rubric.name }}: {{ run_name }}</title>
<style>{{ style }}</style>
</head>
<body data-filename="labels-{{ rubric.name }}.jsonl" data-stratum-backend="{{ backend }}"
  data-stratum-threshold="{{ rubric.threshold }}">
<header>
<h1>Label {{ rubric.name }}</h1>
<p class="muted">{{ items|length }} case(s) of {{ run_name }}, drawn at random from the cases the
judge passed and those it failed, half each (seed {{ seed }}); rubric hash {{ rubric.hash }}.
Grade each case by the rubric alone, from what is
shown; then press <em>Save labels</em> and keep the file next to the golden set.</p>
<div class="rubric"><p><strong>{{ rubric.question }}</strong></p>
{% if rubric.mode == "claims" %}<p>Pass: every claim the answer makes is supported by the passages.
Fail: at least one claim is contradicted by them or not found in them.</p>
{% else %}<ul>{% for lv in rubric.levels %}
<li><strong>{{ lv.value }} = {{ lv.label }}</strong>: {{ lv.description }}
{% for ex in lv.examples %}<br><span class="muted">Example: {{ ex }}</span>{% endfor %}</li>{% endfor %}</ul>
<p class="muted">{% if rubric.mode == "per_chunk" %}A passage at level {{ rubric.pass_at }} or above is
relevant; a case passes when at least half its passages are.
{% else %}Levels {{ rubric.pass_at }} and above pass.{% endif %}</p>{% endif %}
</div>
</header>
<main>
{% for case in items %}{% set i = loop.index %}
<section class="case" data-case-id="{{ case.id }}" data-metric="{{ rubric.name }}"
  data-mode="{{ rubric.mode }}" data-pass-at="{{ rubric.pass_at if rubric.pass_at is not none else 1 }}"
  data-pass-mark="{{ rubric.threshold }}"
  data-lo="{{ lo }}" data-hi="{{ hi }}" data-rubric="{{ rubric.name }}" data-rubric-hash="{{ rubric.hash }}"
  data-stratum="{{ strata[case.id] }}" data-stratum-size="{{ sizes[strata[case.id]] }}">
<h2>{{ i }}. {{ case.id }}
{% if case.tags %} <span class="muted">({{ case.tags|join(", ") }})</span>{% endif %}</h2>
{% for f in rubric.fields %}
{% if f == "contexts" and rubric.mode != "per_chunk" %}<h3>Context passages (as the generator saw them)</h3>
<ol class="passages">{% for ch in case.contexts %}<li>{{ ch.text }}</li>{% endfor %}</ol>
{% elif f == "question" %}<h3>Question</h3><p class="text">{{ case.question }}</p>
{% elif f == "reference" %}<h3>Reference answer</h3><p class="text">{{ case.reference or "" }}</p>
{% elif f == "answer" %}<h3>Answer</h3><p class="text">{{ case.answer or "" }}</p>
{% endif %}{% endfor %}
{% if rubric.mode == "per_chunk" %}
{% for ch in case.contexts %}{% set j = loop.index %}
<fieldset class="chunk"><legend>Passage {{ j }}</legend><p class="text">{{ ch.text }}</p>
{% for lv in rubric.levels %}<label class="level">
<input type="radio" name="c{{ i }}-p{{ j }}" value="{{ lv.value }}"> {{ lv.value }} = {{ lv.label }}</label>
{% endfor %}</fieldset>
{% endfor %}
{% elif rubric.mode == "claims" %}
<fieldset class="grade"><legend>{{ rubric.question }}</legend>
<label class="level"><input type="radio" name="c{{ i }}" value="1"> Pass: every claim is supported</label>
<label class="level"><input type="radio" name="c{{ i }}" value="0"> Fail: a claim is contradicted or not
found</label>
</fieldset>
{% else %}
<fieldset class="grade"><legend>{{ rubric.question }}</legend>
{% for lv in rubric.levels %}<label class="level"><input type="radio" name="c{{ i }}" value="{{ lv.value }}">
<strong>{{ lv.value }} = {{ lv.label }}</strong> <span class="muted">{{ lv.description }}</span></label>
{% endfor %}
</fieldset>
{% endif %}
<textarea aria-label="note on {{ case.id }}" placeholder="Note (optional)"></textarea>
</section>
{% endfor %}
</main>
<div class="bar"><button id="save" type="button">Save labels</button> <span id="progress"></span>
<span id="status" role="status"></span></div>
<script>{{ script }}</script>
</body>
</html>
"""


def _hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_page(rubric: Rubric, picked: Sequence[tuple[Case, str]], run_name: str, seed: int,
                sizes: dict[str, int], backend: str) -> str:
    """The labelling page for the ``picked`` (case, stratum) pairs, ``sizes`` the cases of the run in
    each stratum, ``backend`` the one whose verdicts made the strata (every text escaped; see the
    module docstring)."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src '{_hash(_SCRIPT)}'; base-uri 'none'; form-action 'none'")
    values = rubric.values or (0, 1)
    return env.from_string(_PAGE).render(
        rubric=rubric, items=[c for c, _ in picked], run_name=run_name, seed=seed, lo=values[0],
        hi=values[-1], strata={c.id: side for c, side in picked}, sizes=sizes, backend=backend,
        csp=Markup(csp), style=Markup(_STYLE), script=Markup(_SCRIPT))


def label_summary(picked: Sequence[tuple[Case, str]]) -> dict[str, Any]:
    """How many of each judge verdict and tag the sample holds."""
    tags: dict[str, int] = defaultdict(int)
    for c, _ in picked:
        for t in c.tags:
            tags[t] += 1
    return {"n": len(picked), "pass": sum(v == "pass" for _, v in picked),
            "fail": sum(v == "fail" for _, v in picked), "tags": dict(sorted(tags.items()))}
