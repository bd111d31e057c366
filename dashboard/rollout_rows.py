"""Which rows of the run's large frames a view draws: the rollouts the incidents name, the
rollout lanes a filter picks, the rows on those lanes and the incidents' evidence rows.

Rule: a full pass over a large frame's text column (a 10M-span run holds 0.4-0.8M tries,
deadlines, parked intervals and completions; a pass over one is ~10-15 ms idle) is made at most
once per frame version for each question, and a narrower question is answered from the rows a
wider one already found: the lanes of a filter are some of the rollouts the incidents name, so
their tries are picked among those rollouts' tries, never among every try again. Everything is
remembered through ``DataStore.derived`` (per frame version), so a new frame version, a new run
or a new session starts afresh. A Gym-side row (parked interval, completion) lands on its prompt
group's lane (``timeline_plot.group_rollout_ids``); the groups are looked up for the prompts
asked about only, an integer pass over the tries, not for every prompt of the run.
"""

from __future__ import annotations

import pandas as pd

from rolloutscope.store.store import as_text

from rolloutscope.dashboard.selection import integer_lookup, integers, is_in, rows_where
from rolloutscope.dashboard.timeline_plot import group_rollout_ids, prompt_groups

GYM_SIDE = ("parked_intervals", "completions")  # rows named by Gym, drawn on the RL group's lane
ROLLOUT_FRAMES = ("rollout_attempts", "deadlines", *GYM_SIDE)
MAX_ROLLOUT_LANES = 120


