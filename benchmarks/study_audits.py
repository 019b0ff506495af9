"""A study's audits: what each audits (:class:`AuditPlan`: a canary kind, how many, on which model, at which of a
row's seeds), which rows it applies to, their store keys, the refusals of what the data cannot hold, and running those
the store lacks (``run_audits``: a line per finished audit)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inputdp.core import names
from inputdp.core.claims import NULL
from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError
from inputdp.datasets import load_tensor_data

from .audits.gradient_canaries import CANARY_KIND as GRADIENT_CANARIES
from .audits.gradient_canaries import check_canary_rows, check_gradient_canaries, gradient_canary_audit
from .audits.one_run import audit, design_suffix, free_coordinates, resolve_scores
from .resolve import ResolvedRun, resolve
from .tracking import MLflowTracker, run_name


@dataclass(frozen=True, kw_only=True)
class AuditPlan:
    """An audit of every private row: one run with ``canaries`` canaries of ``canary_kind`` (seed 0), on the row's
    model or on ``model`` (the exclusive-support test needs a dense one: mlp)."""

    canary_kind: str = "random_pattern"
    canaries: int = 1000
    pattern_scale: float = 2.0
    model: str | None = None
    #: the row's seeds audited: all of them (True), or its first alone (False). The gradient canaries' verdict is a
    #: certification whose spread over seeds is about 0.05 of the claim: the row reads its median
    every_seed: bool = False

    def of(self, r: ResolvedRun) -> ResolvedRun:
        """The configuration this audit trains: the row's, on the audit's own model where it names one."""

        if self.model is None:
            return r
        # the noise is a function of (method, options, budget), not of the model: the row's calibration stands
        return resolve(r.config.replace(model=self.model), _calibration=(r.method(), r.calibration))

    def label(self) -> str:
        return f"{self.canary_kind} x{self.canaries}" + (f" on {self.model}" if self.model else "")

    def rows(self, runs: Sequence[ResolvedRun]) -> list[ResolvedRun]:
        """The configurations this audit tests: each private row's first seed, or every seed (``every_seed``)."""
        firsts = audited(runs)
        if self.every_seed:
            rows = {(r.config.match_key(), r.config.method, r.variant) for r in firsts}
            firsts = [r for r in runs if (r.config.match_key(), r.config.method, r.variant) in rows]
        return [r for r in firsts if self.applies(r)]

    def applies(self, r: ResolvedRun) -> bool:
        """Whether this audit can test the row: canaries with coordinates of their own need a method that trains
        the model's features on images that are not augmented (the others are audited at the mechanism); gradient
        canaries need DP-SGD with SGD on images that are not augmented."""
        if self.canary_kind == GRADIENT_CANARIES:
            try:
                check_gradient_canaries(r.config, self.canaries, 1.0)
            except ConfigError:
                return False
            return True
        if r.claim.relation is not None and getattr(r.claim.relation, "excluded", "") == NULL:
            return False  # input canaries cannot build zero-out's null example (one_run.check_input_design)
        if self.canary_kind != "canary_inputs":
            return True
        method = r.method()
        return not (method.capabilities.fixed_features or method.augments_inputs or r.config.augment)


#: DP-SGD's white-box audit with power: 39,000 gradient canaries through every iterate (each a row of the training
#: set, so n + m < 1/delta at delta 1e-5 on 60,000 images; reports/gradient-canaries), at every seed of the row
GRADIENT = AuditPlan(canary_kind=GRADIENT_CANARIES, canaries=39_000, every_seed=True)


def audit_key(r: ResolvedRun, plan: AuditPlan) -> str:
    """The store key of a one-run audit of ``r`` (what ``bench audit`` tags it with)."""
    return f"audit:{r.key()}:{plan.canary_kind}:{plan.canaries}:{plan.pattern_scale:g}{design_suffix(r.claim)}"


