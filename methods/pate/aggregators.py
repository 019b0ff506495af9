"""The noisy aggregators of PATE (Papernot et al. 2018), vectorised over queries.

votes: (queries, classes) teacher vote counts. Each returns the label per query (-1 for "no answer") and which
queries paid for a GNMax answer.
"""

from __future__ import annotations

import numpy as np

NO_ANSWER = -1


def gnmax(votes: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """argmax_j (n_j + N(0, sigma^2))."""
    return np.argmax(votes + rng.normal(0.0, sigma, votes.shape), axis=1)


def confident_gnmax(votes: np.ndarray, threshold: float, sigma1: float, sigma2: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Answer GNMax(sigma2) only where max_j n_j + N(0, sigma1^2) >= threshold; else no answer."""
    passed = votes.max(axis=1) + rng.normal(0.0, sigma1, votes.shape[0]) >= threshold
    labels = np.full(votes.shape[0], NO_ANSWER)
    if passed.any():
        labels[passed] = gnmax(votes[passed], sigma2, rng)
    return labels, passed


def interactive_gnmax(votes: np.ndarray, student_probs: np.ndarray, threshold: float, sigma1: float, sigma2: float,
                      student_threshold: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The check is on max_j (n_j - M p_j): where the teachers disagree with the student, answer GNMax(sigma2);
    otherwise, where the student is confident (max p_j > T'), reinforce the student's own label (free).

    Returns (labels, answered by the teachers, the shifted top value the check saw).
    """
    m = votes.sum(axis=1, keepdims=True)
    shifted = votes - m * student_probs
    top = shifted.max(axis=1)
    passed = top + rng.normal(0.0, sigma1, votes.shape[0]) >= threshold
    labels = np.full(votes.shape[0], NO_ANSWER)
    if passed.any():
        labels[passed] = gnmax(votes[passed], sigma2, rng)
    confident = (~passed) & (student_probs.max(axis=1) > student_threshold)
    labels[confident] = student_probs[confident].argmax(axis=1)
    return labels, passed, top
