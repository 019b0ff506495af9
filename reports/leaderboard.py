"""The leaderboard: finished MLflow runs -> tables (Markdown, CSV, HTML) and plots, with the paper side by side.

Runs are grouped by (data set, preset, model, method, epsilon); seeds are aggregated (mean +- std of test
accuracy). Audit runs (tag ``kind = audit``) give measured epsilon lower bounds under two threat models: black-box
(the adversary sees predictions only) and white-box (the released parameters, and their initial values); each
leaderboard row shows the strongest of each over every audit of the same claim (data set, method, epsilon, delta)
and a verdict against the claim.
"""

from __future__ import annotations

import hashlib
import html
import html as html_lib
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd

from inputdp.benchmarks.audits.fdp_bound import DECIDES_MARGIN
from inputdp.benchmarks.audits.one_run import BLACK_BOX
from inputdp.benchmarks.presets import preset_options
from inputdp.benchmarks.sweep import build_config
from inputdp.benchmarks.tracking import default_tracking_uri, open_store
from inputdp.core import names
from inputdp.core.claims import ABSENT, ADD_REMOVE, RELATION_TEXT, RELATION_VALUES, REPLACE_INPUT, relation_named
from inputdp.methods import METHODS, reference_method

from .plots import accuracy_vs_epsilon, time_bars

#: one leaderboard row per recipe and budget: runs at another (q, T) are another configuration, not more seeds
GROUP = ["dataset", "preset", "model", "method", "epsilon", "q", "T"]
THREAT = {
    "nothing": "no privacy",
    "inputs": "inputs private; labels public",
    "inputs and labels": "inputs and labels private",
}


def paper_results() -> pd.DataFrame:
    with resources.files("inputdp.reports").joinpath("paper_results.csv").open() as f:
        return pd.read_csv(f)


def load_runs(tracking_uri: str | None = None, experiment: str = "inputdp") -> pd.DataFrame:
    """Every FINISHED run of the experiment as one row (MLflow ``search_runs`` into pandas)."""

    uri = tracking_uri or default_tracking_uri()
    if open_store(uri, experiment, create=False)[1] is None:
        return pd.DataFrame()
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=[experiment], filter_string="attributes.status = 'FINISHED'",
                              max_results=100000)


def _col(df: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)


def _join_variant(variant: pd.Series, recipe: pd.Series) -> pd.Series:
    v = variant.fillna("").astype(str)
    return v.where(recipe == "", v.where(v == "", v + ",") + recipe)


def _method_label(method: pd.Series, precision: pd.Series, variant: pd.Series | None = None,
                  holdout: pd.Series | None = None) -> pd.Series:
    """A run in another precision than float32 is its own row: "dirichlet_softmax [bf16]"; so is a run of another
    recipe (the method's variant options): "pate [student=semi_supervised]", and a run evaluated on held-out
    training examples instead of the test split: "dpsgd [holdout 5000]" (a recipe search's, not a result)."""
    if variant is not None:
        other = variant.notna() & (variant.astype(str) != "")
        method = method.where(~other, method + " [" + variant.astype(str) + "]")
    if holdout is not None:
        n = pd.to_numeric(holdout, errors="coerce").fillna(0)
        method = method.where(n <= 0, method + " [holdout " + n.astype(int).astype(str) + "]")
    other = precision.notna() & (precision != "float32")
    return method.where(~other, method + " [" + precision.astype(str) + "]")


#: run settings that change a recipe without being a method option (``bench run --optimizer/--lr/--momentum``)
RECIPE_SETTINGS = ("optimizer", "lr", "momentum")


def _preset_recipe(method: str, dataset: str, preset: str) -> dict[str, str] | None:
    """The preset's own optimizer, lr, momentum and lr_rule for this method, as logged (strings); None if unknown."""

    try:
        c = build_config(method=method, dataset=dataset, preset=preset, epsilon=1.0, seed=0)
    except Exception:  # a preset, data set or method this checkout does not know: no baseline to compare with
        return None
    return {**{k: str(getattr(c, k)) for k in RECIPE_SETTINGS},
            "lr_rule": str(preset_options(preset, dataset, method).get("lr_rule", "fixed"))}


def _recipe_suffix(runs: pd.DataFrame) -> pd.Series:
    """"optimizer=sgd,lr=0.05" for a run whose optimizer, lr or momentum differ from its preset's own for that
    method, and "lr_rule=kappa" where its lr_rule does and its variant tag does not say so (runs logged before
    lr_rule was a variant option), so that two recipes never share a leaderboard row."""
    method, dataset, preset = (_col(runs, f"tags.{t}") for t in (names.TAG_METHOD, names.TAG_DATASET, names.TAG_PRESET))
    lr_rule = _col(runs, f"params.{names.PARAM_METHOD_OPTIONS}lr_rule")
    variant = _col(runs, f"tags.{names.TAG_VARIANT}", "").fillna("").astype(str)
    settings = {k: _col(runs, f"params.{k}") for k in RECIPE_SETTINGS}
    baselines: dict[tuple, dict[str, str] | None] = {}
    out = []
    for i in runs.index:
        key = (method[i], dataset[i], preset[i])
        if key not in baselines:
            baselines[key] = _preset_recipe(*map(str, key))
        base, parts = baselines[key], []
        if base is None:
            out.append("")
            continue
        if isinstance(lr_rule[i], str) and lr_rule[i] != base["lr_rule"] and "lr_rule=" not in variant[i]:
            parts.append(f"lr_rule={lr_rule[i]}")
        for k in RECIPE_SETTINGS:
            v = settings[k][i]
            if isinstance(v, str) and _differs(v, base[k]):
                parts.append(f"{k}={v}")
        out.append(",".join(parts))
    return pd.Series(out, index=runs.index, dtype=object)


def _differs(logged: str, own: str) -> bool:
    try:
        return not math.isclose(float(logged), float(own), rel_tol=1e-9)
    except ValueError:
        return logged != own


def _file_stem(dataset: str) -> str:
    """A file name for a data set's plots: a registered name as it is; a path (folder:PATH, npz:FILE) as its last
    part and a short hash of the whole, so that two folders of the same name do not overwrite each other."""
    if re.fullmatch(r"[A-Za-z0-9_.-]+", dataset):
        return dataset
    tail = re.sub(r"[^A-Za-z0-9_.-]+", "_", dataset.rstrip("/").rsplit("/", 1)[-1].split("?")[0])[:40]
    return f"{tail or 'data'}-{hashlib.sha256(dataset.encode()).hexdigest()[:8]}"


def _data_labels(dataset: pd.Series, fingerprint: pd.Series, started: pd.Series) -> pd.Series:
    """The data set's name, and where one name holds different data in the store (a user's files written in
    MNIST's format, say) a letter per content, in the order the store first saw them: those are different rows,
    never one. The letter, not the fingerprint: a report is published, and a hash of the private data is a release
    (THEORY.md, "Normalisation and the data's identity")."""
    fp = fingerprint.fillna("").astype(str)
    frame = pd.DataFrame({"d": dataset, "fp": fp, "t": pd.to_numeric(started, errors="coerce")})
    labels = {}
    for d, g in frame[frame["fp"] != ""].groupby("d"):
        if g["fp"].nunique() > 1:
            order = g.groupby("fp")["t"].min().sort_values(kind="stable").index
            labels.update({(d, f): f"{d} [data {chr(ord('A') + i) if i < 26 else i + 1}]" for i, f in enumerate(order)})
    return pd.Series([labels.get((d, f), d) for d, f in zip(dataset, fp)], index=dataset.index)


#: the runs that audit rather than train: a model's audit and a mechanism's
AUDIT_KINDS = (names.KIND_AUDIT, names.KIND_MECHANISM_AUDIT)


