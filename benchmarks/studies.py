"""Studies: a named, declared set of work, run by one command into one store, resumable.

A study is training configurations (methods x epsilons x seeds of a preset, per data set), for every private
(method, recipe, epsilon) row its one-run audits (random-pattern canaries scored by every general score: a black-box
and a white-box bound at once; and the exclusive-support test on an MLP, the white-box test that decides), and an
interleaved speed measurement per data set. ``bench study run NAME`` runs what the store does not hold yet into
the study's own experiment (named after the study, so that its report shows only its own configurations);
``bench study status NAME`` says what is done, running and missing; ``bench study list`` lists them. A finished
study run again starts nothing: every configuration and audit is found FINISHED by its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inputdp.core import names
from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError
from inputdp.core.registry import Entry, Registry
from inputdp.methods import METHODS

from .performance import speed
from .resolve import ResolvedRun, check_feasible
from .study_audits import GRADIENT, AuditPlan, check_audits, run_audits
from .sweep import Overrides, SweepOutcome, expand, resolve_methods, run_sweep
from .tracking import parent_run, span_parent

#: the entry-point group installed packages use to add studies
ENTRY_POINT_GROUP = "inputdp.studies"


@dataclass(frozen=True, kw_only=True)
class StudyPart:
    """One data set's share of a study: its preset, methods ("all" or names), target epsilons and seeds."""

    dataset: str
    preset: str
    methods: tuple[str, ...] | str = "all"
    epsilons: tuple[float, ...] = (1.0, 4.0)
    seeds: tuple[int, ...] = (0, 1, 2)
    #: fewer seeds for a method whose one run is long here (a subset of ``seeds``), e.g. {"pate": (0, 1)}
    seeds_by_method: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: explicit settings that win over the preset's (``sweep.Overrides`` fields: steps, train_examples, ...)
    overrides: dict[str, Any] = field(default_factory=dict)
    #: the interleaved speed measurement of the part's per-step methods (``bench speed``): timed steps (0: none)
    speed_steps: int = 50

    def __post_init__(self) -> None:
        for method, seeds in self.seeds_by_method.items():
            if not seeds or not set(seeds) <= set(self.seeds):
                raise ValueError(f"seeds_by_method[{method!r}]={seeds!r}: give a non-empty subset of seeds={self.seeds!r}")


@dataclass(frozen=True, kw_only=True)
class Study(Entry):
    parts: tuple[StudyPart, ...]
    #: the audits of every private row: by default 1,000 random-pattern canaries on the row's own model (every
    #: general score: a black-box and a white-box bound), the exclusive-support test on an MLP (67 canaries) and
    #: 1,000 canaries with input coordinates of their own on the row's own model (the white-box tests that decide,
    #: THEORY.md, "Auditing"; the last for the rows whose method trains its features on unaugmented images)
    audits: tuple[AuditPlan, ...] = (AuditPlan(), AuditPlan(canary_kind="exclusive_support", canaries=67, model="mlp"),
                                     AuditPlan(canary_kind="canary_inputs"), GRADIENT)
    #: what the study is for, and what it leaves out (shown by ``bench study list``)
    note: str = ""


STUDIES: Registry[Study] = Registry("study", group=ENTRY_POINT_GROUP, entry_type=Study)

_ALL_SEEDS = (0, 1, 2)
STUDIES.register(Study(
    name="smoke", target="", summary="seconds: two methods on synthetic data at the smoke preset, one audit; plumbing",
    parts=(StudyPart(dataset="synthetic", preset="smoke", methods=("nonprivate", "dirichlet_softmax"), epsilons=(4.0,),
                     seeds=(0, 1), overrides={"steps": 20}, speed_steps=5),),
    audits=(AuditPlan(canaries=20), AuditPlan(canary_kind="exclusive_support", canaries=20, model="mlp"),
            AuditPlan(canary_kind="canary_inputs", canaries=20)),
    note="plumbing, not a comparison: what `bench study` does, at test size"))


