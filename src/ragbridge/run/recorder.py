"""The recorder: where each score of a run goes as it arrives, and the counts the manifest keeps.

The runner makes one `Recorder` per session and hands its ``record`` to the executor; the recorder
fills in each score's judge usage (from the gateway, which it reads but does not own), adds it to the
running totals, appends it to the run folder's buffer, passes it to ``on_score`` and advances the
progress display. It flushes the folder's buffer at the end of each batch and at least every
`FLUSH_SECONDS` (so a run killed outright loses at most what it scored since), also while no score
comes (`Recorder.flushing`: a backend still at work holds back none of the others'), and rewrites the
manifest with the counts so far at the folder's heartbeat. `Recorder.finish` sets the session's
status and counts on the manifest; the runner, which opened the folder, the gateway and the caches,
closes them.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..backend import RunOptions
from ..formats.batches import CaseBatch
from ..formats.source import CaseSource
from ..schema import RunManifest, Score, ScoreBlock
from .folder import JUDGE_COUNTS, RunFolder, now
from .summary import Totals

if TYPE_CHECKING:
    from .score_cache import ScoreReuse

__all__ = ["FLUSH_SECONDS", "Recorder"]

#: the longest a recorded score waits in the write buffer before it is flushed to disk
FLUSH_SECONDS = 1.0


class Recorder:
    """Where each score goes as it arrives: its judge usage is filled in, it is added to the running
    totals, appended to the folder's buffer, passed to ``on_score`` and counted by the progress bar
    (and, for a run without a folder, kept: the last per key wins); the buffer is flushed at the end
    of each batch and every `FLUSH_SECONDS`, and every `HEARTBEAT_SECONDS` the manifest is rewritten
    with the counts so far. The scores an earlier session kept join the totals batch by batch
    (`start_batch`), with their case's tags."""

    def __init__(self, manifest: RunManifest, folder: Optional[RunFolder], gateway: Any,
                 on_score: Optional[Callable[[Score], None]], bar: Any, *, keep: bool,
                 duplicates: int, target_errors: int, judge_model: Optional[str], options: RunOptions,
                 reuse: Optional[ScoreReuse] = None):
        self.manifest, self.folder, self.gateway, self.reuse = manifest, folder, gateway, reuse
        self.on_score, self.bar = on_score, bar
        self.totals = Totals()
        self.kept: Optional[dict[tuple[str, str, str, int], Score]] = {} if keep else None
        # what the run's earlier sessions counted (a resumed run), to add this session's to
        self.earlier_judge = dict(manifest.counts.get("judge", {}))
        self.earlier_wall = dict(manifest.timing.get("wall_seconds", {}))
        self.started = time.monotonic()
        self.last_score_at: dict[str, float] = {}  # per backend, seconds from the start of scoring
        self.n_duplicates, self.n_target_errors = duplicates, target_errors
        self.judge_model, self.generator_model = judge_model, options.generator_model
        self.self_judged: list[str] = []  # the generator models of the cases judged by their own model
        self.tags_of: dict[str, list[str]] = {}
        #: this session's errored scores by (backend, cause): how many, and the first one's reason
        self.failures: dict[tuple[str, str], dict[str, Any]] = {}
        self._flushed_at = time.monotonic()
        self._unflushed = False

    async def flushing(self) -> None:
        """Flush what was recorded every `FLUSH_SECONDS` until cancelled (run beside a batch's
        scoring: the scores that came stay no longer in the buffer when no other follows)."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            if self.folder and self._unflushed:
                self._flush(time.monotonic())

    def start_batch(self, batch: CaseBatch, kept: dict) -> None:
        """A batch begins: its cases' tags, its scores an earlier session kept (``kept``) into the
        totals, its self-judged cases."""
        ids = batch.ids
        if self.folder:
            self.folder.start_batch(batch)
        self.tags_of = {cid: tags for i, cid in enumerate(ids) if (tags := batch.tags(i))}
        self.totals.add_kept(kept.values(), self.tags_of)
        if self.judge_model is not None:
            for i in range(len(batch)):
                model = self.generator_model or batch.metadata(i).get("generator_model")
                if model and _same_model(model, self.judge_model):
                    self.self_judged.append(model)

    def record(self, item: Score | ScoreBlock) -> int:
        """Record one score or block; returns how many scores that was."""
        now_s = time.monotonic()
        if isinstance(item, ScoreBlock):
            self.last_score_at[item.backend] = now_s - self.started
            self.totals.add_block(item, self.tags_of)
            if self.folder:
                self.folder.append_block(item)
            if self.on_score or self.kept is not None:
                for score in item.scores():
                    self._hand_on(score)
            n = len(item)
        else:
            item = self._usage(item)
            if self.reuse is not None:
                self.reuse.record(item, self.gateway is not None and self.gateway.stub_detected)
            self.last_score_at[item.backend] = now_s - self.started
            self.totals.add(item, self.tags_of.get(item.case_id, ()))
            if self.folder:
                self.folder.append(item)
            self._hand_on(item)
            n = 1
        if self.bar:
            self.bar.advance(n, int(not isinstance(item, ScoreBlock) and item.status == "error"))
        self._unflushed = True
        if self.folder and now_s - self._flushed_at >= FLUSH_SECONDS:
            self._flush(now_s)
        return n

    def _usage(self, score: Score) -> Score:
        """``score`` with its repeat index and judge usage; a score the spent budget refused becomes
        not run."""
        gateway = self.gateway
        tag = (score.backend, score.metric, score.case_id, score.repeat)
        if gateway is not None and score.judge_calls == 0:
            usage = gateway.usage(*tag)
            score.judge_calls = usage.calls + usage.cache_hits
            score.prompt_tokens = usage.prompt_tokens
            score.completion_tokens = usage.completion_tokens
            if score.judge_calls and gateway.config.prices:
                score.cost = usage.known_cost
        if gateway is not None and gateway.refused(*tag):
            # the budget was spent before this score's calls could all be made: not run, not failed
            # (the answers it did get stay cached, for the run that resumes with a larger budget)
            score = Score(case_id=score.case_id, metric=score.metric, backend=score.backend,
                          repeat=score.repeat, native_metric=score.native_metric, not_run=True,
                          reason=f"not run: the run's judge budget ({gateway.budget.describe()}) was spent",
                          judge_calls=score.judge_calls, prompt_tokens=score.prompt_tokens,
                          completion_tokens=score.completion_tokens, cost=score.cost, seconds=score.seconds)
        elif score.error:
            self._failed(score, gateway.failure(*tag) if gateway is not None else None)
            if gateway is not None:
                gateway.forget(*tag)
        return score

    def _failed(self, score: Score, failure: Optional[tuple[str, str]]) -> None:
        """Count an errored score under its backend and cause (`ragbridge.judge.causes`)."""
        from ..judge.causes import cause_of

        cause, reason = cause_of(score.error or "", failure)
        entry = self.failures.get((score.backend, cause))
        if entry is None:
            entry = self.failures[(score.backend, cause)] = {"scores": 0, "reason": reason[:500],
                                                             "case_id": score.case_id, "metric": score.metric}
        entry["scores"] += 1

    def _hand_on(self, score: Score) -> None:
        if self.kept is not None:
            self.kept[score.repeat_key] = score
        if self.on_score:
            self.on_score(score)

    def end_batch(self) -> None:
        if self.folder:
            self._flush(time.monotonic())
        elif self.reuse is not None:
            self.reuse.cache.commit()

    def _flush(self, now_s: float) -> None:
        self._unflushed = False
        self.folder.flush()
        if self.reuse is not None:
            self.reuse.cache.commit()  # after the scores: a stored score is one the folder holds
        self._flushed_at = now_s
        if self.folder.heartbeat_due:
            self.update_counts()
            self.folder.heartbeat(self.manifest)

    def ordered(self, source: CaseSource) -> list[Score]:
        """The kept scores by backend, metric, case order and repeat (a run without a folder)."""
        order = {cid: i for i, cid in enumerate(cid for b in source.batches() for cid in b.ids)}
        return sorted(self.kept.values(),
                      key=lambda s: (s.backend, s.metric, order.get(s.case_id, 0), s.repeat))

    def update_counts(self) -> None:
        manifest = self.manifest
        manifest.counts.update(self.totals.counts(), duplicate_chunk_ids=self.n_duplicates)
        if self.n_target_errors:
            manifest.counts["target_errors"] = self.n_target_errors
        if self.gateway is not None:
            u = self.gateway.usage()
            judge = {k: (self.earlier_judge.get(k) or 0) + getattr(u, k) for k in JUDGE_COUNTS}
            invalid = self.earlier_judge.get("invalid_usage", 0) + u.invalid_usage
            if invalid:  # calls whose reported tokens could not be true: their tokens and cost unknown
                judge["invalid_usage"] = invalid
            judge["cost"] = round(judge["cost"], 10)
            manifest.counts["cost"] = _cost_counts(self.totals, self.gateway.config, judge)
            if manifest.counts["cost"]["total"] is None:  # no price for some call: the cost is unknown
                judge["cost"] = None
            manifest.counts["judge"] = judge
        if self.reuse is not None:
            manifest.counts["score_cache"] = self.reuse.counts()
        if self.failures:
            manifest.counts["failures"] = self.failure_rows()
        else:
            manifest.counts.pop("failures", None)
        if self.self_judged and manifest.judge is not None:
            manifest.judge["self_judging"] = {"generator_model": self.self_judged[0],
                                              "cases": len(self.self_judged)}
        spans = {b: round(self.earlier_wall.get(b, 0.0) + self.last_score_at.get(b, 0.0), 3)
                 for b in {**self.earlier_wall, **self.last_score_at}}
        manifest.timing = {**manifest.timing, "wall_seconds": spans}

    def failure_rows(self) -> list[dict[str, Any]]:
        """This session's errored scores per backend and cause, the most first: how many, the first
        one's case, metric and reason, and the fix (`ragbridge.judge.causes`)."""
        from ..judge.causes import CAUSES, fix

        from .isolated import split_name

        gateway = self.gateway
        config = gateway.config if gateway is not None else None
        # a library version's backend (NAME==VERSION) is set by NAME's options
        rows = [{"backend": backend, "cause": cause, "what": CAUSES[cause], **entry,
                 "fix": fix(cause, split_name(backend)[0], config,
                            gateway.structured_output_for(backend) if gateway is not None else "auto")}
                for (backend, cause), entry in self.failures.items()]
        return sorted(rows, key=lambda r: (-r["scores"], r["backend"], r["cause"]))

    def finish(self, status: str) -> RunManifest:
        """The session's end: the manifest with its status, end time (kept from the earlier session
        when this one recorded no score) and final counts, the kept scores of the cases it did not
        reach among them (``status``:
        ``complete``, ``interrupted``, ``incomplete`` or ``dry-run``; a run with scores left unrun by
        the budget is ``incomplete``). Called once scoring has stopped; writes nothing."""
        kept = self.folder.kept if self.folder else None
        for scores, tags_of in kept.rest() if kept is not None else ():  # of cases not reached
            self.totals.add_kept(scores.values(), tags_of)
        manifest = self.manifest
        earlier = self.folder.earlier_finished_at if self.folder else None
        # a session that scored nothing (a complete run run again) keeps the end of the one that did
        manifest.finished_at = now() if self.last_score_at or earlier is None else earlier
        manifest.status = status
        self.update_counts()
        if manifest.counts.get("not_run") and status != "dry-run":
            manifest.status = "incomplete"
        if self.gateway is not None and self.gateway.budget is not None:
            budget = manifest.counts.get("budget", {})
            manifest.counts["budget"] = {**budget, "spent": self.gateway.budget_spent}
        if status == "dry-run" and self.gateway is not None:
            manifest.counts["planned"] = _planned(self.gateway)
        if (self.gateway is not None and self.gateway.stub_detected) or (self.reuse and self.reuse.stub):
            # every judged score of this run came from ragbridge's stub judge, not a model
            manifest.judge = {**(manifest.judge or {}), "stub": True}
        return manifest