def _mechanism_columns(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """The claim's relation (every run) and what a mechanism audit run logs (``bench audit --mechanism``)."""
    return {"adjacency": _col(runs, f"tags.{names.TAG_PRIVACY_ADJACENCY}", "").fillna(""),
            "mechanism_release": _col(runs, f"tags.{names.TAG_MECHANISM_RELEASE}", "").fillna(""),
            "mechanism_tightness": pd.to_numeric(_col(runs, "metrics." + names.METRIC_MECHANISM.format("tightness")),
                                                   errors="coerce"),
            "mechanism_verdict": _col(runs, f"tags.{names.TAG_MECHANISM_VERDICT}", "").fillna(""),
            "noise_scale": pd.to_numeric(_col(runs, f"params.{names.PARAM_NOISE_SCALE}"), errors="coerce")}


def tidy(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training runs, audit runs), one row per run with plain column names."""
    if runs.empty:
        return pd.DataFrame(columns=[*GROUP, "seed"]), pd.DataFrame()
    kind = _col(runs, f"tags.{names.TAG_KIND}", "train").fillna("train")
    out = pd.DataFrame({
        "run_id": runs["run_id"],
        "dataset": _data_labels(_col(runs, f"tags.{names.TAG_DATASET}"), _col(runs, f"params.{names.PARAM_DATA_FINGERPRINT}"),
                                _col(runs, "start_time")),
        "preset": _col(runs, f"tags.{names.TAG_PRESET}"),
        "model": _col(runs, f"params.{names.PARAM_MODEL}"),
        "method": _method_label(_col(runs, f"tags.{names.TAG_METHOD}"), _col(runs, f"tags.{names.TAG_PRECISION}"),
                                _join_variant(_col(runs, f"tags.{names.TAG_VARIANT}"), _recipe_suffix(runs)),
                                _col(runs, f"params.{names.PARAM_HOLDOUT}")),
        "epsilon": pd.to_numeric(_col(runs, f"params.{names.PARAM_EPSILON}"), errors="coerce"),
        "delta": pd.to_numeric(_col(runs, f"params.{names.PARAM_DELTA}"), errors="coerce"),
        "q": pd.to_numeric(_col(runs, f"params.{names.PARAM_SAMPLING_RATE}"), errors="coerce"),
        "T": pd.to_numeric(_col(runs, f"params.{names.PARAM_STEPS}"), errors="coerce"),
        "seed": _col(runs, f"tags.{names.TAG_SEED}"),
        "method_name": _col(runs, f"tags.{names.TAG_METHOD}"),
        "match_key": _col(runs, f"tags.{names.TAG_MATCH_KEY}"),
        "norm": _col(runs, f"tags.{names.TAG_NORM}"),
        "test_accuracy": _col(runs, f"metrics.{names.METRIC_FINAL_TEST_ACCURACY}"),
        "median_epoch_time_s": _col(runs, f"metrics.{names.METRIC_MEDIAN_EPOCH_TIME}"),
        "total_train_time_s": _col(runs, f"metrics.{names.METRIC_TOTAL_TRAIN_TIME}"),
        "peak_memory_mb": _col(runs, f"metrics.{names.METRIC_PEAK_MEMORY}"),
        "device": _col(runs, f"params.{names.PARAM_DEVICE}", "cpu").fillna("cpu"),
        # 1 where other work shared the cores while the run was timed (0, or absent for runs before the check)
        "contended": pd.to_numeric(_col(runs, f"metrics.{names.METRIC_CONTENDED}"), errors="coerce").fillna(0),
        "epsilon_spent": _col(runs, f"metrics.{names.METRIC_FINAL_EPSILON_SPENT}").fillna(
            _col(runs, f"metrics.{names.METRIC_EPSILON_SPENT}")),
        "epsilon_dd_sanitised": _col(runs, f"metrics.{names.METRIC_EPSILON_DD_SANITISED}"),
        "view": _col(runs, f"tags.{names.TAG_VIEW}", "matched").fillna("matched"),
        "configs_tried": pd.to_numeric(_col(runs, f"tags.{names.TAG_CONFIGS_TRIED}"), errors="coerce"),
        "scope": _col(runs, f"tags.{names.TAG_PRIVACY_SCOPE}"),
        "accountant": _col(runs, f"tags.{names.TAG_PRIVACY_ACCOUNTANT}", "").fillna(""),
        "guarantee": _col(runs, f"tags.{names.TAG_PRIVACY_GUARANTEE}", "").fillna(""),
        "vectors_lb": pd.to_numeric(_col(runs, f"metrics.{names.METRIC_VECTORS_EPSILON_LB}"), errors="coerce"),
        "paper_epsilon": pd.to_numeric(_col(runs, f"metrics.{names.METRIC_PAPER_EPSILON}"), errors="coerce"),
        "protects": _col(runs, f"tags.{names.TAG_PRIVACY_PROTECTS}"),
        "needs_public_data": _col(runs, f"tags.{names.TAG_PRIVACY_NEEDS_PUBLIC_DATA}"),
        "epsilon_lb": _col(runs, f"metrics.{names.METRIC_EPSILON_LB}"),
        "audit_of": _col(runs, f"tags.{names.TAG_AUDIT_OF}"),
        "canary_kind": _col(runs, f"tags.{names.TAG_CANARY_KIND}"),
        "audit_mode": _col(runs, f"tags.{names.TAG_AUDIT_MODE}", "one_run").fillna("one_run"),
        "audit_runs": _col(runs, f"metrics.{names.METRIC_AUDIT_RUNS}"),
        "train_examples": _col(runs, f"params.{names.PARAM_TRAIN_EXAMPLES}"),
        # the claim's relation (a key; runs logged before the tag: read from the adjacency text), and the relation
        # and design an audit built its pairs under (audits logged before #52: the absent design, whatever the claim)
        "relation": _relation_keys(_col(runs, f"tags.{names.TAG_PRIVACY_RELATION}", ""),
                                   _col(runs, f"tags.{names.TAG_PRIVACY_ADJACENCY}", "")),
        "audit_relation": _col(runs, f"tags.{names.TAG_AUDIT_RELATION}", "").fillna(""),
        "audit_design": _col(runs, f"tags.{names.TAG_AUDIT_DESIGN}", ABSENT).fillna(ABSENT),
        "kind": kind,
        **_mechanism_columns(runs),
    })
    _threat_bounds(runs, out)
    audited = out["kind"].isin(AUDIT_KINDS)  # and a study's or sweep's parent run, a speed run: no training
    return out[~audited & ~out["kind"].isin([names.KIND_STUDY, names.KIND_SWEEP, names.KIND_SPEED])].copy(), out[audited].copy()


def _relation_keys(tag: pd.Series, adjacency: pd.Series) -> pd.Series:
    """The claim's relation key per run: its ``privacy.relation`` tag, else the relation its adjacency text names,
    else "" (no relation: a reference run, or a text that names none)."""

    def key(t, a) -> str:
        if isinstance(t, str) and t:
            return t
        try:
            return relation_named(str(a)).key
        except ValueError:
            return ""

    return pd.Series([key(t, a) for t, a in zip(tag, adjacency)], index=tag.index, dtype=object)


def _threat_bounds(runs: pd.DataFrame, out: pd.DataFrame) -> None:
    """Each threat model's bound and ceiling (Steinke's), and the f-DP bounds of the same guesses, into ``out``."""
    best_score = _col(runs, f"tags.{names.TAG_AUDIT_BEST_SCORE}")
    for threat in names.THREATS:
        lb = _col(runs, f"metrics.{names.METRIC_EPSILON_LB}.{threat}")
        ceiling = _col(runs, f"metrics.{names.METRIC_EPSILON_LB_CEILING}.{threat}")
        # audits logged before the split by threat: the best score's class says which one their bound is
        old = lb.isna() & best_score.notna() & (best_score.isin(BLACK_BOX) == (threat == "black_box"))
        out[f"lb_{threat}"] = lb.where(~old, out["epsilon_lb"])
        out[f"ceiling_{threat}"] = ceiling.where(~old, _col(runs, f"metrics.{names.METRIC_EPSILON_LB_CEILING}"))
        # the f-DP bounds of the same guesses (audits logged before them have none)
        for col, metric in ((f"fdp_{threat}", names.METRIC_THREAT_FDP_BOUND),
                            (f"fdp_ceiling_{threat}", names.METRIC_THREAT_FDP_CEILING),
                            (f"gdp_mu_{threat}", names.METRIC_THREAT_GDP_MU),
                            # 1/0 whether any of the threat's tests had power (audits logged before: none said)
                            (f"power_{threat}", names.METRIC_THREAT_POWER)):
            out[col] = pd.to_numeric(_col(runs, f"metrics.{metric.format(threat)}"), errors="coerce")


def _threat(protects: str, needs_public: str) -> str:
    text = THREAT.get(str(protects), str(protects))
    if str(needs_public).lower() == "true":
        text += "; needs public unlabeled inputs"
    return text


def _uncontended_median(g: pd.DataFrame, column: str = "median_epoch_time_s") -> float:
    times = g.loc[g["contended"] != 1, column].astype(float).dropna() if column in g.columns else pd.Series([])
    return float(np.median(times)) if len(times) else math.nan


def _own_loop(method: str) -> bool:
    """Whether a method trains in its own loop (PATE: teachers, votes, student), so that it has no per-step time and
    its "epoch" is the whole run; False for a name this checkout does not know."""

    try:
        return bool(METHODS.get(method).load().capabilities.own_loop)
    except Exception:  # noqa: BLE001 - a plug-in that is not installed here: read its rows as per-step ones
        return False


def speed_ratios(runs: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, float]]:
    """(data set, preset, method) -> its median ratio to the reference, the quartiles of its paired per-step
    ratios and its memory (``ratio``, ``p25``, ``p75``, ``memory_mb``, ``memory_kind``), from the interleaved speed
    runs (kind ``speed``) that were not contended; the latest such run of a (data set, preset) wins."""
    column = f"tags.{names.TAG_KIND}"
    if runs.empty or column not in runs.columns:
        return {}
    speed = runs[runs[column] == names.KIND_SPEED].sort_values("start_time")
    out = {}
    prefix = "metrics." + names.METRIC_SPEED_RATIO.format("")
    for _, r in speed.iterrows():
        if float(r.get(f"metrics.{names.METRIC_CONTENDED}", 0) or 0) == 1:
            continue  # timed while other work shared the cores: not a speed comparison
        for col in runs.columns:
            if col.startswith(prefix) and not pd.isna(r[col]):
                label = col[len(prefix):]
                got = {"ratio": float(r[col])}
                for key, name in (("p25", names.METRIC_SPEED_P25), ("p75", names.METRIC_SPEED_P75),
                                  ("memory_mb", names.METRIC_SPEED_MEMORY)):
                    value = r.get("metrics." + name.format(label))
                    got[key] = math.nan if value is None or pd.isna(value) else float(value)
                got["memory_kind"] = str(r.get(f"params.{names.PARAM_MEMORY_KIND}", "") or "")
                out[(r[f"tags.{names.TAG_DATASET}"], r[f"tags.{names.TAG_PRESET}"], label)] = got
    return out


def leaderboard(train: pd.DataFrame, audits: pd.DataFrame | None = None,
                speed: dict[tuple[str, str, str], dict] | None = None) -> pd.DataFrame:
    if train.empty:
        return pd.DataFrame()
    rows = []
    for key, g in train.groupby(GROUP, dropna=False, sort=True):
        acc = g["test_accuracy"].astype(float)
        row = dict(zip(GROUP, key))
        row.update({
            "delta": g["delta"].iloc[0], "q": g["q"].iloc[0], "T": int(g["T"].iloc[0]),
            "seeds": int(g["seed"].nunique()),
            "view": g["view"].iloc[0],
            "configs_tried": (int(g["configs_tried"].max()) if g["configs_tried"].notna().any() else math.nan),
            "acc_mean": acc.mean(), "acc_std": acc.std(ddof=1) if len(acc) > 1 else 0.0,
            # a contended run's times are not a speed comparison: the median is of the others (NaN if none)
            "median_epoch_time_s": _uncontended_median(g),
            # the time to train one model (an own-loop method's whole pipeline; a per-step method's epochs)
            "median_run_time_s": _uncontended_median(g, "total_train_time_s"),
            "timed_runs": int((g["contended"] != 1).sum()),
            # a run's own memory only where it is attributable (a GPU's torch peak); a CPU process's resident set
            # holds what earlier runs of the process left, so it is not shown (the speed run measures it alone)
            "peak_memory_mb": (float(g["peak_memory_mb"].astype(float).max())
                               if (g["device"].astype(str).str.startswith("cuda")).all() else math.nan),
            "memory_source": ("the run's torch peak (GPU)" if (g["device"].astype(str).str.startswith("cuda")).all()
                              else "not attributable (a CPU process's RSS)"),
            "epsilon_spent": float(g["epsilon_spent"].astype(float).max()) if g["epsilon_spent"].notna().any() else math.inf,
            # PATE: the sanitised data-dependent epsilon, a report beside the claim (largest over the seeds, and
            # the smallest, so that the tables show its spread: the votes, hence the report, differ by seed)
            "epsilon_dd_sanitised": (float(g["epsilon_dd_sanitised"].astype(float).max())
                                     if g["epsilon_dd_sanitised"].notna().any() else math.nan),
            "epsilon_dd_sanitised_min": (float(g["epsilon_dd_sanitised"].astype(float).min())
                                         if g["epsilon_dd_sanitised"].notna().any() else math.nan),
            "scope": g["scope"].iloc[0],
            "accountant": g["accountant"].iloc[0],
            # "false" where the epsilon is not a guarantee of any output; "" for runs logged before the tag existed
            "guarantee": g["guarantee"].iloc[0],
            # a rigorous lower bound on what the released per-example vectors spend (the per-example curve), and
            # the paper's accountant at the same noise (identical over seeds: the calibration is deterministic)
            "vectors_lb": float(g["vectors_lb"].max()) if g["vectors_lb"].notna().any() else math.nan,
            "paper_epsilon": float(g["paper_epsilon"].max()) if g["paper_epsilon"].notna().any() else math.nan,
            "threat_model": _threat(g["protects"].iloc[0], g["needs_public_data"].iloc[0]),
            "match_key": g["match_key"].iloc[0],
            "adjacency": g["adjacency"].iloc[0] if "adjacency" in g.columns else "",
            "relation_key": g["relation"].iloc[0] if "relation" in g.columns else "",
            "protects": g["protects"].iloc[0],
            "method_name": g["method_name"].iloc[0],
        })
        rows.append(row)
    board = pd.DataFrame(rows)
    _time_ratios(board)
    _join_speed(board, speed or {})
    _join_audits(board, audits)
    return board


def _time_ratios(board: pd.DataFrame) -> None:
    """Each row's time as a multiple of the reference's (the registered method that spends no budget, its plain
    recipe) at the same data set and preset, from the sequential runs, and where that figure comes from."""
    reference = reference_method()
    plain = (board["method_name"] == reference) & (board["method"] == reference)
    ref = board[plain].set_index(["dataset", "preset"])
    own = [_own_loop(str(m)) for m in board["method_name"]]
    # compared run for run: an own-loop method (its "epoch" is its whole pipeline) and every row of the own-best
    # view (each method's own q, T and model: neither its epoch nor its step is the reference's); else epoch for epoch
    whole = [o or v == "own_best" for o, v in zip(own, board["view"])]
    board["time_ratio_to_nonprivate"] = [
        (r.median_run_time_s / ref["median_run_time_s"].get((r.dataset, r.preset), np.nan) if w else
         r.median_epoch_time_s / ref["median_epoch_time_s"].get((r.dataset, r.preset), np.nan))
        if (r.dataset, r.preset) in ref.index else np.nan
        for r, w in zip(board.itertuples(), whole)
    ]
    board["speed_source"] = [("whole run, own recipe, sequential runs" if v == "own_best" and not o else
                              "whole run, sequential runs") if w else "sequential runs"
                             for o, v, w in zip(own, board["view"], whole)]


def _join_speed(board: pd.DataFrame, speed: dict[tuple[str, str, str], dict]) -> None:
    """An interleaved measurement of the row's method (a speed run), where there is one, wins over the sequential
    runs' clocks; so does its memory, measured alone (CPU) or as torch's peak (GPU). Not on an own-best row."""
    board["speed_p25"], board["speed_p75"] = math.nan, math.nan
    for i, r in board.iterrows():
        found = speed.get((r["dataset"], r["preset"], r["method"]))
        # an own-best row's recipe is its own (q, T, model): one step at a common batch is not what it costs
        if found is None or r["view"] == "own_best":
            continue
        board.loc[i, "time_ratio_to_nonprivate"] = found["ratio"]
        board.loc[i, "speed_source"] = f"interleaved, quartiles {found['p25']:.2f}-{found['p75']:.2f}"
        board.loc[i, "speed_p25"], board.loc[i, "speed_p75"] = found["p25"], found["p75"]
        if not math.isnan(found["memory_mb"]):
            board.loc[i, "peak_memory_mb"] = found["memory_mb"]
            board.loc[i, "memory_source"] = ("alone in a fresh process (CPU), speed run"
                                             if found["memory_kind"].startswith("CPU: each method alone")
                                             else "torch peak in the speed run (GPU)")


def _same_claim(audits: pd.DataFrame, row) -> pd.DataFrame:
    same_eps = np.isclose(audits["epsilon"].astype(float), float(row["epsilon"]))  # inf matches inf only
    return audits[(audits["dataset"] == row["dataset"]) & (audits["method"] == row["method"]) & same_eps
                  & np.isclose(audits["delta"].astype(float), float(row["delta"]))]


def _model_audits(audits: pd.DataFrame | None) -> pd.DataFrame | None:
    if audits is None or audits.empty:
        return audits
    if "kind" in audits.columns:
        audits = audits[audits["kind"] != names.KIND_MECHANISM_AUDIT]
    return _with_best_bounds(audits)


def _with_best_bounds(audits: pd.DataFrame) -> pd.DataFrame:
    """Per threat model, what the verdicts read: the larger of Steinke's bound and the f-DP bound on the (epsilon,
    delta) curve of the same guesses (both refute an (epsilon, delta) claim; audits logged before the f-DP bound
    have Steinke's alone), its ceiling, and which of the two it is."""
    audits = audits.copy()
    for threat in names.THREATS:
        for col in (f"fdp_{threat}", f"fdp_ceiling_{threat}", f"gdp_mu_{threat}", f"power_{threat}"):
            if col not in audits.columns:
                audits[col] = np.nan
        steinke = pd.to_numeric(audits[f"lb_{threat}"], errors="coerce")
        fdp = pd.to_numeric(audits[f"fdp_{threat}"], errors="coerce")
        fdp_wins = fdp.fillna(-1.0) > steinke.fillna(-1.0) + DECIDES_MARGIN  # as ScoreOutcome.decides
        nothing = (steinke.fillna(0.0) <= 0) & (fdp.fillna(0.0) <= 0)  # both 0: neither decided anything
        audits[f"decides_{threat}"] = np.where(nothing, "", np.where(fdp_wins, "f-DP", "Steinke"))
        audits[f"best_{threat}"] = steinke.where(~fdp_wins, fdp)
        audits[f"best_ceiling_{threat}"] = np.fmax(pd.to_numeric(audits[f"ceiling_{threat}"], errors="coerce"),
                                                   pd.to_numeric(audits[f"fdp_ceiling_{threat}"], errors="coerce"))
    return audits


def _mechanism_audits(audits: pd.DataFrame | None) -> pd.DataFrame:
    if audits is None or audits.empty or "kind" not in audits.columns:
        return pd.DataFrame()
    return audits[audits["kind"] == names.KIND_MECHANISM_AUDIT]


def _same_mechanism(mech: pd.DataFrame, row) -> pd.DataFrame:
    """The mechanism audits of a row's claim at its calibrated noise: the same method, (epsilon, delta, q, T) and
    neighbouring relation (the calibration is a function of these and the method's options)."""
    if mech.empty:
        return mech
    same = ((mech["method_name"] == row["method_name"]) & (mech["adjacency"] == row.get("adjacency", ""))
            & np.isclose(mech["noise_scale"].astype(float), 1.0))
    for col in ("epsilon", "delta", "q", "T"):
        same &= np.isclose(mech[col].astype(float), float(row[col]))
    return mech[same]


def _mechanism_verdict(hit: pd.DataFrame) -> tuple[str, str]:
    """(refuted / tight / not tight, the text) over every audited release of the claim: refuted if any release
    is; tight if every release reaches its fraction (the loosest shown); else not tight."""
    if hit.empty:
        return "", ""
    verdicts = hit["mechanism_verdict"].astype(str)
    if verdicts.str.startswith("refuted").any():
        bad = hit[verdicts.str.startswith("refuted")].iloc[0]
        return "refuted", f"refuted at the mechanism ({bad['mechanism_release']})"
    loosest = hit.loc[hit["mechanism_tightness"].astype(float).idxmin()]
    releases = "; ".join(sorted(set(hit["mechanism_release"].astype(str))))
    if verdicts.str.startswith("tight").all():
        return "tight", f"tight to {float(loosest['mechanism_tightness']):.2f} at the mechanism ({releases})"
    return "not tight", f"not tight at the mechanism ({float(loosest['mechanism_tightness']):.2f} of the claim)"


def _join_audits(board: pd.DataFrame, audits: pd.DataFrame | None) -> None:
    """Per row and threat model: the strongest bound over every audit of the same claim (data set, method,
    epsilon, delta; any model or (q, T)) whose neighbouring pairs follow the claim's relation, how many audits and of
    which kinds, and the verdict in four words, the relation named: refuted (the model's audit or the mechanism's),
    tight to X (the mechanism audit reaches its fraction of the claim and the model's audit does not refute it), not
    refuted (ceiling X: the most the tests that had power could show), or no power (no test's guesses could depend
    on the run). An audit whose design is not the claim's relation's (the absent canaries of add/remove against a
    replace_input claim) tests a statement the claim does not make: it is not counted, and the verdict says so.

    Each audit is its own 95% statement; the largest of n is not itself a 95% bound, so their number is shown."""
    mech = _mechanism_audits(audits)
    audits = _model_audits(audits)
    board["mechanism audit"] = ""
    for threat in names.THREATS:
        board[f"{threat}_lb"] = np.nan
        board[f"{threat}_ceiling"] = np.nan
        board[f"{threat}_audits"] = 0
        board[f"{threat}_kinds"] = ""
    board["verdict"] = ""
    for i, r in board.iterrows():
        hit = _same_claim(audits, r) if audits is not None and not audits.empty else pd.DataFrame()
        hit, other_design = _by_design(hit, r)
        claimed = float(r["epsilon"])
        best_lb, best_threat, ceiling, decides, powered = -1.0, "", 0.0, "", False
        for threat in names.THREATS:
            got = hit[hit[f"lb_{threat}"].notna()] if not hit.empty else hit
            if got.empty:
                continue
            power = pd.to_numeric(got[f"power_{threat}"], errors="coerce").fillna(1.0) > 0
            powered |= bool(power.any())
            # the larger of Steinke's and the f-DP bound of each audit (both refute an (epsilon, delta) claim)
            lb = float(got[f"best_{threat}"].astype(float).max())
            board.loc[i, f"{threat}_lb"] = lb
            # the ceiling of the tests that had power (a test without power cannot reach its own)
            threat_ceiling = float(got.loc[power, f"best_ceiling_{threat}"].astype(float).max()) if power.any() else 0.0
            board.loc[i, f"{threat}_ceiling"] = threat_ceiling
            board.loc[i, f"{threat}_audits"] = len(got)
            board.loc[i, f"{threat}_kinds"] = "; ".join(sorted(set(_audit_label(a) for a in got.itertuples())))
            ceiling = max(ceiling, threat_ceiling)
            if lb > best_lb:
                best_lb, best_threat = lb, threat
                decides = str(got.loc[got[f"best_{threat}"].astype(float).idxmax(), f"decides_{threat}"])
        word, text = _mechanism_verdict(_same_mechanism(mech, r)) if math.isfinite(claimed) else ("", "")
        board.loc[i, "mechanism audit"] = text
        audited = _audited(r, _ModelAudits(best_lb, best_threat, ceiling, decides, powered, other_design), word, text)
        board.loc[i, "verdict"] = "; ".join(v for v in (_vectors_verdict(r), audited) if v)


@dataclass(frozen=True)
class _ModelAudits:
    """What a row's model audits (those under its claim's relation) found, for its verdict."""

    best_lb: float
    best_threat: str  # "" where none
    ceiling: float  # of the tests that had power
    decides: str
    powered: bool
    other_design: int  # audits with another design, not counted


def _audited(r, a: _ModelAudits, word: str, text: str) -> str:
    """The verdict of the model's audits and the mechanism's, in four words, the relation named."""
    claimed = float(r["epsilon"])
    under = _under(r)
    model_said = (f"not refuted (ceiling {a.ceiling:.2f}){under}" if a.powered
                  else f"no power{under}: every test's guesses were fixed on one side or its scores all equal")
    if not math.isfinite(claimed):
        return "no claim (reference)" if a.best_threat else ""
    if a.best_threat and a.best_lb > claimed:
        audited = (f"claim refuted for the released model ({a.best_threat.replace('_', '-')} {a.best_lb:.2f} > "
                   f"{claimed:g}, {a.decides}){under}")
    elif word == "refuted":
        audited = f"claim {text}"
    elif word == "tight":
        audited = text + (f"; the model's audit: {model_said}" if a.best_threat else "; the model not audited")
    elif not a.best_threat:
        audited = "not audited" + (under if a.other_design else "") + (f" ({text})" if text else "")
    else:
        audited = model_said + (f"; {text}" if text else "")
    if a.other_design:
        audited += (f"; {a.other_design} audit{'s' if a.other_design > 1 else ''} with add/remove's absent canaries "
                    "not counted: they do not test a replace_input claim")
    return audited


def _row_design(row) -> str:
    rel = RELATION_VALUES.get(str(row.get("relation_key", "") or ""))
    return rel.excluded if rel is not None else ABSENT


def _under(row) -> str:
    """" under replace_input" where the row's claim names a relation, else ""."""
    key = str(row.get("relation_key", "") or "")
    return f" under {key}" if key in RELATION_VALUES else ""


def _by_design(hit: pd.DataFrame, row) -> tuple[pd.DataFrame, int]:
    """(the audits whose design is the row's relation's, how many others): an audit logged before the relation
    was read built the absent design whatever the claim."""
    if hit.empty or "audit_design" not in hit.columns:
        return hit, 0
    same = hit["audit_design"].fillna(ABSENT).astype(str) == _row_design(row)
    return hit[same], int((~same).sum())


def _vectors_verdict(row) -> str:
    """What the per-example curve says of a claim about per-example vectors (empty for other claims)."""
    lb, claimed = row.get("vectors_lb", math.nan), float(row["epsilon"])
    if pd.isna(lb) or not math.isfinite(claimed):
        return ""
    if lb > claimed * (1 + 1e-6):
        return (f"the {row['accountant'] or 'claimed'} epsilon is refuted for the released vectors: they spend at "
                f"least {lb:.2f}")
    return "not a guarantee: a lower bound on what the vectors spend (per-example curve)"


def _audit_label(a) -> str:
    """"exclusive_support on mlp, 400 runs" / "random_pattern on small_cnn"."""
    text = f"{a.canary_kind} on {a.model}"
    if a.audit_mode == "multi_run" and not pd.isna(a.audit_runs):
        text += f", {int(a.audit_runs)} runs"
    return text


def audit_table(audits: pd.DataFrame) -> pd.DataFrame:
    """One row per audit run: what it audited, with what, and both threat models' bounds next to the claim."""
    audits = _model_audits(audits)
    if audits is None or audits.empty:
        return pd.DataFrame()
    rows = []

    def cell(a, threat: str) -> str:
        lb, ceiling = getattr(a, f"lb_{threat}"), getattr(a, f"ceiling_{threat}")
        return "" if pd.isna(lb) else f"{float(lb):.2f} (ceiling {float(ceiling):.2f})"

    def fdp_cell(a, threat: str) -> str:
        lb, ceiling = getattr(a, f"fdp_{threat}"), getattr(a, f"fdp_ceiling_{threat}")
        mu = getattr(a, f"gdp_mu_{threat}")
        if pd.isna(lb):
            return ""
        return f"{float(lb):.2f} (ceiling {float(ceiling):.2f}); mu >= {float(mu):.2f}"

    for a in audits.sort_values(["dataset", "method", "epsilon", "model", "audit_mode"]).itertuples():
        claimed = float(a.epsilon)
        best = max((float(v) for v in (a.best_black_box, a.best_white_box) if not pd.isna(v)), default=math.nan)
        decides = a.decides_white_box if (pd.isna(a.best_black_box) or (not pd.isna(a.best_white_box)
                                          and float(a.best_white_box) >= float(a.best_black_box))) else a.decides_black_box
        powered = any(not pd.isna(getattr(a, f"lb_{t}")) and (pd.isna(getattr(a, f"power_{t}", math.nan))
                                                              or float(getattr(a, f"power_{t}")) > 0)
                      for t in names.THREATS)
        verdict = ("no claim" if not math.isfinite(claimed) else "" if math.isnan(best)
                   else "refuted" if best > claimed else "not refuted" if powered else "no power")
        relation = str(getattr(a, "audit_relation", "") or "") or "(not logged: before #52)"
        subset = "all" if pd.isna(a.train_examples) or str(a.train_examples) in ("0", "") else str(a.train_examples)
        rows.append({"dataset": a.dataset, "method": a.method,
                     "epsilon": "∞ (none)" if not math.isfinite(claimed) else f"{claimed:g}",
                     "model": a.model, "preset": a.preset, "train examples": subset, "q": f"{float(a.q):.5g}",
                     "T": int(a.T), "seed": a.seed, "canary": a.canary_kind,
                     "audit": ("multi-run" + ("" if pd.isna(a.audit_runs) else f", {int(a.audit_runs)} runs"))
                     if a.audit_mode == "multi_run" else "one run",
                     "black-box epsilon_lb": cell(a, "black_box"), "white-box epsilon_lb": cell(a, "white_box"),
                     "black-box f-DP": fdp_cell(a, "black_box"), "white-box f-DP": fdp_cell(a, "white_box"),
                     "relation, design": f"{relation}, {getattr(a, 'audit_design', ABSENT)}",
                     "decides": decides if verdict else "", "verdict": verdict})
    return pd.DataFrame(rows)


#: a method's peak memory where it is attributable: torch's peak on a GPU; on a CPU the peak resident set of a fresh
#: process that ran only that method (the study's speed run); a CPU run's own RSS holds what earlier runs of its
#: process left and is not shown
MEMORY = "peak memory MB (how measured)"
#: the table read at a glance: one row per (data set, method and recipe, epsilon), in the order a reader asks
#: short cells only: which accountant, the neighbouring relation, whether the epsilon is a guarantee of the released
#: model, the two bounds and the verdict in a few words; the full texts are in the details (and, in the HTML, each
#: short cell's tooltip: TOOLTIPS)
GLANCE = ["dataset", "method", "epsilon", "accuracy % (n)", "speed (x non-private)", "accountant", "relation",
          "guarantee", "black-box lb", "white-box lb", "verdict"]
#: and its details, row for row
DETAILS = ["dataset", "method", "epsilon", "preset", "view", "model", "q", "T", "delta", "seeds",
           "configs tried", "median_epoch_time_s", MEMORY, "epsilon_spent", "vectors spend at least",
           "paper's accountant at this noise", "sanitised data-dependent epsilon", "threat_model",
           "the claim and what it covers", "black-box epsilon_lb", "white-box epsilon_lb", "mechanism audit",
           "verdict in full"]
#: the glance table's short cells and the full text each one's HTML tooltip shows
TOOLTIPS = {"accountant": "the claim and what it covers", "guarantee": "the claim and what it covers",
            "black-box lb": "black-box epsilon_lb", "white-box lb": "white-box epsilon_lb", "verdict": "verdict in full"}
#: the neighbouring relations, as the glance table names them (a run logs the relation's key or its text)
RELATION_SHORT = {ADD_REMOVE: "add/remove", REPLACE_INPUT: "replace one input",
                  RELATION_TEXT[ADD_REMOVE]: "add/remove", RELATION_TEXT[REPLACE_INPUT]: "replace one input"}
COLUMNS = ["dataset", "preset", "view", "model", "method", "epsilon", "accountant", "delta", "q", "T", "seeds",
           "configs tried", "test_accuracy",
           "median_epoch_time_s", "time_ratio_to_nonprivate", "peak_memory_mb", "epsilon_spent",
           "vectors spend at least", "paper's accountant at this noise",
           "sanitised data-dependent epsilon", "scope",
           "threat_model", "black-box epsilon_lb", "white-box epsilon_lb", "verdict"]


def display_table(board: pd.DataFrame) -> pd.DataFrame:
    t = board.copy()
    t["test_accuracy"] = [f"{100 * m:.2f} ± {100 * s:.2f}" for m, s in zip(t["acc_mean"], t["acc_std"])]
    t["epsilon"] = ["∞ (none)" if not math.isfinite(e) else f"{e:g}" for e in t["epsilon"]]
    t["epsilon_spent"] = ["∞" if not math.isfinite(e) else f"{e:.3f}" for e in t["epsilon_spent"]]
    t["configs tried"] = ["" if pd.isna(n) else str(int(n)) for n in t["configs_tried"]]
    t["sanitised data-dependent epsilon"] = [  # its range over the seeds; one value where they agree
        "" if pd.isna(hi) else f"{hi:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f} to {hi:.3f}"
        for lo, hi in zip(t["epsilon_dd_sanitised_min"], t["epsilon_dd_sanitised"])]
    for col in ("vectors_lb", "paper_epsilon", "accountant", "guarantee", "mechanism audit"):
        if col not in t.columns:  # a board built from runs logged before these existed
            t[col] = math.nan if col in ("vectors_lb", "paper_epsilon") else ""
    t["vectors spend at least"] = ["" if pd.isna(e) else f"{e:.3f}" for e in t["vectors_lb"]]
    t["paper's accountant at this noise"] = ["" if pd.isna(e) else f"{e:.3f}" for e in t["paper_epsilon"]]
    t["accountant"] = [f"{a} (not a guarantee)" if str(g) == "false" and a else a
                       for a, g in zip(t["accountant"], t["guarantee"])]
    t["q"] = [f"{q:.5g}" for q in t["q"]]
    # NaN: every run of the row was timed while other work shared the cores (not a speed comparison)
    t["median_epoch_time_s"] = ["contended" if pd.isna(x) else f"{x:.2f}" for x in t["median_epoch_time_s"]]
    t["time_ratio_to_nonprivate"] = ["" if pd.isna(x) else f"{x:.2f}" for x in t["time_ratio_to_nonprivate"]]
    t["peak_memory_mb"] = ["" if pd.isna(x) else f"{x:.0f}" for x in t["peak_memory_mb"]]
    source = t["memory_source"] if "memory_source" in t.columns else pd.Series("", index=t.index)
    t[MEMORY] = [f"{m} ({s})" if m else str(s) for m, s in zip(t["peak_memory_mb"], source)]
    for threat in names.THREATS:
        t[f"{threat.replace('_', '-')} epsilon_lb"] = [
            "" if pd.isna(x) else f"{x:.2f} ({kinds})" if n == 1 else f"{x:.2f} (largest of {n}: {kinds})"
            for x, n, kinds in zip(t[f"{threat}_lb"], t[f"{threat}_audits"], t[f"{threat}_kinds"])]
    # one seed has no spread to show: "98.88 (1)", not "± 0.00"
    t["accuracy % (n)"] = [f"{100 * m:.2f} ± {100 * s:.2f} ({int(n)})" if n > 1 else f"{100 * m:.2f} (1)"
                           for m, s, n in zip(t["acc_mean"], t["acc_std"], t["seeds"])]
    source = t["speed_source"] if "speed_source" in t.columns else pd.Series("sequential runs", index=t.index)
    t["speed (x non-private)"] = ["" if r == "" else f"{r} ({s})" for r, s in zip(t["time_ratio_to_nonprivate"], source)]
    # the claim in full, caveat included: which accountant, and every released value it covers and does not
    t["the claim and what it covers"] = [f"{a}: {s}" if a else str(s) for a, s in zip(t["accountant"], t["scope"])]
    _short_cells(t)
    t["covers"] = [covers_model(g, v) for g, v in zip(t["guarantee"], t["verdict in full"])]
    order = {SOUND: 0, REFERENCE: 1, NO_GUARANTEE: 2}
    return t.iloc[sorted(range(len(t)), key=lambda i: order[t["covers"].iloc[i]])]


#: what a row's claim covers, which groups the tables and styles the plots: a guarantee of the released model that no
#: audit refutes; the non-private reference; no guarantee of the model (the claim says so, or an audit refutes it)
SOUND, REFERENCE, NO_GUARANTEE = "sound", "reference", "no guarantee"
GROUP_TITLES = {SOUND: "Sound for the released model", REFERENCE: "The non-private reference",
                NO_GUARANTEE: "No guarantee for the released model (the claim says so, or an audit refutes it)"}


def covers_model(guarantee: str, verdict: str) -> str:
    """The row's group from its glance "guarantee" cell ("yes", "no", "" for the reference) and its full verdict."""
    if not guarantee:
        return REFERENCE
    refuted = "refuted" in str(verdict) and "not refuted" not in str(verdict)
    return SOUND if guarantee == "yes" and not refuted else NO_GUARANTEE


def _short_cells(t: pd.DataFrame) -> None:
    """The glance table's cells: a few words each (their full texts stay in the details)."""
    private = [math.isfinite(float(e)) for e in t["epsilon"].replace("∞ (none)", "inf")]
    t["accountant"] = [str(a).split(" (")[0] if p else "" for a, p in zip(t["accountant"], private)]
    adjacency = t["adjacency"] if "adjacency" in t.columns else pd.Series("", index=t.index)
    t["relation"] = [RELATION_SHORT.get(str(a), "" if pd.isna(a) else str(a)) if p else ""
                     for a, p in zip(adjacency, private)]
    t["guarantee"] = ["" if not p else "no" if str(g) == "false" else "yes" for g, p in zip(t["guarantee"], private)]
    for threat in names.THREATS:
        t[f"{threat.replace('_', '-')} lb"] = [
            "" if pd.isna(x) else f"{x:.2f}" if n == 1 else f"{x:.2f} ({n} audits)"
            for x, n in zip(t[f"{threat}_lb"], t[f"{threat}_audits"])]
    t["verdict in full"] = t["verdict"]
    t["verdict"] = [short_verdict(v) for v in t["verdict"]]


def short_verdict(full: str) -> str:
    """The verdict in a few words: refuted (and by what), tight to X, not refuted (ceiling X), no claim, not audited."""
    v = str(full)
    if "no claim" in v:
        return "no claim"
    model = re.search(r"refuted for the released model \((?:[a-z-]+ )?([0-9.]+) > ([0-9.e+]+)", v)
    if model:
        return f"refuted ({model.group(1)} > {model.group(2)})"
    if re.search(r"(^|; )no power", v) and "tight to" not in v:
        return "no power"
    if "refuted at the mechanism" in v:
        return "refuted at the mechanism"
    tight = re.search(r"tight to ([0-9.]+)", v)
    if tight:
        return f"tight to {tight.group(1)}"
    ceiling = re.search(r"not refuted \(ceiling ([0-9.]+)\)", v)
    if ceiling:
        return f"not refuted (ceiling {ceiling.group(1)})"
    if "not tight" in v:
        return "not tight"
    return "not audited" if "not audited" in v else ""


def paper_side_by_side(board: pd.DataFrame) -> pd.DataFrame:
    """Published figures (the main paper's and the literature's, ``paper_results.csv``) next to the measured row of
    the same data set, method and epsilon. Comparable means the same model and budget, run by the preset that
    reproduces that recipe (the ``preset`` column: ``paper`` for the main paper's, ``best`` for the published
    DP-SGD recipes it carries); otherwise the row says what differs."""
    paper = paper_results()
    rows = []
    for p in paper.itertuples():
        eps = float(p.epsilon) if not pd.isna(p.epsilon) else None
        measured = board[(board["dataset"] == p.dataset) & (board["method"] == p.method)]
        if eps is not None:
            measured = measured[np.isclose(measured["epsilon"].astype(float), eps)]
        want = "" if pd.isna(getattr(p, "preset", np.nan)) else str(p.preset)
        if want and (measured["preset"] == want).any():
            measured = measured[measured["preset"] == want]
        if (measured["model"].astype(str) == str(p.model)).any():  # the row of the published model, if measured
            measured = measured[measured["model"].astype(str) == str(p.model)]
        value, comparable = "", "no run"
        if not measured.empty:
            m = measured.iloc[0]
            value = (f"{100 * m['acc_mean']:.2f}%" if p.metric == "test_accuracy"
                     else f"{m['median_epoch_time_s']:.1f} s")
            differs = []
            if not want:  # no preset of the suite reproduces the published recipe
                differs.append(f"our recipe (preset {m['preset']}), not the published one")
            elif m["preset"] != want:
                differs.append(f"preset {m['preset']}, not {want}")
            if p.metric == "test_accuracy" and str(m["model"]) != str(p.model):
                differs.append(f"model {m['model']} vs {p.model}")
            comparable = "yes" if not differs else "not comparable (" + ", ".join(differs) + ")"
        published = f"{100 * p.value:.2f}%" if p.metric == "test_accuracy" else f"~{p.value:g} s"
        rows.append({"dataset": p.dataset, "method": p.method, "epsilon": "" if eps is None else f"{eps:g}",
                     "metric": p.metric, "model": p.model, "extra data": getattr(p, "extra_data", ""),
                     "published": published, "source": p.source, "measured": value, "comparable": comparable})
    return pd.DataFrame(rows)


def _grouped_markdown(glance: pd.DataFrame, covers: pd.Series) -> list[str]:
    """The glance table as one table per group (sound, reference, no guarantee), so that a row whose claim does
    not cover the model is never read among the sound ones."""
    lines = []
    for group, title in GROUP_TITLES.items():
        rows = glance[(covers == group).to_numpy()]
        if not rows.empty:
            lines += [f"### {title}", "", to_markdown(rows), ""]
    return lines


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


@dataclass
class ReportFiles:
    markdown: Path
    csv: Path
    html: Path
    plots: list[Path]


AUDIT_NOTE = (
    "Black-box: the adversary sees the trained model's predictions; white-box: its parameters and their initial "
    "values. Each bound is a 95% lower bound on the epsilon of what was audited (the trained parameters); a row of "
    "the leaderboard shows the strongest over every audit of the same claim (data set, method, epsilon, delta), "
    "with their number, and the largest of several is not itself a 95% bound. 'Refuted' means a bound exceeds the "
    "claimed epsilon: the claim does not extend to the released model (for dirichlet_softmax and "
    "gaussian_penultimate no epsilon is a guarantee of any output of the training: methods/THEORY.md, 'Per-example "
    "releases under Poisson sampling'; their rows also carry the rigorous lower bound on what their released "
    "vectors spend, 'vectors spend at least'). 'Not refuted' proves nothing; the ceiling is the largest bound those "
    "audits could have shown. 'No power': no test's guesses could depend on the run (every fixed guess on one side), "
    "so its count is the inclusion coins and no ceiling is shown. Every audit builds its neighbouring pairs under "
    "its claim's relation ('relation, design': absent canaries for add/remove, replaced in their slots for "
    "replace_input); an audit whose design is not its row's claim's is not counted in the leaderboard.")


VIEW_NOTE = (
    "Two views: 'matched' rows run every method at one (q, T) of their preset; 'own_best' rows run each method at "
    "its own best recipe (its own q, T, model and optimiser) at the same (epsilon, delta), and is timed by its whole "
    "run against the reference's (its epochs and steps are not the reference's). 'configs tried' counts the "
    "configurations tried to choose a row's recipe: choosing among them on the private data is itself not free "
    "(Papernot & Steinke 2022), and no row's epsilon includes it. A published recipe counts as 1; its authors' own "
    "search is not counted.")


def smoke_banner(board: pd.DataFrame) -> str:
    """The banner of a report with smoke-size runs: their numbers are plumbing, not a comparison of methods."""
    if not board.empty and (board["preset"].astype(str) == "smoke").any():
        return ("Smoke-size runs (the smoke preset: 2,000 examples, a few steps): plumbing, not a comparison; "
                "no ranking of methods follows from them")
    return ""


def _plots(board: pd.DataFrame, out: Path) -> list[Path]:
    """One pair of plots per (data set, preset): runs of different presets are never drawn on one line."""

    plots: list[Path] = []
    pairs = sorted(board[["dataset", "preset"]].dropna().drop_duplicates().itertuples(index=False)) if not board.empty else []
    for dataset, preset in pairs:
        sub = board[(board["dataset"] == dataset) & (board["preset"] == preset)]
        stem = _file_stem(dataset)
        plots.append(accuracy_vs_epsilon(sub, out / f"accuracy_vs_epsilon_{stem}_{preset}.png", dataset))
        plots.append(time_bars(sub, out / f"time_{stem}_{preset}.png", dataset))
    return plots


def _split_published(side: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(published results with a comparable run, the rest): the rest is folded away, not a wall of "no run"."""
    if side.empty or "comparable" not in side.columns:
        return side, pd.DataFrame()
    ok = side["comparable"].astype(str).str.startswith("yes")
    return side[ok], side[~ok]


def verdict_class(verdict: str) -> str:
    """The colour class of a verdict: refuted or not a guarantee (red), not refuted (green), no claim (grey)."""
    v = str(verdict)
    if "refuted" in v and "not refuted" not in v or "not a guarantee" in v:
        return "bad"
    if "not refuted" in v or v.startswith("tight"):
        return "ok"
    return "none"


_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.style.cursor = 'pointer';
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var asc = th.dataset.order !== 'asc';
      var key = function (r) { var t = r.cells[col].innerText.trim(); var x = parseFloat(t.replace('∞', 'Infinity'));
                               return isNaN(x) ? t : x; };
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        var c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
        return asc ? c : -c; });
      rows.forEach(function (r) { body.appendChild(r); });
      table.querySelectorAll('th').forEach(function (h) { delete h.dataset.order; });
      th.dataset.order = asc ? 'asc' : 'desc';
    });
  });
});
var m = location.hash.match(/sort=(\\d+)/);  // a link (or a test) can open the page sorted by a column
if (m) { document.querySelector('table.sortable th:nth-child(' + (parseInt(m[1]) + 1) + ')').click(); }
"""


def _html_table(df: pd.DataFrame, *, sortable: bool = False, titles: dict[str, pd.Series] | None = None) -> str:
    if titles:
        return _html_table_with_titles(df, titles, sortable=sortable)
    html = df.to_html(index=False, escape=True, classes="sortable" if sortable else None, border=0)
    if "verdict" in df.columns:  # colour each verdict cell by its class
        for v in df["verdict"].astype(str).unique():
            html = html.replace(f"<td>{_escape(v)}</td>", f'<td class="verdict {verdict_class(v)}">{_escape(v)}</td>')
    return html


def _html_table_with_titles(df: pd.DataFrame, titles: dict[str, pd.Series], *, sortable: bool) -> str:
    """The table with each cell of a column in ``titles`` carrying its full text as a tooltip (``title``)."""
    head = "".join(f"<th>{_escape(str(c))}</th>" for c in df.columns)
    rows = []
    for i, row in df.iterrows():
        cells = []
        for c in df.columns:
            value = "" if pd.isna(row[c]) else str(row[c])
            if c == "verdict":  # coloured by the full verdict: a row without a guarantee stays red when not refuted
                attrs = f' class="verdict {verdict_class(str(titles[c].loc[i]) if c in titles else value)}"'
            else:
                attrs = ""
            if c in titles and str(titles[c].loc[i]):
                attrs += f' title="{html_lib.escape(str(titles[c].loc[i]), quote=True)}"'
            cells.append(f"<td{attrs}>{_escape(value)}</td>")
        group = str(titles["covers"].loc[i]) if "covers" in titles else ""
        row_class = ' class="noguarantee"' if group == NO_GUARANTEE else ""
        rows.append(f"<tr{row_class}>{''.join(cells)}</tr>")
    cls = ' class="dataframe sortable"' if sortable else ' class="dataframe"'
    return f"<table border=\"0\"{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _html(title, stamp, banner, glance, details, audited, comparable, other, plots, tips=None) -> str:
    imgs = "".join(f'<p><img src="{p.name}" alt="{p.stem}" width="640"></p>' for p in plots)
    style = ("body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top} th{background:#eee}"
             ".banner{background:#fff3cd;border:1px solid #e0c36c;padding:8px 12px}"
             ".verdict.bad{background:#f8d7da} .verdict.ok{background:#d4edda} .verdict.none{color:#666}"
             # a row whose claim does not cover the released model: greyed, never drawn like a sound one
             "tr.noguarantee td{color:#777;font-style:italic;background:#f6f6f6}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_escape(title)}</title>",
             f"<style>{style}</style></head><body><h1>{_escape(title)}</h1>"]
    if banner:
        parts.append(f'<p class="banner"><b>{_escape(banner)}</b></p>')
    if stamp:
        parts.append(f"<p>{_escape(stamp)}</p>")
    parts.append(_html_table(glance, sortable=True, titles=tips) if not glance.empty else "<p>(no finished runs)</p>")
    parts.append(f"<h2>Details</h2>{_html_table(details)}" if not details.empty else "")
    if not audited.empty:
        parts.append(f"<h2>Privacy audits: both threat models</h2><p>{_escape(AUDIT_NOTE)}</p>{_html_table(audited)}")
    if not comparable.empty:
        parts.append(f"<h2>Published results side by side</h2>{_html_table(comparable)}")
    if not other.empty:
        parts.append(f"<details><summary>{len(other)} published results with no comparable run here</summary>"
                     f"{_html_table(other)}</details>")
    parts.append(f"{imgs}<script>{_SORT_JS}</script></body></html>\n")
    return "".join(parts)


def write_audit_report(audits: pd.DataFrame, out: Path, *, stamp: str = "") -> list[Path]:
    """A store of model audits alone: every audit as a row (``audits.csv``, ``audits.md``), both threat models,
    Steinke's and the f-DP bound of the same guesses."""
    out.mkdir(parents=True, exist_ok=True)
    table = audit_table(audits)
    csv, md = out / "audits.csv", out / "audits.md"
    table.to_csv(csv, index=False)
    lines = ["# Model audits", ""] + ([stamp, ""] if stamp else []) + [AUDIT_NOTE, "", to_markdown(table)]
    md.write_text("\n".join(lines) + "\n")
    return [csv, md]


def write_report(board: pd.DataFrame, out: Path, *, title: str = "inputdp leaderboard", stamp: str = "",
                 audits: pd.DataFrame | None = None) -> ReportFiles:
    out.mkdir(parents=True, exist_ok=True)
    shown = display_table(board) if not board.empty else pd.DataFrame(columns=[*GLANCE, *DETAILS])
    glance, details = shown[GLANCE], shown[DETAILS]
    side = paper_side_by_side(board) if not board.empty else pd.DataFrame()
    audited = audit_table(audits) if audits is not None else pd.DataFrame()
    csv = out / "leaderboard.csv"
    raw = board.drop(columns=["match_key"], errors="ignore")
    raw.to_csv(csv, index=False)
    if not audited.empty:
        audited.to_csv(out / "audits.csv", index=False)
    plots = _plots(board, out)
    banner = smoke_banner(board)
    md = out / "leaderboard.md"
    lines = [f"# {title}", ""] + ([f"> **{banner}**", ""] if banner else []) + ([stamp, ""] if stamp else [])
    lines += _grouped_markdown(glance, shown["covers"]) if not glance.empty else ["(no finished runs)", ""]
    if not glance.empty:
        lines += [VIEW_NOTE, "", "## Details", "", to_markdown(details), ""]
    if not audited.empty:
        lines += ["## Privacy audits: both threat models", "", AUDIT_NOTE, "", to_markdown(audited), ""]
    comparable, other = _split_published(side)
    if not comparable.empty:
        lines += ["## Published results side by side", "", to_markdown(comparable), ""]
    if not other.empty:
        lines += [f"{len(other)} published results have no comparable run here (leaderboard.html lists them).", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    md.write_text("\n".join(lines) + "\n")
    html = out / "leaderboard.html"
    tips = {**{c: shown[full] for c, full in TOOLTIPS.items()}, "covers": shown["covers"]} if not glance.empty else None
    html.write_text(_html(title, stamp, banner, glance, details, audited, comparable, other, plots, tips))
    return ReportFiles(md, csv, html, plots)