def _dpsgd_replace_input(dataset: str, preset: str, epsilons: tuple[float, ...]) -> StudyPart:
    """DP-SGD again at the input-private relation (one input replaced, its label public: sensitivity 2C), beside
    its add/remove row: the sound input-private row every input-private method is matched against."""
    return StudyPart(dataset=dataset, preset=preset, methods=("dpsgd",), epsilons=epsilons, seeds=_ALL_SEEDS,
                     overrides={"method_options": {"dpsgd": {"adjacency": "replace_input"}}}, speed_steps=0)


def _other_relations(dataset: str, preset: str, epsilons: tuple[float, ...]) -> tuple[StudyPart, ...]:
    """The three relations side by side (what public labels buy): DP-SGD under zero-out (its add/remove and
    replace_input rows are the study's others), and DP least squares under add/remove and zero-out beside its
    replace_input row. feature_perturbation has no zero-out or add/remove claim (one noisy vector per example)."""
    return tuple(StudyPart(dataset=dataset, preset=preset, methods=methods, epsilons=epsilons, seeds=_ALL_SEEDS,
                           overrides={"method_options": {m: {"adjacency": relation} for m in methods}}, speed_steps=0)
                 for methods, relation in ((("dpsgd", "dp_least_squares"), "zero_out"),
                                           (("dp_least_squares",), "add_remove")))


STUDIES.register(Study(
    name="mnist-cpu", target="", summary="every method on MNIST at the cpu preset, eps 1 and 4, 3 seeds, audited",
    parts=(StudyPart(dataset="mnist", preset="cpu", epsilons=(1.0, 4.0), seeds=_ALL_SEEDS),
           _dpsgd_replace_input("mnist", "cpu", (1.0, 4.0))),
    note="matched view: one (q, T) for every method (PATE: its own loop at the same epsilon)"))
#: PATE's best recipe (250 grouped teachers for 40 epochs, the semi-supervised student for 80 passes) takes 9 to 21
#: minutes a run on 2 cores (benchmarks/docs/speed.md, PATE): over the 10 minutes above which a study runs 2 seeds
_LONG_RUNS = {"pate": (0, 1)}
STUDIES.register(Study(
    name="mnist-best", target="",
    summary="every method at its own best recipe on MNIST, eps 1 and 2.93, 3 seeds (pate 2)",
    parts=(StudyPart(dataset="mnist", preset="best", epsilons=(1.0, 2.93), seeds=_ALL_SEEDS,
                     seeds_by_method=_LONG_RUNS, speed_steps=0),
           _dpsgd_replace_input("mnist", "best", (1.0, 2.93)), *_other_relations("mnist", "best", (1.0, 2.93))),
    note="own-best view: each method's own (q, T, model, optimiser) at the same (epsilon, delta), so each is timed "
         "by its whole run (no interleaved step: a step at one batch is not what an own recipe costs); pate at 2 "
         "seeds, one run taking over 10 minutes here"))
STUDIES.register(Study(
    name="fashionmnist-best", target="",
    summary="every method at its own best recipe on Fashion-MNIST, eps 1 and 2.93, 3 seeds (pate 2)",
    parts=(StudyPart(dataset="fashionmnist", preset="best", epsilons=(1.0, 2.93), seeds=_ALL_SEEDS,
                     seeds_by_method=_LONG_RUNS, speed_steps=0),
           _dpsgd_replace_input("fashionmnist", "best", (1.0, 2.93)), *_other_relations("fashionmnist", "best", (1.0, 2.93))),
    # no exclusive-support test: no pixel of Fashion-MNIST is blank in all 60,000 training images (0 free
    # coordinates; MNIST has 67); the canaries' own appended coordinates give the white-box test that decides
    audits=(AuditPlan(), AuditPlan(canary_kind="canary_inputs"), GRADIENT),
    note="own-best view, as mnist-best; audited by random patterns, by canaries with input coordinates of their "
         "own (no pixel is blank in every training image, so the exclusive-support test has no room) and DP-SGD by "
         "gradient canaries"))
