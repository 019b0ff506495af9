"""``bench study status NAME``: what the store holds of a study (done, running, missing) and how long the missing
work should take, read from the store and the study's declaration; nothing is run.

With the data at hand each configuration is found by its exact key (its resolution: calibration and the data's
content fingerprint). Without them (a fresh clone, another machine) the store's runs are matched to the declaration by
their tags (method, recipe, seed, model, and the budget's (epsilon, delta, q, T); an audit by its canary kind and
count) and the answer says so: a run of other data under the same name would count."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from inputdp.core import names
from inputdp.core.config import PerfFlags
from inputdp.core.errors import DataMissing, one_line

from .presets import PRESETS
from .resolve import ResolvedRun
from .studies import configurations, speed_key
from .study_audits import _label, audit_key
from .tracking import default_tracking_uri, is_alive, open_store, runs_with_key, sqlite_path

#: minutes a speed measurement takes when the store holds none (50 interleaved steps of five methods, and warm-up)
SPEED_MINUTES = 5.0


@dataclass
class StudyStatus:
    """What the store holds of a study: each configuration and audit done (FINISHED), running or missing, the
    missing work's estimated minutes (a range) and how both were found."""

    done: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: (fewest, most) minutes the missing work should take on the machine the timings come from
    minutes: tuple[float, float] = (0.0, 0.0)
    #: where the estimate comes from, and how the store was matched where the data are not at hand
    notes: list[str] = field(default_factory=list)
    #: the missing work by kind ("training METHOD", "audit CANARY_KIND", "speed"): a count each
    missing_kinds: Counter = field(default_factory=Counter)

    def add(self, label: str, runs: list) -> bool:
        """File ``label`` by the runs stored under it; True where it is missing."""

        if any(r.info.status == "FINISHED" for r in runs):
            self.done.append(label)
        elif any(r.info.status == "RUNNING" and is_alive(r) for r in runs):
            self.running.append(label)
        else:
            self.missing.append(label)
            return True
        return False


def _unfingerprinted(match_key: str) -> str:
    """A match key without the data's content fingerprint ("mnist@21e6...|eps=1|..." -> "mnist|eps=1|...")."""
    return re.sub(r"@[0-9a-f]+\|", "|", str(match_key), count=1)


def _train_tag_key(method: str, variant: str, seed, match_key: str, model: str) -> tuple:
    return ("train", method, variant or "", str(seed), _unfingerprinted(match_key), model)


def _audit_tag_key(method: str, variant: str, match_key: str, model: str, canary_kind: str, canaries) -> tuple:
    return ("audit", method, variant or "", _unfingerprinted(match_key), model, canary_kind, str(canaries))


def _by_tags(stored: list) -> dict[tuple, list]:
    """The experiment's runs indexed by what the declaration can name without the data."""
    out: dict[tuple, list] = {}
    for r in stored:
        t = r.data.tags
        kind = t.get(names.TAG_KIND, "train")
        if kind == "train":
            key = _train_tag_key(t.get(names.TAG_METHOD, ""), t.get(names.TAG_VARIANT, ""), t.get(names.TAG_SEED, ""),
                                 t.get(names.TAG_MATCH_KEY, ""), t.get(names.TAG_MODEL, ""))
        elif kind == names.KIND_AUDIT:
            parts = t.get(names.TAG_CONFIG_KEY, "").split(":")  # audit:KEY:KIND:COUNT:...
            key = _audit_tag_key(t.get(names.TAG_METHOD, ""), t.get(names.TAG_VARIANT, ""),
                                 t.get(names.TAG_MATCH_KEY, ""), t.get(names.TAG_MODEL, ""),
                                 t.get(names.TAG_CANARY_KIND, ""), parts[3] if len(parts) > 3 else "")
        else:
            continue
        out.setdefault(key, []).append(r)
    return out


def _minutes(runs: list) -> float | None:
    """The median wall time in minutes of the FINISHED runs among ``runs``; None if there is none."""
    times = [(r.info.end_time - r.info.start_time) / 60000 for r in runs
             if r.info.status == "FINISHED" and r.info.end_time and r.info.start_time]
    return statistics.median(times) if times else None