def audited(runs: Sequence[ResolvedRun]) -> list[ResolvedRun]:
    """The configurations a study audits: each private (data set, method, recipe, epsilon) once, at its first seed."""
    seen, out = set(), []
    for r in runs:
        row = (r.config.match_key(), r.config.method, r.variant)
        if r.config.privacy.is_private and row not in seen:
            seen.add(row)
            out.append(r)
    return out


def _label(r: ResolvedRun) -> str:
    c = r.config
    eps = "inf" if not c.privacy.is_private else f"{c.privacy.epsilon:g}"
    return f"{c.method}{f' [{r.variant}]' if r.variant else ''} {c.dataset} {c.preset} eps={eps} seed={c.seed}"


def check_audits(study: Any, runs: Sequence[ResolvedRun]) -> None:
    """Refuse, in one line and before any work, an audit that the data cannot hold: each exclusive-support canary
    needs input coordinates of its own that are blank in every training example (MNIST at 60,000 examples leaves 67;
    Fashion-MNIST none). Otherwise a study would stop at its first such audit, after its whole first round."""

    free: dict[tuple, int] = {}
    for plan in study.audits:
        if plan.canary_kind == GRADIENT_CANARIES:
            for r in plan.rows(runs):
                try:
                    check_canary_rows(r.config, plan.canaries)
                except ConfigError as error:
                    raise ConfigError(f"study {study.name}: its audit '{plan.label()}' of {_label(r)}: {error}") from None
            continue
        if plan.canary_kind != "exclusive_support":
            continue
        for r in audited(runs):
            c = plan.of(r).config
            where = (c.dataset, c.data_dir, c.train_examples)
            if where not in free:
                free[where] = len(free_coordinates(load_tensor_data(c.dataset, data_dir=c.data_dir,
                                                                    train_examples=c.train_examples)))
            if plan.canaries > free[where]:
                raise ConfigError(f"study {study.name}: its audit '{plan.label()}' does not fit {c.dataset}: its "
                                  f"training examples leave {free[where]} input coordinates blank in all of them "
                                  f"and each canary needs one of its own; declare at most {free[where]} canaries, "
                                  "or no exclusive-support audit, for this data set")


def run_audits(study: Any, runs: Sequence[ResolvedRun], *, tracking_uri: str | None, perf: PerfFlags,
            parent: str) -> list[str]:
    """Each audit of every private row the store lacks; their labels. A line per finished audit: its place among the
    study's, its verdict and its minutes."""
    done, todo = [], [(plan, r) for plan in study.audits for r in plan.rows(runs)]
    for i, (plan, r) in enumerate(todo, 1):
        r = plan.of(r)  # the row's configuration, its data fingerprint included, on the audit's model
        tracker = MLflowTracker(tracking_uri, study.name)
        key = audit_key(r, plan)
        # the training runs' claim: skipped when FINISHED or held by a live process (another study on the store); an
        # unfinished run whose process is gone (even SIGKILLed, left RUNNING) is marked FAILED and the audit redone
        if tracker.claim(key, names.AUDIT_RUN_PREFIX + run_name(r.config)).status != "claimed":
            continue
        tracker.extra_tags.update({names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: r.config.match_key(),
                                   names.TAG_CONFIG_KEY: key, names.TAG_PATTERN_SCALE: f"{plan.pattern_scale:g}",
                                   names.TAG_PARENT_RUN: parent})
        start = time.monotonic()
        try:
            if plan.canary_kind == GRADIENT_CANARIES:
                got = gradient_canary_audit(r, canaries=plan.canaries, perf=perf, tracker=tracker)
            else:
                got = audit(r, canaries=plan.canaries, canary_kind=plan.canary_kind, perf=perf, tracker=tracker,
                            scores=resolve_scores("auto", plan.canary_kind, r.config.model),
                            pattern_scale=plan.pattern_scale)
        finally:
            tracker.release()
        done.append(f"audit ({plan.label()}) of {_label(r)}")
        print(f"[{i}/{len(todo)}] finished {done[-1]}: {got.verdict()} in {(time.monotonic() - start) / 60:.1f} min",
              file=sys.stderr, flush=True)
    return done