STUDIES.register(Study(
    name="relations", target="",
    summary="what public labels buy: DP-SGD and DP least squares under add/remove, zero-out and one input replaced, "
            "at their best recipes on MNIST and Fashion-MNIST, eps 1 and 2.93, 3 seeds",
    parts=tuple(part for ds in ("mnist", "fashionmnist") for part in (
        StudyPart(dataset=ds, preset="best", methods=("nonprivate", "dpsgd", "dp_least_squares", "feature_perturbation"),
                  epsilons=(1.0, 2.93), seeds=_ALL_SEEDS, speed_steps=0),
        _dpsgd_replace_input(ds, "best", (1.0, 2.93)), *_other_relations(ds, "best", (1.0, 2.93)))),
    # DP-SGD's audit with power under each relation's own design; the fixed-feature methods are audited at their
    # mechanism (reports/mechanism-audits), and input canaries cannot build zero-out's null example
    audits=(GRADIENT,),
    note="the sound rows of the best studies under each relation, side by side, at a fraction of their cost (no "
         "Dirichlet, penultimate-Gaussian or PATE rows: reports/mnist-best and fashionmnist-best have them)"))
STUDIES.register(Study(
    name="pate-paper", target="",
    summary="PATE in the paper's MNIST setting (250 teachers, Confident-GNMax) over eps 1, 2, 4, 8, 3 seeds",
    parts=(StudyPart(dataset="mnist", preset="cpu", methods=("pate",), epsilons=(1.0, 2.0, 4.0, 8.0),
                     seeds=_ALL_SEEDS),),
    note="the paper's sigmas scaled together to each epsilon (data-independent claim; sanitised data-dependent "
         "epsilon beside it)"))


def _methods(part: StudyPart) -> list[str]:
    return resolve_methods(part.methods if isinstance(part.methods, str) else ",".join(part.methods))


def expanded(study: Study, data_dir: str | None = None) -> list:
    """Every training configuration of the study (RunConfigs, not yet calibrated); ``data_dir`` where the data sets
    are read from (not part of any key: the data's content fingerprint is)."""

    configs = []
    for part in study.parts:
        overrides = Overrides(**{**part.overrides, **({"data_dir": data_dir} if data_dir else {})})
        for method in _methods(part):
            seeds = part.seeds_by_method.get(method, part.seeds)
            configs += expand(methods=[method], dataset=part.dataset, preset=part.preset, epsilons=part.epsilons,
                              seeds=seeds, overrides=overrides)
    return configs


def configurations(study: Study, data_dir: str | None = None, *, check_data: bool = True) -> list[ResolvedRun]:
    """Every training configuration of the study, resolved (one calibration per distinct budget) with its data
    checked and fingerprinted (unless ``check_data`` is False: the declaration alone); refused in one line, before
    any store is opened, where a part names something unknown, a target a method cannot meet or data that do not
    fit."""

    return check_feasible(expanded(study, data_dir), check_data=check_data)


def rounds(study: Study, runs: Sequence[ResolvedRun]) -> list[list[ResolvedRun]]:
    """The study's configurations in the order it runs them: round k holds every part's k-th seed (every method,
    recipe and epsilon). A study stopped part-way leaves a report with every row at fewer seeds, not some methods
    complete and others absent."""
    order = {}
    for part in study.parts:
        for k, seed in enumerate(part.seeds):
            order[(part.dataset, part.preset, seed)] = k
    out: list[list[ResolvedRun]] = []
    for r in runs:
        k = order.get((r.config.dataset, r.config.preset, r.config.seed), 0)
        while len(out) <= k:
            out.append([])
        out[k].append(r)
    return [batch for batch in out if batch]


#: what ``run_study`` may be limited to: the timed work (training and speed runs: alone), or the untimed audits
ONLY = ("training", "audits")