def status(study, *, tracking_uri: str | None, perf: PerfFlags | None = None, data_dir: str | None = None) -> StudyStatus:
    """The study's state in the store (its experiment is named after it) and the missing work's estimate."""
    perf = perf or PerfFlags()
    out = StudyStatus()
    try:
        runs, exact = configurations(study, data_dir), True
    except DataMissing as err:
        runs, exact = configurations(study, data_dir, check_data=False), False
        out.notes.append(f"the data are not at hand ({one_line(err, 100)}): the store's runs matched by their tags "
                         "(method, recipe, seed, model, budget), not by the data's content")
    uri = tracking_uri or default_tracking_uri()
    path = sqlite_path(uri)
    client, exp = (None, None) if path is not None and not path.exists() else open_store(uri, study.name, create=False)
    stored = client.search_runs([exp], max_results=50000) if exp else []
    tagged = _by_tags(stored) if not exact else {}

    def found(key: str, tags: tuple) -> list:
        if not exp:
            return []
        return runs_with_key(client, exp, key) if exact else tagged.get(tags, [])

    missing: list[tuple[str, ResolvedRun | None, str]] = []  # (kind, configuration, canary kind)
    for r in runs:
        c = r.config
        if out.add(_label(r), found(r.key(perf), _train_tag_key(c.method, r.variant, c.seed, c.match_key(), c.model))):
            missing.append(("training", r, ""))
    for plan in study.audits:
        for r in plan.rows(runs):
            target = plan.of(r)
            c = target.config
            tags = _audit_tag_key(c.method, target.variant, c.match_key(), c.model, plan.canary_kind, plan.canaries)
            if out.add(f"audit ({plan.label()}) of {_label(r)}", found(audit_key(target, plan), tags)):
                missing.append(("audit", r, plan.canary_kind))
    for part in study.parts:
        if part.speed_steps and out.add(f"speed of {part.dataset} {part.preset}",
                                        runs_with_key(client, exp, speed_key(part, perf)) if exp else []):
            missing.append(("speed", None, ""))
    _estimate(out, missing, stored)
    return out


def _estimate(out: StudyStatus, missing: list, stored: list) -> None:
    """Each missing item's minutes from the store's finished runs where it has any (``_stored_minutes``), else the
    preset's measured range (an audit counted as one training run of its row)."""
    train = [r for r in stored if r.data.tags.get(names.TAG_KIND, "train") == "train"]
    audits = [r for r in stored if r.data.tags.get(names.TAG_KIND) == names.KIND_AUDIT]
    lo = hi = 0.0
    from_store = from_preset = 0
    for kind, r, canary in missing:
        label = f"{kind} {r.config.method if r is not None else ''}".strip() if kind != "audit" else f"audit {canary}"
        out.missing_kinds[label] += 1
        if kind == "speed":
            got = _minutes([s for s in stored if s.data.tags.get(names.TAG_KIND) == names.KIND_SPEED]) or SPEED_MINUTES
            lo, hi = lo + got, hi + got
            continue
        got = _stored_minutes(kind, r, canary, train, audits)
        if got is not None:
            lo, hi, from_store = lo + got, hi + got, from_store + 1
            continue
        preset = PRESETS.get(r.config.preset) if r.config.preset in PRESETS.names() else None
        if preset is not None and preset.minutes_per_run:
            lo, hi, from_preset = lo + preset.minutes_per_run[0], hi + preset.minutes_per_run[1], from_preset + 1
    out.minutes = (lo, hi)
    if from_store:
        out.notes.append(f"{from_store} missing item(s) timed by the store's finished runs (an audit: its kind's of "
                         "the same row, else its row's training runs, else its kind's)")
    if from_preset:
        out.notes.append(f"{from_preset} by their preset's measured minutes per run (bench list; an audit counted as "
                         "one training run of its row)")


def _stored_minutes(kind: str, r: ResolvedRun, canary: str, train: list, audits: list) -> float | None:
    """A missing item's median minutes in the store: a training run by its method's and recipe's finished runs; an
    audit by the audits of its kind of the same method and recipe, else by its row's training runs (an audit trains
    a model at its row's recipe), else by every audit of its kind (methods' recipes differ by 50x: the last resort)."""

    def same_row(runs: list) -> list:
        return [t for t in runs if t.data.tags.get(names.TAG_METHOD) == r.config.method
                and t.data.tags.get(names.TAG_VARIANT, "") == (r.variant or "")]

    row_train = _minutes(same_row(train))
    if kind != "audit":
        return row_train
    of_kind = [a for a in audits if a.data.tags.get(names.TAG_CANARY_KIND) == canary]
    for got in (_minutes(same_row(of_kind)), row_train, _minutes(of_kind)):
        if got is not None:
            return got
    return None
