"""Search spaces: the recipes a search draws from, declared before any data are read and public (a user's own from a
JSON file). A candidate is a dict of run settings (the flags of ``bench run``) and ``options`` (the method's); every
candidate is checked, and its run configuration built, before any work.

The built-in spaces are the recipes the committed studies tried on the private data (reports/mnist-best, "How the
recipes were chosen"; reports/dpsgd-recipes; reports/sound-input-private), now drawn from at random and charged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inputdp.core.claims import adjacency_of
from inputdp.core.errors import ConfigError
from inputdp.methods import METHODS

#: what a candidate may set besides ``options`` (the run settings ``bench run`` overrides)
SETTINGS = ("sampling_rate", "steps", "epochs", "lr", "momentum", "optimizer", "model", "norm", "lr_warmup_steps",
            "model_width")

_SCATTER = {"model": "scatter_linear", "norm": "group", "momentum": 0.9, "lr_warmup_steps": 0}
#: DP-SGD on ScatterNet features: the three ScatterNet + linear recipes the best studies chose among (10 and 20 epochs
#: at batch 4096 of 60,000, lr 8; Tramer & Boneh's published Fashion-MNIST recipe, batch 8192, 366 steps, lr 16)
_DPSGD = (
    {**_SCATTER, "sampling_rate": 4096 / 60000, "steps": 150, "lr": 8.0, "options": {"max_grad_norm": 0.1}},
    {**_SCATTER, "sampling_rate": 4096 / 60000, "steps": 300, "lr": 8.0, "options": {"max_grad_norm": 0.1}},
    {**_SCATTER, "sampling_rate": 8192 / 60000, "steps": 366, "lr": 16.0, "options": {"max_grad_norm": 0.1}},
)
_FEATURES = {"model": "scatter_linear", "norm": "group"}
#: DP least squares: the estimators of reports/sound-input-private's selection that came within a point of the best
_DP_LEAST_SQUARES = (
    {**_FEATURES, "options": {"psd": True, "ridge": 0.1}},
    {**_FEATURES, "options": {"psd": True, "ridge": 0.25}},
    {**_FEATURES, "options": {"psd": True, "ridge": 0.5}},
    {**_FEATURES, "options": {"psd": True, "ridge": 0.25, "split": 0.7}},
)
#: feature perturbation: its ridge around the default
_FEATURE_PERTURBATION = tuple({**_FEATURES, "options": {"ridge": r}} for r in (0.5, 1.0, 2.0))
BUILT_IN: Mapping[str, tuple[dict[str, Any], ...]] = {
    "dpsgd": _DPSGD, "dp_least_squares": _DP_LEAST_SQUARES, "feature_perturbation": _FEATURE_PERTURBATION}


@dataclass(frozen=True)
class Space:
    """A method's candidates and where they were declared (``source``: "built-in" or a file's path)."""

    method: str
    candidates: tuple[Mapping[str, Any], ...]
    source: str

    def label(self, i: int) -> str:
        """The candidate in one short line (its settings and options, sorted)."""
        c = self.candidates[i]
        parts = [f"{k}={_short(v)}" for k, v in sorted(c.items()) if k != "options"]
        parts += [f"{k}={_short(v)}" for k, v in sorted(c.get("options", {}).items())]
        return " ".join(parts)


def _short(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def load_space(method: str, path: str | None, fixed_options: Mapping[str, Any]) -> Space:
    """The method's built-in space, or the one in the JSON file at ``path`` (a list of candidates, or {"method": ...,
    "candidates": [...]}), each with ``fixed_options`` (the command's ``--option``s) under its own; refused in one line
    where it is empty or inconsistent."""
    if path is None:
        if method not in BUILT_IN:
            raise ConfigError(f"method {method!r} has no built-in search space (built-in: {', '.join(BUILT_IN)}); "
                              "give one with --space FILE (a JSON list of candidates)")
        raw, source = list(BUILT_IN[method]), "built-in"
    else:
        raw, source = _read(path, method), path
    if not raw:
        raise ConfigError(f"search space {source!r} is empty: give at least one candidate")
    candidates = tuple(_checked(method, c, i, source, fixed_options) for i, c in enumerate(raw))
    _check_consistent(method, candidates, source)
    return Space(method, candidates, source)


def _read(path: str, method: str) -> list:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"--space {path!r} cannot be read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"--space {path!r} is not JSON: {err.msg} at line {err.lineno}") from None
    if isinstance(data, dict):
        if data.get("method", method) != method:
            raise ConfigError(f"--space {path!r} is for method {data['method']!r}, not {method!r}")
        data = data.get("candidates")
    if not isinstance(data, list):
        raise ConfigError(f"--space {path!r} is not allowed: give a JSON list of candidates (or an object with "
                          "\"candidates\")")
    return data


def _checked(method: str, c: Any, i: int, source: str, fixed: Mapping[str, Any]) -> dict[str, Any]:
    where = f"search space {source!r}, candidate {i}"
    if not isinstance(c, dict):
        raise ConfigError(f"{where} is {c!r}: each candidate is an object of run settings and \"options\"")
    unknown = sorted(set(c) - set(SETTINGS) - {"options"})
    if unknown:
        raise ConfigError(f"{where} has {unknown[0]!r}: allowed are {', '.join(SETTINGS)}, options")
    if "steps" in c and "epochs" in c:
        raise ConfigError(f"{where} sets both steps and epochs: give one")
    options = c.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(f"{where} has options={options!r}: an object of the method's options")
    for k, v in c.items():
        if k != "options" and isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{where} has {k}={v!r}: a finite number")
    merged = {**dict(fixed), **options}
    METHODS.get(method).load()(**merged)  # the method refuses an unknown option or value in one line
    return {**{k: v for k, v in c.items() if k != "options"}, "options": merged}


def _check_consistent(method: str, candidates: Sequence[Mapping[str, Any]], source: str) -> None:
    """One relation for the whole search (its claim is about one pair), and no candidate twice (a duplicate is a
    weight the declared space does not show)."""
    defaults = METHODS.get(method).load().option_defaults
    relations = {adjacency_of(c["options"], defaults) for c in candidates}
    if len(relations) > 1:
        raise ConfigError(f"search space {source!r} is inconsistent: its candidates claim under different relations "
                          f"({', '.join(sorted(map(str, relations)))}); one search, one relation")
    seen = set()
    for i, c in enumerate(candidates):
        key = json.dumps(c, sort_keys=True)
        if key in seen:
            raise ConfigError(f"search space {source!r} is inconsistent: candidate {i} repeats an earlier one")
        seen.add(key)