class RolloutRows:
    """The DataStore's row selections (mixed into ``DataStore``: it reads ``frames``,
    ``frame_versions``, ``derived`` and the filters)."""

    # -- prompt groups -------------------------------------------------------------------------
    def prompt_groups(self) -> pd.Series:
        """``prompt_groups`` of the run's tries (``prompt_idx`` -> its group's rollout id)."""
        return self.derived(("prompt_groups",), ("rollout_attempts",),
                            lambda: prompt_groups(self.frames["rollout_attempts"]))

    def prompt_groups_of(self, prompts: pd.Series) -> pd.Series:
        """``prompt_groups`` for ``prompts`` only: their tries are found by an integer lookup,
        and of each prompt the first try listed names the group, as for every prompt. At 10M
        spans grouping every prompt took ~40 ms and mapping rows through it ~30 ms more."""
        att = self.frames["rollout_attempts"]
        wanted = pd.unique(prompts.dropna().to_numpy()) if len(prompts) else []
        if not len(wanted) or not len(att) or "prompt_idx" not in att:
            return pd.Series([], dtype=object, index=pd.Index([], name="prompt_idx"),
                             name="rollout_id")
        hit = None
        if pd.api.types.is_integer_dtype(att.prompt_idx.dtype):
            hit = integer_lookup(self._try_prompts(), wanted)
        if hit is None:
            hit = is_in(att.prompt_idx, wanted)
        return prompt_groups(rows_where(att[["rollout_id", "prompt_idx"]], hit))

    def _try_prompts(self) -> tuple:
        """The tries' prompt indices as ``selection.integers`` (once per version of the tries:
        a first render looks prompts up among them four times)."""
        return self.derived(("try_prompts",), ("rollout_attempts",),
                            lambda: integers(self.frames["rollout_attempts"].prompt_idx))

    def lane_prompts(self, ids: frozenset[str]) -> pd.Index:
        """The prompts whose group is one of ``ids`` (the parked intervals and completions of
        those lanes are theirs): a prompt whose group is one of ids has its first try among
        ids' tries."""
        def compute() -> pd.Index:
            tries = self.rows_of_rollouts("rollout_attempts", ids)
            groups = self.prompt_groups_of(tries.prompt_idx)
            return groups.index[is_in(groups, ids)]
        return self.derived(("lane_prompts", ids), ("rollout_attempts",), compute)

    def grouped_rollout_ids(self, rows: pd.DataFrame) -> pd.Series:
        """``group_rollout_ids`` of rows of a Gym-side frame (parked intervals, completions),
        with the groups of their prompts only."""
        attempts = self.frames["rollout_attempts"]
        if not len(rows) or not len(attempts) or "prompt_idx" not in rows:
            return group_rollout_ids(rows, attempts)
        return group_rollout_ids(rows, attempts, self.prompt_groups_of(rows.prompt_idx))

    # -- the rows on some lanes ----------------------------------------------------------------
    def rows_of_rollouts(self, name: str, ids: set[str]) -> pd.DataFrame:
        """The rows of ``name`` drawn on the lanes of ``ids``, their ``rollout_id`` the lane's
        (a Gym-side row's prompt group, ``grouped_rollout_ids``), in the frame's order."""
        df = self.frames[name]
        if not len(df) or not ids:
            return df.iloc[:0]
        ids = frozenset(ids)
        return self.derived(("rollout_rows", name, ids), self._versions_of(name),
                            lambda: self._rows_of_rollouts(name, ids))

    def _versions_of(self, name: str) -> tuple[str, ...]:
        return (name, "rollout_attempts") if name in GYM_SIDE else (name,)

    def _rows_of_rollouts(self, name: str, ids: frozenset[str]) -> pd.DataFrame:
        wider = self._wider_rows(name, ids)
        if wider is not None:  # rows already found for more lanes: these are among them
            return rows_where(wider, is_in(wider.rollout_id, ids))
        df = self.frames[name]
        if name not in GYM_SIDE or "prompt_idx" not in df:
            return rows_where(df, is_in(df.rollout_id, ids))
        # a row lands on a lane of ids through its prompt's group, or (a prompt no try names)
        # its own id: keep those rows, then map only them
        sub = rows_where(df, is_in(df.prompt_idx, self.lane_prompts(ids))
                         | is_in(df.rollout_id, ids))
        sub = sub.assign(rollout_id=self.grouped_rollout_ids(sub))
        return rows_where(sub, is_in(sub.rollout_id, ids))

    def _wider_rows(self, name: str, ids: frozenset[str]) -> pd.DataFrame | None:
        """The fewest rows of ``name`` remembered for a superset of ``ids`` (this frame
        version), or None."""
        mark = (self.run_id, *(self.frame_versions[f] for f in self._versions_of(name)))
        best = None
        for key, rows in list(self._derived.items()):
            what = key[0]
            if (what[:2] == ("rollout_rows", name) and key[1:] == mark and what[2] != ids
                    and ids <= what[2] and (best is None or len(rows) < len(best))):
                best = rows
        return best

    # -- what the incidents name ---------------------------------------------------------------
    def all_evidence(self) -> frozenset[str]:
        """Every span id some incident names as evidence."""
        return self.derived(("all_evidence",), ("incidents",), lambda: frozenset(
            str(e) for ev in self.frames["incidents"].evidence for e in listish(ev)))

    def evidence_rows(self, name: str) -> pd.DataFrame:
        """The rows of frame ``name`` that some incident names as evidence: one incident's
        evidence is looked up among these, not among every row (at 10M spans a scan of the
        tries' span ids is ~10 ms, and a first render of the Incident tab asked for a dozen)."""
        return self.derived(("evidence_rows", name), (name, "incidents"),
                            lambda: self._evidence_rows(name))

    def _evidence_rows(self, name: str) -> pd.DataFrame:
        df = self.frames[name]
        if not len(df) or "span_id" not in df:
            return df.iloc[:0]
        return rows_where(df, is_in(df.span_id, self.all_evidence()))

    def evidence_frames(self) -> dict[str, pd.DataFrame]:
        """``evidence_rows`` of every frame (what an incident's story reads)."""
        return {name: self.evidence_rows(name) for name in self.frames}

    def incident_rollouts(self, incident_id: str | None = None) -> set[str]:
        """Rollouts an incident names (``incident_id``, else the selected one, else every
        incident): through an evidence span, or as its subject."""
        incident_id = incident_id or self.incident
        return set(self.derived(("incident_rollouts", incident_id),
                                ("incidents", *ROLLOUT_FRAMES),
                                lambda: self._incident_rollouts(incident_id)))

    def _incident_rollouts(self, incident_id: str | None) -> set[str]:
        inc = self.frames["incidents"]
        if incident_id:
            inc = inc[inc.incident_id.astype(str) == incident_id]
        spans = {str(e) for ev in inc.evidence for e in listish(ev)}
        out: set[str] = set()
        hits = {}
        for name in ROLLOUT_FRAMES:
            df = self.evidence_rows(name)
            if len(df) and spans:
                hits[name] = df[is_in(df.span_id, spans)] if incident_id else df
        gym = [hits[name] for name in GYM_SIDE if name in hits and "prompt_idx" in hits[name]]
        # the Gym-side rows' prompt groups in one lookup among the tries
        groups = self.prompt_groups_of(pd.concat([g.prompt_idx for g in gym])) if gym else None
        for name, hit in hits.items():
            ids = hit.rollout_id if name not in GYM_SIDE else group_rollout_ids(
                hit, self.frames["rollout_attempts"], groups)
            out.update(ids.dropna().astype(str))
        subjects = {s.split(" try ")[0] for s in inc.subject.dropna().astype(str)}
        if len(self.frames["rollout_attempts"]) and subjects - out:
            # the tries of every rollout named, subjects or not, in one pass: the lanes drawn
            # for these rollouts take their tries from these rows
            tries = self.rows_of_rollouts("rollout_attempts", out | subjects)
            out.update(as_text(tries.rollout_id[is_in(tries.rollout_id, subjects)]))
        return out

    # -- the lanes a filter picks --------------------------------------------------------------
    def rollout_lanes(self, cap: int = MAX_ROLLOUT_LANES) -> tuple[list[str], int]:
        """The rollout lanes the timeline draws under the current filter, and how many match."""
        ids, total = self.derived(
            ("rollout_lanes", cap, self.rollout_filter, self.failure_class, self.incident),
            ("incidents", *ROLLOUT_FRAMES), lambda: self._rollout_lanes(cap))
        return list(ids), total

    def _rollout_lanes(self, cap: int) -> tuple[list[str], int]:
        att = self.frames["rollout_attempts"]
        mode = self.rollout_filter
        if mode == "in incidents":
            sel = self.rows_of_rollouts("rollout_attempts", self.incident_rollouts())
        elif mode == "failed":
            sel = att[att.outcome.isin(["failed", "cancelled"])]
        elif mode == "redispatched":
            sel = att[att.attempt.fillna(0) > 0]
        elif mode == "parked":
            parked = set(as_text(self.frames["parked_intervals"].rollout_id.dropna()))
            sel = self.rows_of_rollouts("rollout_attempts", parked)
        elif mode == "open":
            sel = att[att.outcome == "open"]
        else:
            sel = att
        if self.failure_class != "any":
            sel = sel[sel.failure_class == self.failure_class]
        if not len(sel):
            return [], 0
        now = self.last_seen_ns()
        ids = as_text(sel.rollout_id)
        span = (sel.end_ns.fillna(now) - sel.start_ns).groupby(ids).sum()
        first = sel.start_ns.groupby(ids).min()
        chosen = span.sort_values(ascending=False).index[:cap]
        ordered = first.loc[chosen].sort_values().index.tolist()
        return ordered, int(span.size)


def listish(v) -> list:
    """A list-valued cell (an incident's evidence) as a list; a missing one as []."""
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return []
    return list(v)
