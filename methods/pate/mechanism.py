"""PATE's mechanism audit (``bench audit --mechanism``): its own aggregators on vote histograms that k teachers'
votes move across the decision boundary."""

from __future__ import annotations

import math

import numpy as np

from ..base import ReleaseTrials
from . import aggregators
from .analysis import queries_event


def vote_trials(noise: dict[str, float], claimed: dict[str, float], *, queries: int, threshold: float, trials: int,
                seed: int) -> list[ReleaseTrials]:
    """The GNMax answer and the threshold check (``aggregators``), each on the vote histograms that k teachers'
    votes move across its decision boundary: (n + k, n) against (n, n + k) for the answer (the difference moves
    by 2k against noise sigma2 sqrt 2: claimed mu k sqrt 2 / sigma2), a top count T + k/2 against T - k/2 for
    the check (k / sigma1). One vote (k = 1) is the claim's own pair, but at PATE's noise it moves the answer's
    odds by about 1 / sigma2: no affordable number of trials resolves that, so k makes the claimed mu about 1.
    A Gaussian's claim for a group of k is exactly k times one's: the noise is what is audited (THEORY.md). The
    claim's event is every query's threshold check and answer, each a Gaussian (``queries_event``); ``noise`` is
    the code's noise, ``claimed`` the calibration's."""
    rng = np.random.default_rng(seed)
    sigma2, claimed2 = noise["sigma2"], claimed["sigma2"]
    k = max(1, round(claimed2 / math.sqrt(2.0)))
    n = 10.0 * claimed2 + k  # far above 0: the answer is one of the two classes
    a_in = aggregators.gnmax(np.tile([n + k, n], (trials, 1)), sigma2, rng)
    a_out = aggregators.gnmax(np.tile([n, n + k], (trials, 1)), sigma2, rng)
    out = [ReleaseTrials(release=f"one GNMax answer, {k} teachers' votes moved", relation="k votes moved",
                         scores_in=(a_in == 0).astype(float), scores_out=(a_out == 0).astype(float),
                         event=queries_event(queries, claimed, unit="sigma2"),
                         shift=k * math.sqrt(2.0), thresholds=(0.5,))]
    if "sigma1" in claimed:
        sigma1, claimed1 = noise["sigma1"], claimed["sigma1"]
        k1 = max(1, round(claimed1))
        low = threshold - k1 / 2 - 10 * claimed1  # the other class: never the top count in either world
        _, p_in = aggregators.confident_gnmax(np.tile([threshold + k1 / 2, low], (trials, 1)), threshold,
                                              sigma1, sigma2, rng)
        _, p_out = aggregators.confident_gnmax(np.tile([threshold - k1 / 2, low], (trials, 1)), threshold,
                                               sigma1, sigma2, rng)
        out.append(ReleaseTrials(release=f"one threshold check, {k1} teachers' votes moved",
                                 relation="k votes moved", scores_in=p_in.astype(float),
                                 scores_out=p_out.astype(float), shift=float(k1), thresholds=(0.5,),
                                 event=queries_event(queries, claimed, unit="sigma1")))
    return out