def run_study(study: Study, *, tracking_uri: str | None, perf: PerfFlags | None = None, executor: str = "local",
              executor_options: dict[str, Any] | None = None, data_dir: str | None = None,
              only: str = "") -> tuple[Any, list[str]]:
    """Run what the store lacks, first seed first: the first round of training configurations (a sweep: FINISHED
    ones skipped), the audits of every private row (at its first seed) and the speed measurement, then each later
    round of seeds; ``only`` "training" leaves the audits out, "audits" runs nothing else. Returns (the sweeps'
    outcome, the labels of the audits and speed runs made now)."""

    if only and only not in ONLY:
        raise ConfigError(f"only={only!r} is not allowed: choose one of {', '.join(ONLY)} (or nothing: all of it)")
    perf = perf or PerfFlags()
    runs = configurations(study, data_dir)
    check_audits(study, runs)
    parent = study_run(study, tracking_uri)
    total, extra = SweepOutcome(), []
    try:
        if only == "audits":
            extra += run_audits(study, runs, tracking_uri=tracking_uri, perf=perf, parent=parent)
        else:
            _rounds(study, runs, total, extra, tracking_uri=tracking_uri, perf=perf, executor=executor,
                    executor_options=executor_options, parent=parent, data_dir=data_dir, audits=only != "training")
    finally:  # the study's parent run spans its runs in the MLflow UI, however the study ended
        span_parent(tracking_uri, study.name, parent)
    return total, extra


def _rounds(study: Study, runs: Sequence[ResolvedRun], total: SweepOutcome, extra: list[str], *,
            tracking_uri: str | None, perf: PerfFlags, executor: str, executor_options: dict[str, Any] | None,
            parent: str, data_dir: str | None, audits: bool = True) -> None:
    """Each round of seeds as a sweep, the first followed by the audits (unless left out) and the speed run."""
    for k, batch in enumerate(rounds(study, runs)):
        outcome = run_sweep(batch, tracking_uri=tracking_uri, experiment=study.name, perf=perf, executor=executor,
                            executor_options=executor_options, parent_run_id=parent)
        for name in ("ran", "skipped", "failed", "elsewhere"):
            getattr(total, name).extend(getattr(outcome, name))
        total.marked_failed += outcome.marked_failed
        if outcome.failed:
            raise ConfigError(f"study {study.name}: {len(outcome.failed)} configuration(s) failed "
                              f"({outcome.failed[0].error}); run it again to finish them")
        if k == 0:
            extra += run_audits(study, runs, tracking_uri=tracking_uri, perf=perf, parent=parent) if audits else []
            extra += [f"speed of {part.dataset} {part.preset}" for part in study.parts if part.speed_steps and
                      speed_run(study, part, tracking_uri=tracking_uri, perf=perf, parent=parent, data_dir=data_dir)]


def speed_key(part: StudyPart, perf: PerfFlags) -> str:
    """The store key of a part's speed measurement (performance/speed.py's ``speed_key`` of its declaration)."""
    return speed.speed_key(part.dataset, part.preset, _methods_text(part), part.speed_steps, perf)


def speed_run(study: Study, part: StudyPart, *, tracking_uri: str | None, perf: PerfFlags, parent: str,
              data_dir: str | None = None) -> bool:
    """The part's per-step methods timed interleaved against the reference, logged as its own run of the study's
    experiment (``speed.logged_speed_run``); False when the store has it already."""
    methods = [m for m in _methods(part) if not METHODS.get(m).facts().own_loop]
    return speed.logged_speed_run(tracking_uri, study.name, key=speed_key(part, perf), methods=methods,
                                  dataset=part.dataset, preset=part.preset, steps=part.speed_steps, perf=perf,
                                  parent=parent, data_dir=data_dir or part.overrides.get("data_dir"))


def _methods_text(part: StudyPart) -> str:
    return part.methods if isinstance(part.methods, str) else ",".join(part.methods)


def study_run(study: Study, tracking_uri: str | None) -> str:
    """The study's parent run in its experiment (made once, FINISHED; found again by its key): every training and
    audit run of the study is nested under it, and ``bench report`` logs the leaderboard on it as a table."""

    return parent_run(tracking_uri, study.name, key=f"study:{study.name}", name=f"study-{study.name}",
                      kind=names.KIND_STUDY, note=study.summary)