def _planned(gateway: Any) -> dict[str, dict[str, Any]]:
    """A dry run's ``counts.planned``: per ``backend:metric``, the calls it would make, the cache hits
    and their cost (None: unknown)."""
    priced = bool(gateway.config.prices)
    out: dict[str, dict[str, Any]] = {}
    for tag, u in sorted(gateway.usage_by_tag().items(), key=lambda kv: str(kv[0])):
        if tag.backend is None:
            continue
        row = out.setdefault(f"{tag.backend}:{tag.metric}",
                             {"calls": 0, "cache_hits": 0, "cost": 0.0 if priced else None})
        row["calls"] += u.calls
        row["cache_hits"] += u.cache_hits
        if row["cost"] is not None:
            row["cost"] = None if u.unpriced else round(row["cost"] + u.cost, 10)
    return out


def _cost_counts(totals: Totals, config: Any, judge: dict[str, Any]) -> dict[str, Any]:
    """``counts.cost``: the run's judge cost (``total``: every upstream call of every session, None
    when a call's model has no price) and, per backend and per ``backend:metric``, the cost of the
    scores kept (a failed score's calls are in the total only)."""
    by_backend, by_metric = totals.costs()
    return {"currency": config.currency, "priced": bool(config.prices),
            "total": None if judge.get("unpriced") or not config.prices else judge.get("cost", 0.0),
            "by_backend": by_backend, "by_metric": by_metric}


def _same_model(a: Any, b: Any) -> bool:
    """Whether two model names name the same model (case-insensitively, without a ``provider/``)."""
    def norm(model: Any) -> str:
        return str(model).strip().casefold().rsplit("/", 1)[-1]

    return norm(a) == norm(b)
