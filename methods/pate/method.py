"""PATE as a plug-in (Papernot et al. 2018; THEORY.md, "PATE").

Its shape differs from the step methods: teachers on disjoint parts of the private training set -> noisy
aggregated labels for public unlabeled inputs -> a student trained on those labels. It runs its own loop
(``fit``); the harness still times, evaluates, logs and accounts it.

Public data: the data set's test split, cut once (fixed seed) into the student's unlabeled pool (the first
``public_pool`` examples, as in the PATE paper's MNIST setting) and a held-out part on which the student is
evaluated. PATE therefore assumes public unlabeled inputs from the same distribution, and it protects the
private training set's inputs *and* labels.

The formal claim is the data-independent bound: every query pays the threshold check (lambda / (2 sigma1^2))
and at most every query pays a GNMax answer (lambda / sigma2^2), composed over the queries. With
``calibrate`` the two sigmas are scaled together (their ratio kept) so that this bound meets the matched
epsilon; ``calibrate`` never changes the options, so calibrating twice gives the same sigmas. ``epsilon_spent(k)``
is the data-independent bound of the first k queries with every one of them counted as answered: the guarantee. The
cost of only the queries actually answered is logged beside it (``epsilon_answered_only``) and is not one: how many
are answered depends on the private votes, and a sum of costs chosen by the run's own outputs is not a guarantee at its
own value (a privacy odometer, Rogers et al. 2016; only a budget fixed in advance is a guarantee, Feldman & Zrnic
2021). The data-dependent bound (Theorem 6 per query, min with the data-independent one) is logged only
after sanitisation by smooth sensitivity (smooth_sensitivity.py): at an order and with a noise multiplier fixed
before any vote is seen (options ``ss_order``, ``ss_sigma``), charged what the release itself costs. Nothing
else computed from the votes' privacy analysis (the smooth sensitivity, the best order) is logged.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from inputdp.core import names
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.datasets import blank_value

from .. import PATE_INFO
from .. import noise as noise_source
from ..accounting import rdp_to_epsilon, rdp_to_epsilon_classic
from ..accounting.gnmax import data_independent_rdp
from ..accounting.releases import PateQueries
from ..base import Calibration, ClaimText, FitContext, FitOutput, Method, ReleaseTrials
from . import aggregators, analysis
from .gnss import sanitise
from .mechanism import vote_trials
from .smooth_sensitivity import smooth_sensitivity
from .student import train_semi_supervised, train_supervised
from .teachers import train_teachers

AGGREGATORS = ("gnmax", "confident", "interactive")
STUDENTS = ("supervised", "semi_supervised")
PUBLIC_SPLIT_SEED = 4242


class PATE(Method):
    name = "pate"
    capabilities = PATE_INFO.capabilities  # declared with its registry entry (methods/__init__.py)
    option_defaults = {
        "teachers": 250, "aggregator": "confident", "threshold": 200.0, "sigma1": 150.0, "sigma2": 40.0,
        "queries": 640, "calibrate": True, "teacher_epochs": 20, "teacher_width": 8, "teacher_lr": 0.05,
        "teacher_shift": 0,  # augmentation: each teacher's images moved by up to this many pixels
        "student_epochs": 60, "public_pool": 9000, "student_threshold": 0.9, "seed": 0,
        # the release of the data-dependent epsilon (GNSS), fixed before any vote is seen: its order ("auto": the
        # order at which the data-independent claim is tightest) and its noise multiplier
        "ss_order": "auto", "ss_sigma": 20.0,
        # the student: "supervised" (the labelled answers only) or "semi_supervised" (also the unlabelled public
        # pool, FixMatch-style: student.py), with its passes over the pool, confidence threshold, weight of the
        # pool's loss and pool inputs per labelled one in a step
        # print (never log) the unsanitised data-dependent epsilon under both conversions, to compare with papers
        "research_report": False,
        "student": "supervised", "semi_epochs": 40, "semi_threshold": 0.95, "semi_weight": 1.0, "semi_ratio": 7,
        # the votes' noise (and the sanitised epsilon's): secret from the OS's entropy, or seeded (methods/noise.py)
        "secure_mode": False,
    }
    #: the smoothness of the smooth sensitivity, as a multiple of 1/order (Theorem 23 needs it below 1/2)
    SS_BETA_TIMES_ORDER = 0.4

    def __init__(self, **options: Any):
        super().__init__(**options)
        o = self.options
        if o["aggregator"] not in AGGREGATORS:
            raise ConfigError(f"aggregator={o['aggregator']!r} is not allowed: choose one of {', '.join(AGGREGATORS)}")
        if o["student"] not in STUDENTS:
            raise ConfigError(f"student={o['student']!r} is not allowed: choose one of {', '.join(STUDENTS)}")
        if not (isinstance(o["semi_threshold"], (int, float)) and 0 < o["semi_threshold"] <= 1):
            raise ConfigError(f"semi_threshold={o['semi_threshold']!r} is not allowed: it must be in (0, 1]")
        if not (isinstance(o["semi_weight"], (int, float)) and 0 <= o["semi_weight"] < math.inf):
            raise ConfigError(f"semi_weight={o['semi_weight']!r} is not allowed: it must be a finite number >= 0")
        if not (isinstance(o["teacher_shift"], int) and not isinstance(o["teacher_shift"], bool)
                and 0 <= o["teacher_shift"] <= 8):
            raise ConfigError(f"teacher_shift={o['teacher_shift']!r} is not allowed: it must be an integer in [0, 8]")
        for k in ("teachers", "queries", "teacher_epochs", "student_epochs", "public_pool", "semi_epochs",
                  "semi_ratio"):
            if not (isinstance(o[k], int) and o[k] >= 1):
                raise ConfigError(f"{k}={o[k]!r} is not allowed: it must be an integer >= 1")
        for k in ("sigma1", "sigma2", "ss_sigma"):
            if not (isinstance(o[k], (int, float)) and not isinstance(o[k], bool) and 0 < o[k] < math.inf):
                raise ConfigError(f"{k}={o[k]!r} is not allowed: it must be a finite number > 0")
        if o["ss_order"] != "auto" and not (isinstance(o["ss_order"], (int, float)) and 1 < o["ss_order"] < 1e4):
            raise ConfigError(f"ss_order={o['ss_order']!r} is not allowed: give 'auto' or an order in (1, 1e4)")
        noise_source.check_secure_mode(o["secure_mode"])
        #: the sigmas as given; the calibrated ones live in ``calibration.noise``
        self.base_sigma1 = float(o["sigma1"]) if o["aggregator"] != "gnmax" else None
        self.base_sigma2 = float(o["sigma2"])
        self.paid: np.ndarray | None = None  # which asked queries paid for a GNMax answer, after fit

    # --- privacy -------------------------------------------------------------------------------------------
    @property
    def sigma1(self) -> float | None:
        return self._need_calibration()[1].noise.get("sigma1")

    @property
    def sigma2(self) -> float:
        return self._need_calibration()[1].noise["sigma2"]

    def release_family(self, spec: PrivacySpec) -> PateQueries:
        """The data-independent release of the queries: every one pays the threshold check and a GNMax answer,
        whatever the votes; the two sigmas scaled together by the calibration (option ``calibrate``)."""
        return PateQueries(int(self.options["queries"]), self.base_sigma2, self.base_sigma1,
                           calibrated=bool(self.options["calibrate"]))

    @property
    def augments_inputs(self) -> bool:
        return int(self.options["teacher_shift"]) > 0 or self.options["student"] == "semi_supervised"

    def claim_text(self) -> ClaimText:
        return ClaimText(
            mechanism=f"pate_{self.options['aggregator']}_gnmax", protects="inputs and labels",
            adjacency="add/remove or replace one example (either moves one teacher's vote per query)",
            relation="add_remove",  # the audits test the add/remove half: an excluded canary is absent
            covers=("add_remove", "zero_out", "replace_input"),  # either relation moves one teacher's vote
            scope=("the student model and every released label: the private training set's inputs and labels "
                   "(data-independent bound over all queries, each a noised vote histogram: an aggregate); needs "
                   "public unlabeled inputs"),
            needs_public_data=True, noise=noise_source.describe(self.options["secure_mode"], "numpy"))

    def release_trials(self, claimed: Calibration, *, trials: int, seed: int,
                       progress: Callable[[str], None] | None = None) -> list[ReleaseTrials]:
        """The GNMax answer and the threshold check on histograms that k teachers' votes move (pate/mechanism.py)."""
        return vote_trials(self.calibration.noise, claimed.noise, queries=self.options["queries"],
                           threshold=float(self.options["threshold"]), trials=trials, seed=seed)

    def answered_only(self, steps_done: int) -> float:
        """The same bound over the first ``steps_done`` queries with only the answered ones paying an answer: a
        ledger, not a guarantee (the number answered is chosen by the run's own outputs; module docstring)."""
        return self._data_independent(steps_done, answered_only=True)

    def _data_independent(self, steps_done: int, *, answered_only: bool) -> float:
        spec, _ = self._need_calibration()
        k = max(0, int(steps_done))
        if k == 0:
            return 0.0
        answers = int(self.paid[:k].sum()) if answered_only and self.paid is not None else k
        rdp = data_independent_rdp(queries=k, answers=answers, sigma1=self.sigma1, sigma2=self.sigma2)
        return rdp_to_epsilon(analysis.ORDERS, rdp, spec.delta)[0]

    def release_order(self) -> float:
        """The order at which the data-dependent epsilon is released: the option, or the order at which the
        data-independent claim is tightest (a function of the sigmas and the number of queries, not the votes)."""
        if self.options["ss_order"] != "auto":
            return float(self.options["ss_order"])
        order = self._need_calibration()[1].order
        return float(order) if order is not None else 14.0

    # --- the loop ------------------------------------------------------------------------------------------
    def fit(self, context: FitContext) -> FitOutput:
        """Teachers on disjoint parts of the private set, their noisy votes on public queries, the sanitised
        data-dependent epsilon, and the student on the answered queries; each phase reported to the harness."""
        o, data, device = self.options, context.data, context.device
        g = torch.Generator().manual_seed(context.seed)
        rng = noise_source.numpy_generator(context.seed, secure=self.options["secure_mode"])  # every noisy vote's noise
        metrics: dict[str, float] = {}
        pool, x_eval, y_eval = self._public_split(data, device, metrics)
        ensemble, m = self._teachers(context, g, metrics)
        # the teachers' own accuracy is a function of the private set that no claim covers (they are never
        # released): it is not published; the harness times the phase (a time is not covered either, THEORY.md)
        context.report({}, phase="teachers")
        q = min(o["queries"], pool.shape[0])
        qidx = pool[torch.randperm(pool.shape[0], generator=g)[:q].to(device)]
        x_q, y_q_true = data.x_test[qidx], data.y_test[qidx]
        votes = F.one_hot(ensemble.predict(x_q).cpu().T, data.info.num_classes).sum(1).numpy().astype(np.float64)
        labels, paid, check_seen = self._aggregate(context, votes, x_q, g, rng)
        context.report({}, phase="labels")
        self.paid = np.asarray(paid, dtype=bool)
        have = labels >= 0
        metrics["queries_asked"] = q
        metrics["queries_answered"] = int(paid.sum())
        metrics["labels_used"] = int(have.sum())
        metrics["label_accuracy"] = float((labels[have] == y_q_true.cpu().numpy()[have]).mean()) if have.any() else 0.0
        # accounting: data-independent (the claim) and data-dependent (sanitised before it is logged); its time
        # depends on the votes (the smooth-sensitivity loop), so it is never timed apart from the student's training
        metrics["epsilon_answered_only"] = self.answered_only(q)
        metrics[names.METRIC_EPSILON_DD_SANITISED] = self._sanitised_epsilon(votes, paid, check_seen, m, rng,
                                                                             metrics)
        student = self._student(context, x_q[torch.from_numpy(have).to(device)],
                                torch.from_numpy(labels[have]).to(device), pool, g, metrics)
        context.report({}, phase="accounting_and_student")
        return FitOutput(student, x_eval, y_eval, steps=q, metrics=metrics)

    def _public_split(self, data, device: str, metrics: dict[str, float]):
        """(the public pool's test indices, the held-out test examples the student is evaluated on): a fixed,
        seed-independent split of the test set."""
        o = self.options
        perm = torch.randperm(data.x_test.shape[0], generator=torch.Generator().manual_seed(PUBLIC_SPLIT_SEED))
        n_test = data.x_test.shape[0]
        pool_n = min(o["public_pool"], n_test - 1)
        if n_test - pool_n < max(1, n_test // 10):  # the student would be judged on a handful of examples
            pool_n = max(1, n_test // 2)
            print(f"pate: public_pool={o['public_pool']} leaves under 10% of the {n_test} test examples to evaluate "
                  f"the student on: {pool_n} are the public pool, {n_test - pool_n} evaluate", file=sys.stderr)
        metrics["public_pool_used"] = pool_n
        pool, held = perm[:pool_n].to(device), perm[pool_n:].to(device)
        return pool, data.x_test[held], data.y_test[held]

    def _teachers(self, context: FitContext, g: torch.Generator, metrics: dict[str, float]):
        """The teacher ensemble, each teacher on its own disjoint part of the private training set."""
        o, data = self.options, context.data
        m = o["teachers"]
        per = data.train_size // m
        if per < 1:
            raise ConfigError(f"teachers={m} is not allowed for {data.train_size} training examples: at most that many")
        order = torch.randperm(data.train_size, generator=g)[: m * per].to(context.device)
        x_parts = data.x_train[order].view(m, per, *data.shape)
        y_parts = data.y_train[order].view(m, per)
        torch.manual_seed(context.seed)
        ensemble = train_teachers(x_parts, y_parts, num_classes=data.info.num_classes, width=o["teacher_width"],
                                  epochs=o["teacher_epochs"], batch_size=max(1, min(32, per // 4)),
                                  lr=o["teacher_lr"], momentum=0.9, generator=g, shift_pixels=o["teacher_shift"],
                                  fill=torch.tensor(blank_value(data.info), dtype=data.x_train.dtype))
        metrics["teacher_count"] = m
        metrics["teacher_examples_each"] = per
        return ensemble, m

    def _aggregate(self, context: FitContext, votes: np.ndarray, x_q: torch.Tensor, g: torch.Generator,
                   rng: np.random.Generator):
        """(labels, -1 where unanswered; which queries paid for an answer; the top vote each check saw), from the
        aggregator (the interactive one trains a first student on its first half)."""
        o, q = self.options, votes.shape[0]
        agg = o["aggregator"]
        check_seen = votes.max(axis=1)
        if agg == "gnmax":
            return aggregators.gnmax(votes, self.sigma2, rng), np.ones(q, dtype=bool), check_seen
        if agg == "confident":
            labels, paid = aggregators.confident_gnmax(votes, o["threshold"], self.sigma1, self.sigma2, rng)
            return labels, paid, check_seen
        half = q // 2
        l1, p1 = aggregators.confident_gnmax(votes[:half], o["threshold"], self.sigma1, self.sigma2, rng)
        first = self._train_student(context, x_q[:half][torch.from_numpy(l1 >= 0)],
                                    torch.from_numpy(l1[l1 >= 0]).to(context.device), g)
        with torch.no_grad():
            probs = torch.softmax(first(x_q[half:]), 1).cpu().numpy()
        l2, p2, seen2 = aggregators.interactive_gnmax(votes[half:], probs, o["threshold"], self.sigma1, self.sigma2,
                                                      o["student_threshold"], rng)
        return (np.concatenate([l1, l2]), np.concatenate([p1, p2]),
                np.concatenate([votes[:half].max(axis=1), seen2]))

    def _sanitised_epsilon(self, votes: np.ndarray, paid: np.ndarray, check_seen: np.ndarray, teachers: int,
                           rng: np.random.Generator, metrics: dict[str, float]) -> float:
        """The data-dependent epsilon, sanitised by the smooth-sensitivity mechanism (order, smoothness and noise
        fixed before the votes): the only one published; the unsanitised one stays in the instance, for research."""
        o, spec, q = self.options, self._need_calibration()[0], votes.shape[0]
        threshold = o["threshold"] if self.sigma1 is not None else None

        def data_dependent(orders: np.ndarray) -> np.ndarray:
            dd = np.zeros_like(orders)
            for i in range(q):
                if self.sigma1 is not None:
                    dd += analysis.rdp_threshold_data_dependent(threshold, self.sigma1, check_seen[i], orders)
                if paid[i]:
                    dd += analysis.rdp_data_dependent(analysis.log_q_gnmax(votes[i], self.sigma2), self.sigma2, orders)
            di = data_independent_rdp(queries=q, answers=int(paid.sum()), sigma1=self.sigma1, sigma2=self.sigma2,
                                      orders=orders)
            return np.minimum(dd, di)

        # research only, never logged: the best order and epsilon are functions of the votes
        dd_all = data_dependent(analysis.ORDERS)
        self._unsanitised = rdp_to_epsilon(analysis.ORDERS, dd_all, spec.delta)[0]
        lam = self.release_order()
        beta = self.SS_BETA_TIMES_ORDER / lam
        ss = smooth_sensitivity(votes, paid, sigma1=self.sigma1, sigma2=self.sigma2, threshold=threshold, order=lam,
                                beta_smooth=beta, num_teachers=teachers, check_votes=check_seen)
        release = sanitise(float(data_dependent(np.array([lam]))[0]), ss, order=lam, beta=beta,
                           sigma_ss=float(o["ss_sigma"]), delta=spec.delta, rng=rng)
        if o["research_report"] is True:
            self._print_research_report(dd_all, q, int(paid.sum()), {**metrics, names.METRIC_EPSILON_DD_SANITISED:
                                                                     release.epsilon}, spec.delta)
        return release.epsilon

    def _student(self, context: FitContext, x_l: torch.Tensor, y_l: torch.Tensor, pool: torch.Tensor,
                 g: torch.Generator, metrics: dict[str, float]) -> nn.Module:
        """The student on the answered queries (and, semi-supervised, on the unlabelled public pool)."""
        o, data = self.options, context.data
        if o["student"] != "semi_supervised":
            return self._train_student(context, x_l, y_l, g)
        student = context.new_model()
        fill = torch.tensor(blank_value(data.info), dtype=data.x_test.dtype)
        student, kept = train_semi_supervised(
            student, context.new_optimizer(student.parameters()), x_l, y_l, data.x_test[pool],
            epochs=o["semi_epochs"], generator=g, fill=fill, threshold=float(o["semi_threshold"]),
            weight=float(o["semi_weight"]), ratio=o["semi_ratio"])
        metrics["student_pool_size"] = pool.shape[0]
        metrics["student_pool_confident"] = kept
        return student

    def _print_research_report(self, dd: np.ndarray, queries: int, answered: int, metrics: dict[str, float],
                               delta: float) -> None:
        """To standard error, never to the store: the data-dependent epsilon before sanitisation (a function of the
        private votes, so not itself private) under the suite's conversion and under the classic one the reference
        code uses, eps = min over orders of rdp + log(1/delta) / (lambda - 1); the suite's (Balle et al. 2020) is
        smaller by about log(lambda/(lambda-1)) + log(lambda)/(lambda-1) at the best order."""

        orders = analysis.ORDERS
        classic = rdp_to_epsilon_classic

        def both(rdp: np.ndarray) -> str:
            eps, lam = rdp_to_epsilon(orders, rdp, delta)
            eps_c, lam_c = classic(orders, rdp, delta)
            return f"{eps:.3f} (suite's conversion, order {lam:g}) / {eps_c:.3f} (classic conversion, order {lam_c:g})"

        di = data_independent_rdp(queries=queries, answers=answered, sigma1=self.sigma1, sigma2=self.sigma2)
        claim = data_independent_rdp(queries=queries, answers=queries, sigma1=self.sigma1, sigma2=self.sigma2)
        print("pate research report (functions of the private votes: NOT private, not logged; compare with papers "
              f"only): answered {answered} of {queries}; data-dependent epsilon {both(dd)}; data-independent over "
              f"the answered queries {both(di)}; claim (every query answered) {both(claim)}; sanitised "
              f"data-dependent (logged) {metrics[names.METRIC_EPSILON_DD_SANITISED]:.3f}", file=sys.stderr)

    def _train_student(self, context: FitContext, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> nn.Module:
        model = context.new_model()
        return train_supervised(model, context.new_optimizer(model.parameters()), x, y,
                                epochs=self.options["student_epochs"], generator=g)
