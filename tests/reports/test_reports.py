"""The leaderboard from a real sqlite MLflow store filled by real smoke runs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inputdp.benchmarks.cli import main
from inputdp.benchmarks.resolve import check_feasible
from inputdp.benchmarks.sweep import Overrides, expand, run_sweep
from inputdp.core.config import PerfFlags
from inputdp.reports.leaderboard import audit_table, display_table, leaderboard, load_runs, paper_results, tidy, write_report

ROOT = Path(__file__).resolve().parents[2]

METHODS = ["nonprivate", "dirichlet_softmax", "gaussian_penultimate"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    configs = expand(methods=METHODS, dataset="synthetic", preset="smoke", epsilons=[1, 4], seeds=[0, 1],
                     overrides=Overrides(epochs=1))
    run_sweep(check_feasible(configs), tracking_uri=uri, perf=PerfFlags(device="cpu", progress=False))
    return uri


@pytest.mark.slow
def test_leaderboard_groups_seeds(store):
    train, audits = tidy(load_runs(store))
    assert len(train) == 2 + 4 + 4 and audits.empty
    board = leaderboard(train, audits)
    assert set(board["method"]) == set(METHODS)
    assert (board["seeds"] == 2).all() and len(board) == 5
    row = board[(board["method"] == "dirichlet_softmax") & (board["epsilon"] == 1)].iloc[0]
    accs = train[(train["method"] == "dirichlet_softmax") & (train["epsilon"] == 1)]["test_accuracy"]
    assert row["acc_mean"] == pytest.approx(accs.mean()) and row["acc_std"] == pytest.approx(accs.std(ddof=1))
    assert 0.98 <= row["epsilon_spent"] <= 1.0 and row["threat_model"].startswith("inputs private")
    ref = board[board["method"] == "nonprivate"].iloc[0]
    assert math.isinf(ref["epsilon"])
    if ref["timed_runs"] > 0:  # its own ratio is 1; all of its runs timed under contention: no ratio at all
        assert ref["time_ratio_to_nonprivate"] == pytest.approx(1.0)
    else:
        assert pd.isna(ref["time_ratio_to_nonprivate"]) and pd.isna(ref["median_epoch_time_s"])
    assert pd.isna(row["black_box_lb"]) and pd.isna(row["white_box_lb"])
    # the default per-example accountant: its epsilon is a lower bound, and the row says so before the audits
    assert row["accountant"] == "per_example" and row["guarantee"] == "false"
    assert row["verdict"].startswith("not a guarantee") and row["verdict"].endswith("not audited")
    assert 0.95 < row["vectors_lb"] <= 1.0 and row["paper_epsilon"] < 1.0
    shown = display_table(board)
    # at a glance: the accountant's name and "guarantee: no"; in full (the details), "(not a guarantee)" and the scope
    dirichlet = shown[shown["method"] == "dirichlet_softmax"].iloc[0]
    assert dirichlet["accountant"] == "per_example" and dirichlet["guarantee"] == "no"
    assert dirichlet["the claim and what it covers"].startswith("per_example (not a guarantee): ")
    assert dirichlet["verdict"] == "not audited" and dirichlet["verdict in full"].startswith("not a guarantee")


def test_the_sanitised_report_shows_its_spread_over_seeds_not_only_its_largest(store):
    """PATE's sanitised data-dependent epsilon depends on the votes, so it differs by seed: the tables show the
    smallest and the largest over a row's seeds (the CSV keeps the largest as a number); one value where they agree."""
    train, audits = tidy(load_runs(store))
    picked = (train["method"] == "dirichlet_softmax") & (train["epsilon"] == 1)
    train.loc[picked, "epsilon_dd_sanitised"] = [1.7, 3.494][: int(picked.sum())]
    same = (train["method"] == "dirichlet_softmax") & (train["epsilon"] == 4)
    train.loc[same, "epsilon_dd_sanitised"] = 2.05
    board = leaderboard(train, audits)
    shown = display_table(board).set_index(["method", "epsilon"])["sanitised data-dependent epsilon"]
    assert shown[("dirichlet_softmax", "1")] == "1.700 to 3.494"
    assert shown[("dirichlet_softmax", "4")] == "2.050" and shown[("nonprivate", "∞ (none)")] == ""
    assert board.set_index(["method", "epsilon"]).loc[("dirichlet_softmax", 1.0), "epsilon_dd_sanitised"] == 3.494


def test_an_own_best_row_is_timed_by_its_whole_run_not_a_step(store):
    """In the own-best view each method runs its own (q, T, model): its epoch and its step are not the reference's,
    so the ratio is run for run, and an interleaved step at one batch (a speed run) is not joined to it."""
    train, _ = tidy(load_runs(store))
    train = train.assign(view="own_best", contended=0,
                         total_train_time_s=[300.0 if m == "dirichlet_softmax" else 100.0 for m in train["method"]],
                         median_epoch_time_s=1.0)
    speed = {("synthetic", "smoke", "dirichlet_softmax"): {"ratio": 1.03, "p25": 1.0, "p75": 1.1,
                                                           "memory_mb": 900.0, "memory_kind": "CPU: each method alone"}}
    board = leaderboard(train, None, speed).set_index(["method", "epsilon"])
    row = board.loc[("dirichlet_softmax", 1)]
    assert row["time_ratio_to_nonprivate"] == pytest.approx(3.0)  # 300 s against 100, though the epochs tie
    assert row["speed_source"] == "whole run, own recipe, sequential runs" and pd.isna(row["speed_p25"])
    assert pd.isna(row["peak_memory_mb"])  # the speed run's memory is of a batch the recipe does not use
    matched = leaderboard(train.assign(view="matched"), None, speed).set_index(["method", "epsilon"])
    assert matched.loc[("dirichlet_softmax", 1), "time_ratio_to_nonprivate"] == pytest.approx(1.03)
    assert matched.loc[("gaussian_penultimate", 1), "time_ratio_to_nonprivate"] == pytest.approx(1.0)  # epochs


def test_a_papers_epsilon_below_what_the_vectors_spend_is_refuted():
    """A claim whose released vectors spend more than its epsilon (the paper's accountant at the cpu preset: at
    least 3.91 for a claimed 1) reads as refuted for the vectors, whatever the audits say."""
    from inputdp.reports.leaderboard.verdicts import _vectors_verdict

    paper = {"epsilon": 1.0, "accountant": "paper", "vectors_lb": 3.9153}
    assert _vectors_verdict(paper) == "the paper epsilon is refuted for the released vectors: they spend at least 3.92"
    assert _vectors_verdict({"epsilon": 1.0, "accountant": "per_example", "vectors_lb": 0.99}).startswith("not a")
    assert _vectors_verdict({"epsilon": 1.0, "accountant": "rdp", "vectors_lb": math.nan}) == ""  # DP-SGD
    assert _vectors_verdict({"epsilon": math.inf, "accountant": "", "vectors_lb": math.nan}) == ""


def test_runs_at_another_q_or_t_are_another_row_not_more_seeds(store):
    train, audits = tidy(load_runs(store))
    dirichlet = train[(train["method"] == "dirichlet_softmax") & (train["epsilon"] == 1)].copy()
    assert len(dirichlet) == 2
    dirichlet.loc[dirichlet.index[1], "q"] = 2 * float(dirichlet["q"].iloc[0])  # one seed run at twice the batch
    board = leaderboard(dirichlet, audits)
    assert len(board) == 2 and (board["seeds"] == 1).all()
    assert sorted(board["q"]) == sorted(dirichlet["q"])


def test_runs_of_another_optimizer_or_lr_are_another_row(store):
    """Recipes set by run flags (--optimizer, --lr, --momentum) are not method variants (lr_rule is one, in the
    variant tag), yet two of them never share a row: the kappa rows of the cpu study (SGD) were once averaged into the
    Adam rows."""
    runs = load_runs(store)
    dirichlet = runs[runs["tags.method"] == "dirichlet_softmax"].copy()
    first = dirichlet.index[0]
    other = "adam" if dirichlet.loc[first, "params.optimizer"] == "sgd" else "sgd"
    dirichlet.loc[first, ["params.optimizer", "params.lr"]] = [other, "0.123"]
    train, _ = tidy(dirichlet)
    labels = train["method"].tolist()
    assert labels[0] == f"dirichlet_softmax [optimizer={other},lr=0.123]"
    assert set(labels[1:]) == {"dirichlet_softmax"}  # the preset's own recipe keeps the plain name
    board = leaderboard(train)
    assert len(board) == 3 and board["seeds"].sum() == 4


def _audits(rows):
    cols = ["dataset", "method", "epsilon", "delta", "model", "canary_kind", "audit_mode", "audit_runs", "lb_black_box",
            "ceiling_black_box", "lb_white_box", "ceiling_white_box"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows])


def test_audits_join_their_claim_under_both_threat_models(store):
    """Audits of the same claim (data set, method, epsilon, delta; any model) are joined per threat model: the
    strongest bound, how many and which; the verdict compares the strongest with the claim."""
    from inputdp.reports.leaderboard import audit_table, display_table

    train, _ = tidy(load_runs(store))
    audits = _audits([
        ("synthetic", "dirichlet_softmax", 1.0, 1e-5, "small_cnn", "random_pattern", "one_run", None, 0.1, 2.9, 0.0, 2.9),
        ("synthetic", "dirichlet_softmax", 1.0, 1e-5, "mlp", "exclusive_support", "one_run", None, None, None, 3.08, 3.08),
        ("synthetic", "dirichlet_softmax", 1.0, 1e-5, "mlp", "exclusive_support", "multi_run", 400, None, None, 3.2, 3.3),
        ("synthetic", "dirichlet_softmax", 4.0, 1e-5, "small_cnn", "random_pattern", "one_run", None, 0.4, 2.9, 0.2, 2.9),
        ("synthetic", "gaussian_penultimate", 1.0, 1e-6, "mlp", "exclusive_support", "one_run", None, None, None, 3, 3),
        ("fashionmnist", "dirichlet_softmax", 1.0, 1e-5, "mlp", "random_pattern", "one_run", None, 9, 9, 9, 9),
        ("synthetic", "nonprivate", math.inf, 1e-5, "mlp", "exclusive_support", "one_run", None, None, None, 3.08, 3.08),
    ])
    board = leaderboard(train, audits)
    row = board[(board["method"] == "dirichlet_softmax") & (board["epsilon"] == 1)].iloc[0]
    assert row["black_box_lb"] == pytest.approx(0.1) and row["black_box_audits"] == 1
    assert row["white_box_lb"] == pytest.approx(3.2) and row["white_box_audits"] == 3
    assert row["white_box_kinds"] == "exclusive_support on mlp; exclusive_support on mlp, 400 runs; random_pattern on small_cnn"
    assert row["verdict"].endswith("; claim refuted for the released model (white-box 3.20 > 1, Steinke) under "
                                   "replace_input")
    row4 = board[(board["method"] == "dirichlet_softmax") & (board["epsilon"] == 4)].iloc[0]
    assert row4["verdict"].endswith("; not refuted (ceiling 2.90) under replace_input")
    assert row4["black_box_lb"] == pytest.approx(0.4)
    gp = board[(board["method"] == "gaussian_penultimate") & (board["epsilon"] == 1)].iloc[0]
    assert gp["verdict"].endswith("; not audited")  # its audit was at another delta: another claim
    ref = board[board["method"] == "nonprivate"].iloc[0]
    assert ref["verdict"] == "no claim (reference)" and ref["white_box_lb"] == pytest.approx(3.08)
    shown = display_table(board)
    cell = shown[(shown["method"] == "dirichlet_softmax") & (shown["epsilon"] == "1")]["white-box epsilon_lb"].iloc[0]
    assert cell.startswith("3.20 (largest of 3: ")
    table = audit_table(audits.assign(preset="cpu", q=0.01, T=100, seed="0", train_examples=["0"] * 6 + ["5000"]))
    assert len(table) == 7 and set(table["verdict"]) == {"refuted", "not refuted", "no claim"}
    assert table.iloc[-1]["train examples"] == "5000"
    # the f-DP bound of the same guesses decides where it is the larger: eps 4's 0.2 white-box becomes 4.3 > 4
    with_fdp = audits.assign(fdp_white_box=[math.nan, math.nan, math.nan, 4.3, math.nan, math.nan, math.nan],
                             fdp_ceiling_white_box=[math.nan, math.nan, math.nan, 5.8, math.nan, math.nan, math.nan])
    row4 = leaderboard(train, with_fdp)
    row4 = row4[(row4["method"] == "dirichlet_softmax") & (row4["epsilon"] == 4)].iloc[0]
    assert row4["verdict"].endswith("; claim refuted for the released model (white-box 4.30 > 4, f-DP) under "
                                    "replace_input")
    assert row4["white_box_ceiling"] == pytest.approx(5.8)
    fdp_table = audit_table(with_fdp.assign(preset="cpu", q=0.01, T=100, seed="0", train_examples="0"))
    eps4 = fdp_table[(fdp_table["method"] == "dirichlet_softmax") & (fdp_table["epsilon"] == "4")].iloc[0]
    assert eps4["decides"] == "f-DP" and eps4["verdict"] == "refuted" and eps4["white-box f-DP"].startswith("4.30")


def test_an_audit_counts_only_under_its_claims_relation_and_a_test_without_power_says_so(store):
    """The dirichlet rows claim replace_input: an audit built with add/remove's absent canaries tests a statement
    the claim does not make, so its 3.2 > 1 refutes nothing and the verdict says why; the same audit in the replaced
    design refutes. A test whose guesses were all on one side (power 0) shows no ceiling: "no power"."""
    train, _ = tidy(load_runs(store))
    audit = ("synthetic", "dirichlet_softmax", 1.0, 1e-5, "small_cnn", "canary_inputs", "one_run", None, None, None, 3.2,
             5.6)
    absent = _audits([audit]).assign(audit_design="absent", power_white_box=1.0)
    row = leaderboard(train, absent)
    row = row[(row["method"] == "dirichlet_softmax") & (row["epsilon"] == 1)].iloc[0]
    assert "refuted for the released model" not in row["verdict"] and np.isnan(row["white_box_lb"])
    assert row["verdict"].endswith("not audited under replace_input; 1 audit with add/remove's absent canaries not "
                                   "counted: they do not test a replace_input claim")
    replaced = leaderboard(train, absent.assign(audit_design="replaced"))
    row = replaced[(replaced["method"] == "dirichlet_softmax") & (replaced["epsilon"] == 1)].iloc[0]
    assert row["verdict"].endswith("claim refuted for the released model (white-box 3.20 > 1, Steinke) under replace_input")
    weak = _audits([(*audit[:8], None, None, 0.0, 5.6)]).assign(audit_design="replaced", power_white_box=0.0)
    board = leaderboard(train, weak)
    row = board[(board["method"] == "dirichlet_softmax") & (board["epsilon"] == 1)].iloc[0]
    assert "no power under replace_input" in row["verdict"] and row["white_box_ceiling"] == 0.0
    from inputdp.reports.leaderboard import short_verdict

    assert short_verdict(row) == "no power"
    table = audit_table(weak.assign(preset="cpu", q=0.01, T=100, seed="0", train_examples="0", audit_relation="replace_input"))
    assert table.iloc[0]["verdict"] == "no power" and table.iloc[0]["relation, design"] == "replace_input, replaced"
    with_power = audit_table(weak.assign(power_white_box=1.0, preset="cpu", q=0.01, T=100, seed="0", train_examples="0"))
    assert with_power.iloc[0]["verdict"] == "not refuted"


def test_bench_report_writes_files(store, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--tracking-uri", store, "--out", str(out), "--stamp", "measured today"]) == 0
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "accuracy_vs_epsilon_synthetic_smoke.png",
                 "time_synthetic_smoke.png"):
        assert (out / name).exists() and (out / name).stat().st_size > 0
    assert (out / "accuracy_vs_epsilon_synthetic_smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "leaderboard.md").read_text()
    for m in METHODS:
        assert f"| {m} |" in md
    # nothing is published on the generated set: no row claims to compare, and the published ones are folded away
    assert "## Published results side by side" not in md and "published results have no comparable run here" in md
    assert "plumbing, not a comparison" in md.splitlines()[2]  # the smoke banner, before any figure
    head = next(line for line in md.splitlines() if line.startswith("| dataset | method |"))
    assert head.startswith("| dataset | method | model | epsilon | accuracy % (n) | per step (x non-private) | "
                           "whole run (x non-private) |")
    assert head.rstrip(" |").endswith("verdict") and "## Details" in md
    # one glance table per group: the reference, then the rows without a guarantee for the model, apart (no row of
    # this store is sound for the model: that group has no table)
    reference, none = (md.index(f"### {t}") for t in ("The non-private reference", "No guarantee for the released model"))
    details = md.index("## Details")
    assert "### Sound for the released model" not in md
    assert reference < md.index("| nonprivate |") < none < md.index("| dirichlet_softmax |") < details
    assert none < md.index("| gaussian_penultimate |") < details
    # the answer comes first, then the plots: no row of this store is sound, and the answer says so per relation
    answer = md.index("## Which method, at what cost")
    assert answer < md.index("![accuracy_vs_epsilon") < reference
    assert "no sound row (every row refuted or no guarantee)" in md[answer:md.index("![accuracy_vs_epsilon")]
    csv = pd.read_csv(out / "leaderboard.csv")
    assert len(csv) == 5 and "time_ratio_to_nonprivate" in csv.columns


def test_report_without_runs_is_one_line(tmp_path, capsys):
    import sqlite3

    db = tmp_path / "empty.db"
    argv = ["report", "--tracking-uri", f"sqlite:///{db}", "--out", str(tmp_path / "o")]
    assert main(argv) == 2  # no store at all: refused without creating one
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no store yet" in err and not db.exists()
    sqlite3.connect(db).close()  # an empty database: a store without runs
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no experiment yet (run bench run first)" in err


def test_a_misspelt_experiment_lists_the_store_s(store, tmp_path, capsys):
    assert main(["report", "--tracking-uri", store, "--experiment", "inputdpp", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--experiment 'inputdpp' is not in the store: it holds inputdp" in err
    assert not (tmp_path / "o").exists()


def test_paper_figures_are_the_seed_texts():
    paper = paper_results()
    cifar = paper[(paper["dataset"] == "cifar10") & (paper["method"] == "dirichlet_softmax")
                  & (paper["metric"] == "test_accuracy")]
    assert sorted(cifar["value"]) == [0.8296, 0.8817]


@pytest.mark.slow
def test_report_from_real_audit_runs_shows_both_threat_models(tmp_path, monkeypatch):
    """A real one-run audit and a real multi-run audit in a store with the training run they concern: tidy reads
    their threat-model bounds, the leaderboard row gets the verdict, bench report writes the audit table."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the multi-run audit's journal
    uri = f"sqlite:///{tmp_path / 'a.db'}"
    common = ["--dataset", "synthetic", "--preset", "smoke", "--tracking-uri", uri]
    assert main(["run", "--methods", "dirichlet_softmax", "--epsilons", "4", "--model", "mlp", "--steps", "120",
                 "--no-progress", *common]) == 0
    assert main(["audit", "--method", "dirichlet_softmax", "--epsilon", "4", "--model", "mlp", "--steps", "120",
                 "--canary-kind", "exclusive_support", "--canaries", "20", "--json", *common]) == 0
    assert main(["audit", "--method", "dirichlet_softmax", "--epsilon", "4", "--model", "mlp", "--steps", "120",
                 "--canary-kind", "exclusive_support", "--runs", "8", "--json", *common]) == 0
    train, audits = tidy(load_runs(uri))
    assert len(train) == 1 and len(audits) == 2
    assert set(audits["audit_mode"]) == {"one_run", "multi_run"} and audits["lb_black_box"].isna().all()
    one = audits[audits["audit_mode"] == "one_run"].iloc[0]
    # 20 of 20 right, one guess set read by both analyses (level 0.05/2): 1.60
    assert one["lb_white_box"] == pytest.approx(one["ceiling_white_box"]) and one["lb_white_box"] > 1.5
    row = leaderboard(train, audits).iloc[0]
    assert row["white_box_audits"] == 2
    assert row["verdict"].endswith(f"; not refuted (ceiling {row['white_box_ceiling']:.2f}) under replace_input")
    assert set(audits["audit_design"]) == {"replaced"} and set(audits["audit_relation"]) == {"replace_input"}
    out = tmp_path / "rep"
    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0
    md = (out / "leaderboard.md").read_text()
    assert "## Privacy audits: both threat models" in md and "multi-run, 8 runs" in md
    assert len(pd.read_csv(out / "audits.csv")) == 2


def test_a_smoke_row_is_not_comparable_with_the_published_figure():
    from inputdp.reports.leaderboard import paper_side_by_side

    board = pd.DataFrame([{"dataset": "mnist", "method": "dirichlet_softmax", "epsilon": 4.0, "preset": "smoke",
                           "model": "small_cnn", "acc_mean": 0.25, "median_epoch_time_s": 1.0}])
    side = paper_side_by_side(board)
    row = side[(side["method"] == "dirichlet_softmax") & (side["epsilon"] == "4") & (side["measured"] == "25.00%")]
    assert len(row) and all(c.startswith("not comparable (preset smoke, not paper") for c in row["comparable"])


def test_a_published_row_is_set_beside_the_measured_row_of_its_own_model():
    """Two models measured at one (data set, method, epsilon): each published figure is read against the row of
    its own model, and the other model's row is not passed off as a measurement of it."""
    from inputdp.reports.leaderboard import paper_side_by_side

    board = pd.DataFrame([
        {"dataset": "mnist", "method": "dpsgd", "epsilon": 3.0, "preset": "best", "model": model, "acc_mean": acc,
         "median_epoch_time_s": 1.0}
        for model, acc in (("tanh_cnn", 0.9801), ("scatter_linear", 0.9855))])
    side = paper_side_by_side(board)
    mine = side[(side["dataset"] == "mnist") & (side["method"] == "dpsgd") & (side["epsilon"] == "3")]
    by_model = dict(zip(mine["model"], mine["measured"]))
    assert by_model["tanh_cnn"] == "98.01%" and by_model["scatter_linear"] == "98.55%"
    linear = mine[mine["model"] == "scatter_linear"].iloc[0]  # no preset of ours reproduces the published recipe
    assert linear["comparable"] == "not comparable (our recipe (preset best), not the published one)"
    cnn = mine[mine["model"] == "scatter_cnn"].iloc[0]  # not measured: the nearest row, marked as another model
    assert "model tanh_cnn vs scatter_cnn" in cnn["comparable"] or "model scatter_linear vs scatter_cnn" in cnn["comparable"]


def test_the_readme_results_are_the_committed_reports(tmp_path):
    """The README's results block and reports/README.md are what the committed studies give, figure for figure;
    and the README is a front door."""
    from pathlib import Path

    from inputdp.reports.summary import BEGIN, END, details, rewrite, summary

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    block = BEGIN + readme.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert block == summary(root / "reports")
    assert (root / "reports" / "README.md").read_text() == details(root / "reports")
    assert len(readme.splitlines()) <= 200
    # the check can fail: a report changed after the README was written shows up
    reports = tmp_path / "reports"
    (reports / "s").mkdir(parents=True)
    board = pd.read_csv(root / "reports" / "mnist-cpu" / "leaderboard.csv")
    board.to_csv(reports / "s" / "leaderboard.csv", index=False)
    copy = tmp_path / "README.md"
    copy.write_text(f"x\n{BEGIN}\n{END}\n")
    first = board.iloc[0]  # its cell, computed here from the csv's own columns
    cell = f"{100 * first['acc_mean']:.2f} ± {100 * first['acc_std']:.2f} ({int(first['seeds'])})"
    assert rewrite(copy, reports) and f"| {cell} · " in (reports / "README.md").read_text()
    assert "[reports/README.md](reports/README.md)" in copy.read_text()
    board.loc[0, "acc_mean"] = first["acc_mean"] - 0.05  # the report changes after the README was written
    board.to_csv(reports / "s" / "leaderboard.csv", index=False)
    assert details(reports) != (reports / "README.md").read_text()


def test_the_answer_spans_the_own_best_studies_one_row_per_relation_and_budget(tmp_path):
    """Two own-best studies holding the same configuration: it is counted once, the row names its study, and the
    next best is another method, not the same one again from the other study."""
    from inputdp.reports.summary import answer_block

    root = Path(__file__).resolve().parents[2]
    board = pd.read_csv(root / "reports" / "mnist-best" / "leaderboard.csv")
    for name in ("a-study", "b-study"):
        (tmp_path / name).mkdir()
        board.to_csv(tmp_path / name / "leaderboard.csv", index=False)
    rows = [line for line in answer_block(tmp_path) if line.startswith("| mnist |")]
    keys = [tuple(cell.strip() for cell in line.split("|")[1:4]) for line in rows]
    assert len(keys) == len(set(keys)) > 0  # one row per (data set, relation, epsilon)
    for line in rows:
        cells = [c.strip() for c in line.split("|")]
        assert cells[7] == "a-study" and not cells[10].startswith(cells[4].split(" (")[0] + " (")
        assert cells[6] == "not run"  # no charged search stored here


def test_the_answer_shows_the_charged_search_of_its_row(tmp_path):
    """The row's method with its search inside the epsilon, from charged-search/charged.csv: its median, the number
    of searches and the price in points; another method's search is not its."""
    from inputdp.reports.summary import answer_block

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "mnist-best").mkdir()
    pd.read_csv(root / "reports" / "mnist-best" / "leaderboard.csv").to_csv(tmp_path / "mnist-best" / "leaderboard.csv")
    (tmp_path / "charged-search").mkdir()
    pd.DataFrame([{"dataset": "mnist", "method": "dpsgd", "relation_key": "add_remove", "epsilon": 1.0,
                   "charged_median": 97.5, "charged_seeds": 3, "price_points": 0.69},
                  {"dataset": "mnist", "method": "dp_least_squares", "relation_key": "replace_input", "epsilon": 1.0,
                   "charged_median": 90.0, "charged_seeds": 3, "price_points": 5.0}]).to_csv(
        tmp_path / "charged-search" / "charged.csv", index=False)
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): [c.strip() for c in line.split("|")]
            for line in answer_block(tmp_path) if line.startswith("| mnist |")}
    assert rows[("mnist", "add/remove", "1")][6] == "97.50 (3; 0.69 points)"
    assert rows[("mnist", "replace one input", "1")][6] == "not run"  # its best is DP-SGD, whose search is not stored


def test_a_studys_summary_is_a_row_per_method_and_a_column_per_epsilon(tmp_path):
    """The README's compact table: the private rows pivoted on epsilon (each cell accuracy · time · both bounds), the
    non-private reference in the title, sound rows before the rows whose claim does not cover the model."""
    from inputdp.reports.summary import study_table

    folder = tmp_path / "s"
    folder.mkdir()
    rows = [("nonprivate", "inf", 0.99, "False", "", ""),
            ("dirichlet_softmax", 1, 0.98, "False", "not a guarantee: ...; claim refuted for the released model "
             "(white-box 5.60 > 1, f-DP)", 5.6),
            ("dirichlet_softmax", 4, 0.985, "False", "not a guarantee: ...; not refuted (ceiling 4.46)", 0.5),
            ("dpsgd", 1, 0.96, "True", "not refuted (ceiling 4.46)", 0.0),
            ("dpsgd", 4, 0.97, "True", "not refuted (ceiling 4.46)", 0.25)]
    pd.DataFrame([dict(dataset="mnist", preset="cpu", model="small_cnn", method=m, epsilon=e, acc_mean=a,
                       acc_std=0.001, seeds=3, guarantee=g, verdict=v, accountant="pld (grid)",
                       time_ratio_to_nonprivate=1.5, black_box_lb=0.0 if wb != "" else None,
                       white_box_lb=wb if wb != "" else None) for m, e, a, g, v, wb in rows]
                 ).to_csv(folder / "leaderboard.csv", index=False)
    lines = study_table(folder)
    assert lines[0].endswith("mnist, preset cpu; non-private 99.00 ± 0.10 (3)")
    assert lines[2] == "| model | method | accountant | guarantee for the model | eps 1 | eps 4 |"
    body = lines[4:]
    assert len(body) == 2 and body[0].startswith("| small_cnn | dpsgd | pld | yes |")
    assert "| 96.00 ± 0.10 (3) · ×1.50 · 0.00 / 0.00 | 97.00 ± 0.10 (3) · ×1.50 · 0.00 / 0.25 |" in body[0]
    assert body[1].startswith("| small_cnn | dirichlet_softmax | pld | no, refuted |")
    # the same study whose audits were made before they followed the claim's relation: a replace_input row's
    # refutation came from add/remove's absent canaries, so it is no refutation, and its bounds are marked
    board = pd.read_csv(folder / "leaderboard.csv")
    board["adjacency"] = ["", *["one input replaced, its label and membership public"] * 2, *["add/remove one example"] * 2]
    board.to_csv(folder / "leaderboard.csv", index=False)
    pd.DataFrame(columns=["dataset", "method", "verdict"]).to_csv(folder / "audits.csv", index=False)
    body = study_table(folder)[4:]
    assert body[1].startswith("| small_cnn | dirichlet_softmax | pld | no |") and body[1].count("0.00 / 5.60†") == 1
    assert "†" not in body[0]  # dpsgd at add/remove: the absent design is its relation's
    pd.DataFrame(columns=["dataset", "method", "relation, design", "verdict"]).to_csv(folder / "audits.csv", index=False)
    assert study_table(folder)[5].startswith("| small_cnn | dirichlet_softmax | pld | no, refuted |")


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="needs a headless Chromium (Debian: apt install chromium)")
def test_the_html_leaderboard_in_a_real_browser(store, tmp_path):
    """The page loads in headless Chromium: the answer first, then the plots, then one sortable table per group
    (what the claim covers) with its legend, the details and audits folded; a click on a header (the page's own
    click handler, fired by opening it with #sort=COLUMN) sorts the rows."""
    import re
    import subprocess

    out = tmp_path / "rep"
    assert main(["report", "--tracking-uri", store, "--out", str(out)]) == 0
    page = (out / "leaderboard.html").as_uri()

    def dom(url: str) -> str:
        proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
                               "--dump-dom", url], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    def tables(html: str) -> list[str]:
        return [t.split("</table>", 1)[0] for t in html.split('class="dataframe sortable"')[1:]]

    def epsilons(table: str) -> list[str]:
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>", 1)[1], re.S)
        return [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[3] for r in rows]

    plain = dom(page)
    assert "accuracy % (n)" in plain and 'class="verdict' in plain
    # the order a reader asks in: the answer, the plots, the groups' tables; the details and audits folded
    order = [plain.index(s) for s in ("Which method, at what cost", "<img", "The non-private reference",
                                      "No guarantee for the released model", "<details><summary>Details")]
    assert order == sorted(order)
    reference, none = tables(plain)
    assert len(epsilons(reference)) == 1
    shown = epsilons(none)
    assert len(shown) == 4
    key = [float(e) for e in shown]
    assert key != sorted(key)  # the page opens in the leaderboard's own order: the sort below has work to do
    sorted_page = dom(page + "#sort=3")  # a click on each table's epsilon header
    assert [float(e) for e in epsilons(tables(sorted_page)[1])] == sorted(key)
    assert 'data-order="asc"' in sorted_page
    # the table at a glance: short cells (the longest a few words), each with its full text as a tooltip
    cells = re.findall(r"<td[^>]*>(.*?)</td>", none, re.S)
    assert max(len(c) for c in cells) <= 60, max(cells, key=len)
    titles = re.findall(r'<td class="verdict [a-z]+" title="([^"]+)">', none)
    assert len(titles) == 4 and all(len(t) > 60 for t in titles)  # every private row's verdict, in full
    # the rows whose claim does not cover the model are greyed: never drawn like a sound one
    assert re.findall(r"<tr( class=\"noguarantee\")?>", none.split("<tbody>", 1)[1]) == [' class="noguarantee"'] * 4
    assert re.findall(r"<tr( class=\"noguarantee\")?>", reference.split("<tbody>", 1)[1]) == [""]


def test_the_answer_is_the_best_sound_row_of_the_csv(tmp_path):
    """The answer table, read back from the written page, against an independent reading of leaderboard.csv (the
    committed mnist-cpu study): per data set, relation and epsilon, the most accurate row whose claim is a
    guarantee that no audit refutes, a claim about replacing an example counting for replace_input too."""
    import re

    board = pd.read_csv(ROOT / "reports" / "mnist-cpu" / "leaderboard.csv")
    out = tmp_path / "rep"
    write_report(board, out)
    csv = pd.read_csv(out / "leaderboard.csv")
    md = (out / "leaderboard.md").read_text()
    section = md.split("## Which method, at what cost", 1)[1].split("\n\n", 2)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()[2:]]
    assert len(rows) == 4  # mnist: add/remove and replace one input, at eps 1 and 4
    for dataset, relation, eps, method, model, accuracy, *_ in rows:
        adjacency = csv["adjacency"].fillna("").astype(str)
        covers = (adjacency.str.startswith("add/remove") if relation == "add/remove"
                  else adjacency.str.contains("replace"))
        sound = ((csv["guarantee"].astype(str) != "false")
                 & ~csv["verdict"].astype(str).str.contains(r"claim refuted|refuted at the mechanism"))
        mine = csv[(csv["dataset"] == dataset) & np.isclose(csv["epsilon"], float(eps)) & covers & sound]
        best = mine.loc[mine["acc_mean"].idxmax()]
        assert (method, model) == (best["method"], best["model"])
        assert re.match(rf"{100 * best['acc_mean']:.2f} ± ", accuracy)
    # the refuted rows, more accurate than every sound one, are never the answer
    assert not any(r[3] in ("dirichlet_softmax", "gaussian_penultimate") for r in rows)


def test_a_row_without_a_guarantee_is_drawn_hollow_and_says_so():
    import pandas as pd

    from inputdp.reports.plots import series_style

    sound = pd.DataFrame({"guarantee": ["true"], "epsilon": [1.0]})
    refuted = pd.DataFrame({"guarantee": ["false"], "epsilon": [1.0]})
    assert series_style("dp_least_squares", sound) == ("dp_least_squares", None)
    assert series_style("dirichlet_softmax", refuted) == ("dirichlet_softmax (no guarantee)", "white")
    # a claim that states a guarantee but that an audit refutes is not drawn like a sound one either
    audited = pd.DataFrame({"guarantee": ["true"], "epsilon": [1.0], "white_box_lb": [5.6], "white_box_ceiling": [5.6],
                            "white_box_audits": [1]})
    assert series_style("some_method", audited) == ("some_method (refuted)", "white")
    fine = audited.assign(white_box_lb=[0.4])
    assert series_style("some_method", fine) == ("some_method", None)


#: a board row's columns, as verdicts._join_audits fills them (a claim at epsilon 4, no audit)
_ROW = {"epsilon": 4.0, "guarantee": "true", "white_box_lb": math.nan, "black_box_lb": math.nan,
        "white_box_ceiling": math.nan, "black_box_ceiling": math.nan, "white_box_audits": 0, "black_box_audits": 0,
        "vectors_lb": math.nan, "mechanism_word": "", "mechanism_fraction": math.nan, "curve_word": ""}


@pytest.mark.parametrize("columns,short", [
    ({"epsilon": math.inf}, "no claim"),
    ({"guarantee": "false", "vectors_lb": 3.9, "white_box_lb": 5.81, "white_box_audits": 1}, "refuted (5.81 > 4)"),
    ({"guarantee": "false", "vectors_lb": 5.2}, "refuted (5.20 > 4)"),
    ({"mechanism_word": "refuted", "mechanism_fraction": 1.4}, "refuted at the mechanism"),
    ({"mechanism_word": "tight", "mechanism_fraction": 0.98, "white_box_lb": 0.5, "white_box_ceiling": 5.81,
      "white_box_audits": 1}, "tight to 0.98"),
    ({"mechanism_word": "not tight", "mechanism_fraction": 0.52, "white_box_lb": 0.5, "white_box_ceiling": 4.46,
      "white_box_audits": 1}, "not refuted (ceiling 4.46)"),
    ({}, "not audited"),
    ({"white_box_lb": 0.0, "white_box_ceiling": 0.0, "white_box_audits": 2}, "no power"),
    ({"curve_word": "tight", "curve_median": 0.87, "white_box_lb": 2.0, "white_box_ceiling": 8.87,
      "white_box_audits": 3}, "tight to 0.87"),
    ({"curve_word": "refuted", "curve_refuted": 1, "curve_audits": 3}, "refuted by the claimed curve"),
])
def test_the_glance_verdict_is_read_from_the_row_s_columns(columns, short):
    from inputdp.reports.leaderboard import short_verdict

    assert short_verdict({**_ROW, **columns}) == short


def test_the_glance_tables_group_rows_by_what_the_claim_covers():
    from inputdp.reports.leaderboard import NO_GUARANTEE, REFERENCE, SOUND, covers_model
    from inputdp.reports.leaderboard.tables import _grouped_markdown

    powered = {**_ROW, "white_box_lb": 0.5, "white_box_ceiling": 5.56, "white_box_audits": 1}
    assert covers_model(powered) == SOUND
    assert covers_model({**_ROW, "mechanism_word": "tight", "mechanism_fraction": 0.98}) == SOUND
    assert covers_model({**powered, "white_box_lb": 5.6}) == NO_GUARANTEE
    assert covers_model({**powered, "guarantee": "false"}) == NO_GUARANTEE  # not refuted is no guarantee
    assert covers_model({**_ROW, "curve_word": "refuted"}) == NO_GUARANTEE
    assert covers_model({**_ROW, "epsilon": math.inf}) == REFERENCE
    glance = pd.DataFrame({"method": ["dirichlet_softmax", "dpsgd", "nonprivate"], "guarantee": ["no", "yes", ""]})
    covers = pd.Series([NO_GUARANTEE, SOUND, REFERENCE])
    md = "\n".join(_grouped_markdown(glance, covers))
    assert md.index("### Sound") < md.index("| dpsgd |") < md.index("### The non-private") < md.index("| nonprivate |")
    assert md.index("| nonprivate |") < md.index("### No guarantee") < md.index("| dirichlet_softmax |")


def test_every_method_has_a_colour_of_its_own():
    """Two methods never share a colour (dp_least_squares took matplotlib's next, Dirichlet's blue); a plug-in gets a
    spare one, the same in every report."""
    from inputdp.methods import METHODS
    from inputdp.reports.plots import colour

    built_in = [colour(m) for m in METHODS.names()]
    assert len(set(built_in)) == len(built_in)
    assert colour("my_method") == colour("my_method") and colour("my_method") not in built_in


def test_a_per_step_panel_mixing_sources_hatches_the_sequential_bars():
    """A variant (DP-SGD at replace_input) is not in the study's interleaved run: its bar in the per-step panel is
    its runs' epoch ratio, hatched and named in the title, not drawn as one more interleaved ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inputdp.reports.plots import _bars, _step_sources

    step = pd.DataFrame({"speed_source": ["interleaved, quartiles 1.0-1.0", "sequential runs",
                                          "interleaved, quartiles 1.4-1.5"],
                         "base": ["nonprivate", "dpsgd", "dpsgd"]},
                        index=["nonprivate", "dpsgd [adjacency=replace_input]", "dpsgd"])
    values = pd.Series([1.0, 1.28, 1.43], index=step.index)
    fig, ax = plt.subplots()
    _bars(ax, step, values, str)
    assert "hatched: sequential" in _step_sources(ax, step)
    assert [bool(b.get_hatch()) for b in ax.patches] == [False, True, False]
    fig2, ax2 = plt.subplots()
    _bars(ax2, step.iloc[[0, 2]], values.iloc[[0, 2]], str)
    assert _step_sources(ax2, step.iloc[[0, 2]]) == " (interleaved; whiskers: quartiles)"
    assert not any(b.get_hatch() for b in ax2.patches)
    plt.close(fig)
    plt.close(fig2)


def test_the_mechanism_table_counts_refutations_at_two_thirds_and_tight_reads_at_1_3(tmp_path):
    """The README's mechanism rows: per seed the loosest release at the calibrated noise (median tightness), the
    audits given 1/1.5 of the noise that read refuted (all must), those given 1.3 times it that read tight (none may);
    a release that is never tight says "not refuted"."""
    from inputdp.reports.summary import mechanism_table

    folder = tmp_path / "m"
    folder.mkdir()
    rows = []
    for seed in (0, 1, 2):
        for scale, tightness, verdict, refuted in ((1.0, 0.97 + seed / 100, "tight to 0.97", False),
                                                   (0.6667, 1.4, "refuted", True),
                                                   (1.3, 0.74, "not refuted (0.74 of the claim's mu)", False)):
            rows.append(dict(preset="cpu", method="dpsgd", options="accountant=pld", spec_epsilon=1.0, seed=seed,
                             noise_scale=scale, tightness=tightness, verdict=verdict, refuted=refuted))
            rows.append(dict(preset="cpu", method="dp_least_squares", options="", spec_epsilon=1.0, seed=seed,
                             noise_scale=scale, tightness=tightness - 0.15, verdict="not refuted" if scale != 0.6667
                             else "refuted", refuted=scale == 0.6667))
    rows[-1].update(verdict="tight to 0.90", tightness=0.9)  # a 1.3x audit of dp_least_squares that reads tight: counted
    pd.DataFrame(rows).to_csv(folder / "mechanism_audits.csv", index=False)
    lines = mechanism_table(folder)
    assert lines[4] == "| cpu | dpsgd | (defaults) | eps 1: 0.98 | 3/3 | 0/3 |"
    assert lines[5] == "| cpu | dp_least_squares | (defaults) | eps 1: 0.83 (not refuted) | 3/3 | 1/3 |"


def test_the_accuracy_plot_keeps_relations_and_refuted_rows_apart():
    """One panel per relation of the sound rows (a claim about replacing an example counts for replace_input too),
    the refuted and no-guarantee rows in a panel of their own, no empty panel (the committed mnist-cpu study)."""
    from inputdp.reports.leaderboard.answer import NO_GUARANTEE_PANEL, plot_panels

    board = pd.read_csv(ROOT / "reports" / "mnist-cpu" / "leaderboard.csv")
    private = board[np.isfinite(board["epsilon"])]
    panels = {title.split(" (")[0]: set(rows["method"]) for title, rows in plot_panels(private)}
    assert panels == {"sound under add/remove": {"dpsgd", "pate"},
                      "sound under replace one input": {"dp_least_squares", "feature_perturbation", "pate",
                                                        "dpsgd [adjacency=replace_input]"},
                      NO_GUARANTEE_PANEL.split(" (")[0]: {"dirichlet_softmax", "gaussian_penultimate"}}
    assert plot_panels(private[private["method"] == "dpsgd"])[0][0].startswith("sound under add/remove")
    assert len(plot_panels(private[private["method"] == "dpsgd"])) == 1  # no empty panel


def test_run_time_bars_read_apart():
    """Smoke-size runs (seconds each) are labelled in seconds at three figures, not all "0.1 min"."""
    from inputdp.reports.plots import run_time_labels

    unit, values, labels = run_time_labels(pd.Series({"nonprivate": 6.1, "dpsgd": 6.4, "pate": 8.2}), "nonprivate")
    assert unit == "seconds" and len(set(labels)) == 3 and labels[1].startswith("6.40 s\n×1.05")
    unit, values, labels = run_time_labels(pd.Series({"nonprivate": 86.0, "pate": 455.0}))
    assert unit == "minutes" and labels == ["1.43 min", "7.58 min"]


def test_the_answer_covers_a_relation_once_a_row_claims_it():
    """Zero-out appears in the answer only once a row claims it; PATE's claim (any example replaced) then answers
    for it too, and an add/remove row never does (2 epsilon by group privacy)."""
    from inputdp.reports.leaderboard.answer import answer_table

    def row(method, relation, adjacency, acc, mechanism=""):
        return {"dataset": "mnist", "preset": "best", "model": "m", "method": method, "epsilon": 1.0, "seeds": 3,
                "acc_mean": acc, "acc_std": 0.001, "relation_key": relation, "adjacency": adjacency, "guarantee": "true",
                "verdict": "not refuted (ceiling 2.00)", "time_ratio_to_nonprivate": 0.2, "speed_source": "whole run",
                "mechanism": mechanism}

    pate = row("pate", "add_remove", "add/remove or replace one example (either moves one teacher's vote per query)", 0.9,
               "pate_confident_gnmax")
    other = row("other", "add_remove", "add/remove one example", 0.99, "some_mechanism")
    board = pd.DataFrame([pate, other])
    assert set(answer_table(board)["relation"]) == {"add/remove"}
    zero = row("dpsgd [adjacency=zero_out]", "zero_out", "one example replaced by the null example", 0.85,
               "subsampled_gaussian")
    answer = answer_table(pd.DataFrame([pate, other, zero])).set_index("relation")
    # an add/remove claim of an unknown mechanism never answers for zero-out; PATE's covers it
    assert answer.loc["zero-out", "best sound method"] == "pate" and "dpsgd [adjacency=zero_out]" in answer.loc[
        "zero-out", "next best"]
    assert answer.loc["add/remove", "best sound method"] == "other"
    # DP-SGD at add/remove: its pair is zero-out's, so its row answers for zero-out at the same epsilon
    dpsgd = row("dpsgd", "add_remove", "add/remove one example", 0.98, "subsampled_gaussian")
    answer = answer_table(pd.DataFrame([pate, other, zero, dpsgd])).set_index("relation")
    assert answer.loc["zero-out", "best sound method"] == "dpsgd"
    # and the next best is another method, not DP-SGD's own zero-out row (the same pair, the same runs' twin)
    assert answer.loc["zero-out", "next best"].startswith("pate (m) ")


def test_the_answer_says_each_row_s_audits_in_the_four_words():
    """The answer's audits cell reads the board's columns: the mechanism's word and fraction, then the model's audits
    under the claim's relation: not refuted with the ceiling of its tests with power, no power where none had any,
    not audited where none ran (saying when audits of another design were not counted); a refutation alone."""
    from inputdp.reports.leaderboard.answer import audit_cell

    base = {"epsilon": 1.0, "relation_key": "zero_out", "mechanism_word": "", "white_box_audits": 0,
            "black_box_audits": 0, "white_box_lb": math.nan, "black_box_lb": math.nan, "white_box_ceiling": math.nan,
            "black_box_ceiling": math.nan}
    tight = {**base, "mechanism_word": "tight", "mechanism_fraction": 0.91,
             "white_box_audits": 1, "white_box_lb": 0.2, "white_box_ceiling": 8.87, "black_box_audits": 1,
             "black_box_lb": 0.0, "black_box_ceiling": 3.1}
    assert audit_cell(tight) == "tight to 0.91 at the mechanism; not refuted (ceiling 8.87) under zero_out"
    no_power = {**base, "relation_key": "add_remove", "white_box_audits": 2, "white_box_lb": 0.0,
                "white_box_ceiling": 0.0}
    assert audit_cell(no_power) == "no power under add_remove"
    loose = {**base, "relation_key": "replace_input", "mechanism_word": "not tight", "mechanism_fraction": 0.81}
    assert audit_cell(loose) == "not tight at the mechanism (0.81 of the claim); the model not audited"
    refuted = {**tight, "white_box_lb": 5.6, "white_box_ceiling": 5.6}  # a refutation is said alone
    assert audit_cell(refuted) == "refuted (5.60 > 1) under zero_out"
    broken = {**tight, "mechanism_word": "refuted", "mechanism_fraction": 1.4}
    assert audit_cell(broken) == "refuted at the mechanism"
    other = {**base, "relation_key": "replace_input", "other_design": 2}
    assert audit_cell(other) == ("the model not audited under replace_input (audits of another design not "
                                 "counted)")


def test_the_answer_s_audits_cell_agrees_with_the_board_s_verdict():
    """The cell reads the columns the board's verdicts are made from: joined from real audit rows (a test with power,
    a test whose guesses were all on one side, none), each board row's cell says what its verdict says."""
    from inputdp.reports.leaderboard.answer import audit_cell
    from inputdp.reports.leaderboard.verdicts import _join_audits

    def audit(method, lb, ceiling, power):
        return {"dataset": "mnist", "method": method, "epsilon": 1.0, "delta": 1e-5, "kind": "one_run",
                "canary_kind": "gradient_canaries", "model": "m", "audit_mode": "one_run", "audit_runs": 1,
                "audit_design": "absent", "lb_white_box": lb, "ceiling_white_box": ceiling, "fdp_white_box": lb,
                "fdp_ceiling_white_box": ceiling, "power_white_box": power, "lb_black_box": math.nan,
                "ceiling_black_box": math.nan}

    rows = [{"dataset": "mnist", "method": m, "method_name": "dpsgd", "epsilon": 1.0, "delta": 1e-5, "q": 0.01,
             "T": 10, "relation_key": "add_remove", "adjacency": "add/remove one example", "vectors_lb": math.nan,
             "accountant": "pld"} for m in ("powered", "powerless", "unaudited", "refuted")]
    audits = pd.DataFrame([audit("powered", 0.4, 8.87, 1.0), audit("powerless", 0.0, 5.6, 0.0),
                           audit("refuted", 3.2, 8.87, 1.0)])
    board = pd.DataFrame(rows)
    _join_audits(board, audits)
    cells = {r["method"]: audit_cell(r) for _, r in board.iterrows()}
    verdicts = dict(zip(board["method"], board["verdict"]))
    assert cells["powered"] == "not refuted (ceiling 8.87) under add_remove" and verdicts["powered"].startswith(
        "not refuted (ceiling 8.87) under add_remove")
    assert cells["powerless"] == "no power under add_remove" and verdicts["powerless"].startswith(
        "no power under add_remove")
    assert cells["unaudited"] == "the model not audited" and verdicts["unaudited"].startswith("not audited")
    assert cells["refuted"].startswith("refuted (3.20 > 1)") and "refuted" in verdicts["refuted"]


def test_a_row_reads_its_claimed_curve_audits_from_their_verdict_fields():
    """Gradient-canary audits store their claimed-curve verdict as fields (bound kind claimed_curve, the certified
    epsilon, the claim's): a row with three reads tight to their median fraction, its spread named, before the one-run
    readings; one refutation among them refutes the row (no guarantee for the released model), said alone in the
    answer."""
    from inputdp.reports.leaderboard.answer import audit_cell
    from inputdp.reports.leaderboard.reading import NO_GUARANTEE, SOUND, covers_model
    from inputdp.reports.leaderboard.verdicts import _join_audits

    def audit(method, seed, certified, word):
        return {"dataset": "mnist", "method": method, "epsilon": 1.0, "delta": 1e-5, "kind": "audit", "seed": seed,
                "canary_kind": "gradient_canaries", "model": "m", "audit_mode": "gradient_canaries",
                "audit_runs": math.nan, "audit_design": "replaced", "lb_white_box": 0.5, "ceiling_white_box": 8.87,
                "fdp_white_box": 0.5, "fdp_ceiling_white_box": 8.87, "power_white_box": 1.0,
                "lb_black_box": math.nan, "ceiling_black_box": math.nan, "verdict_bound_kind_white_box": "claimed_curve",
                "verdict_word_white_box": word, "verdict_bound_white_box": certified,
                "verdict_claimed_epsilon_white_box": 0.999}

    rows = [{"dataset": "mnist", "method": m, "method_name": "dpsgd", "epsilon": 1.0, "delta": 1e-5, "q": 0.01,
             "T": 10, "relation_key": "replace_input", "adjacency": "one input replaced", "vectors_lb": math.nan,
             "accountant": "pld", "guarantee": "true"} for m in ("tight", "broken")]
    audits = pd.DataFrame([audit("tight", 0, 0.85, "tight"), audit("tight", 1, 0.80, "tight"),
                           audit("tight", 2, 0.93, "tight"), audit("broken", 0, 0.9, "tight"),
                           audit("broken", 1, 1.4, "refuted")])
    board = pd.DataFrame(rows)
    _join_audits(board, audits)
    row = board.set_index("method")
    assert row.loc["tight", "curve_audits"] == 3 and row.loc["tight", "curve_median"] == pytest.approx(0.85 / 0.999)
    assert row.loc["tight", "verdict"].startswith("tight to 0.85 of the claimed curve (median of 3 seeds, 0.80-0.93); "
                                                  "the one-run readings: not refuted (ceiling 8.87) under replace_input")
    assert covers_model(row.loc["tight"]) == SOUND
    assert row.loc["broken", "verdict"] == "claim refuted by the claimed curve (1 of 2 audits) under replace_input"
    assert covers_model(row.loc["broken"]) == NO_GUARANTEE
    cells = {r["method"]: audit_cell(r) for _, r in board.iterrows()}
    assert cells["tight"] == ("tight to 0.85 of the claimed curve (median of 3 seeds, 0.80-0.93); not refuted "
                              "(ceiling 8.87) under replace_input")
    assert cells["broken"] == "refuted by the claimed curve (1 of 2 audits) under replace_input"


def test_the_readme_answer_does_not_read_a_study_s_audits_of_an_older_design(tmp_path):
    """A study whose audits.csv predates the design column shows no verdict in the answer, only that its audits
    are not read; the same configuration in a study whose audits are current is preferred, its verdict shown; a
    study without audits has nothing to mark."""
    from inputdp.reports.summary import LEGACY_AUDITS, answer_block

    def board(study: str, design_logged: bool) -> None:  # one study: the reference and one DP-SGD row
        folder = tmp_path / study
        folder.mkdir()
        common = {"dataset": "mnist", "preset": "best", "model": "m", "q": 0.01, "T": 10, "delta": 1e-5, "seeds": 3,
                  "view": "own_best", "acc_std": 0.001, "guarantee": "true", "time_ratio_to_nonprivate": math.nan,
                  "speed_source": "", "mechanism": "subsampled_gaussian", "relation_key": "add_remove",
                  "adjacency": "add/remove one example"}
        rows = [{**common, "method": "nonprivate", "epsilon": math.inf, "acc_mean": 0.99},
                {**common, "method": "dpsgd", "epsilon": 1.0, "acc_mean": 0.98, "white_box_audits": 1,
                 "white_box_lb": 0.1, "white_box_ceiling": 8.87, "verdict": "not refuted (ceiling 8.87) under add_remove"}]
        pd.DataFrame(rows).to_csv(folder / "leaderboard.csv", index=False)
        pd.DataFrame([{"method": "dpsgd", **({"relation, design": "add_remove, absent"} if design_logged else {})}]
                     ).to_csv(folder / "audits.csv", index=False)

    board("a-old", design_logged=False)
    line = next(x for x in answer_block(tmp_path) if x.startswith("| mnist | add/remove"))
    assert f"| a-old | | {LEGACY_AUDITS} |" in line.replace("|  |", "| |")
    # the same configuration in a study whose audits follow the claim's relation: its row is shown, verdict read
    board("b-new", design_logged=True)
    line = next(x for x in answer_block(tmp_path) if x.startswith("| mnist | add/remove"))
    assert "| b-new |" in line and "| not refuted (ceiling 8.87) under add_remove |" in line
    (tmp_path / "b-new" / "leaderboard.csv").unlink()
    (tmp_path / "a-old" / "audits.csv").unlink()  # a study without audits has nothing to mark: its verdict is read
    line = next(x for x in answer_block(tmp_path) if x.startswith("| mnist | add/remove"))
    assert "| a-old |" in line and "| not refuted (ceiling 8.87) under add_remove |" in line


def test_the_answer_takes_a_configuration_s_mechanism_audit_from_the_study_that_measured_it(tmp_path):
    """The row shown comes from one study (a-study wins the tie) and its mechanism audit from another holding the same
    release (configuration, delta, relation, mechanism, accountant), named beside it; another (q, T) or another
    relation borrows nothing; a refutation at the mechanism measured in any study, even one ranked after a study with
    a tight audit of its own, makes the shown row unsound."""
    from inputdp.reports.summary import answer_block

    def board(study: str, mechanism: tuple, q: float = 0.01, acc: float = 0.98, relation: str = "add_remove") -> None:
        folder = tmp_path / study  # the reference, DP-SGD and DP least squares (mechanism: (its text, word, fraction))
        folder.mkdir(exist_ok=True)
        common = {"dataset": "mnist", "preset": "best", "model": "m", "q": q, "T": 10, "delta": 1e-5, "seeds": 3,
                  "view": "own_best", "acc_std": 0.001, "guarantee": "true", "time_ratio_to_nonprivate": math.nan,
                  "speed_source": "", "mechanism": "subsampled_gaussian", "relation_key": "add_remove",
                  "adjacency": "add/remove one example", "mechanism audit": "", "accountant": "pld",
                  "mechanism_word": "", "mechanism_fraction": math.nan}
        audited = {"white_box_audits": 1, "white_box_lb": 0.1, "white_box_ceiling": 8.87,
                   "verdict": "not refuted (ceiling 8.87) under add_remove"}
        rows = [{**common, "method": "nonprivate", "epsilon": math.inf, "acc_mean": 0.99},
                {**common, **audited, "method": "dpsgd", "epsilon": 1.0, "acc_mean": acc, "mechanism audit": mechanism[0],
                 "mechanism_word": mechanism[1], "mechanism_fraction": mechanism[2], "relation_key": relation},
                {**common, **audited, "method": "dp_least_squares", "epsilon": 1.0, "acc_mean": 0.96}]
        pd.DataFrame(rows).to_csv(folder / "leaderboard.csv", index=False)

    def line() -> str:
        return next(x for x in answer_block(tmp_path) if x.startswith("| mnist | add/remove"))

    tight = ("tight to 0.97 at the mechanism (one step (grad_sample_mode=hooks))", "tight", 0.97)
    board("a-study", ("", "", math.nan))
    assert "at the mechanism" not in line()
    board("b-study", tight, q=0.02, acc=0.97)
    assert "| a-study |" in line() and "at the mechanism" not in line()  # another (q, T): another release
    board("b-study", tight, relation="zero_out")
    assert "at the mechanism" not in line()  # another relation's claim: its audit is not this row's
    board("b-study", tight)
    assert "| dpsgd (m) |" in line() and "| a-study |" in line()
    assert "| tight to 0.97 at the mechanism (in b-study); not refuted (ceiling 8.87) under add_remove |" in line()
    board("b-study", ("not tight at the mechanism (0.81 of the claim)", "not tight", 0.81))
    assert "| not tight at the mechanism (0.81 of the claim; in b-study); not refuted" in line()
    board("a-study", tight)  # the shown row's own audit ...
    board("c-study", ("refuted at the mechanism (one step (grad_sample_mode=hooks))", "refuted", 1.4))  # ... and elsewhere
    assert "| dp_least_squares (m) |" in line()  # DP-SGD's claim is refuted, in whichever study


def test_a_recipe_of_the_preset_s_own_at_an_epsilon_keeps_its_row_and_another_norm_gets_its_own():
    """A preset's recipe from an epsilon up (Fashion-MNIST's DP-SGD: lr 16 from 2.93, under add/remove and zero-out)
    is the preset's own there: no suffix, so the eps 1 and 2.93 runs share one row; a run with the same lr at 2.93 as
    eps 1's, or with another normalisation, or the published recipe under a relation it does not apply to, names
    what differs (two recipes never share a row)."""
    from inputdp.core import names
    from inputdp.reports.leaderboard.load import _recipe_suffix

    def run(eps: float, lr: float, norm: str = "group", relation: str = "") -> dict:
        return {f"tags.{names.TAG_METHOD}": "dpsgd", f"tags.{names.TAG_DATASET}": "fashionmnist",
                f"tags.{names.TAG_PRESET}": "best", f"params.{names.PARAM_EPSILON}": str(eps), "params.optimizer": "sgd",
                "params.lr": str(lr), "params.momentum": "0.9", "params.norm": norm,
                **({f"params.{names.PARAM_METHOD_OPTIONS}adjacency": relation} if relation else {})}

    runs = pd.DataFrame([run(1.0, 8.0), run(2.93, 16.0), run(2.93, 8.0), run(1.0, 8.0, "frozen")])
    assert list(_recipe_suffix(runs)) == ["", "", "lr=8.0", "norm=frozen"]
    # the published recipe is the preset's from 2.93 under add/remove and zero-out only: under one input replaced the
    # preset keeps lr 8, so the published recipe's run there is the one that names what differs
    runs = pd.DataFrame([run(2.93, 16.0, relation="zero_out"), run(2.93, 8.0, relation="replace_input"),
                         run(2.93, 16.0, relation="replace_input"), run(2.93, 8.0, relation="zero_out")])
    assert list(_recipe_suffix(runs)) == ["", "", "lr=16.0", "lr=8.0"]


def test_a_row_reads_its_seeds_claimed_curve_audits_at_one_level():
    """Three audits of one row, each a test at level 0.01: the row is refuted only where one's p-value (times its
    thresholds) is below 0.01 / 3 (Bonferroni over the row's audits); an audit refuted at its own level alone is
    counted and named, and the row reads tight to the median certified fraction."""
    from inputdp.reports.leaderboard.reading import claimed_curve, curve_text

    def audits(p_values, words):
        return pd.DataFrame({"verdict_bound_kind_white_box": "claimed_curve", "verdict_bound_white_box": [0.84, 1.01, 0.9],
                             "verdict_claimed_epsilon_white_box": 1.0, "verdict_word_white_box": words,
                             "verdict_tests_white_box": 1.0, "verdict_level_white_box": 0.01, "curve_p_value": p_values})

    one = claimed_curve(audits([0.3, 0.0062, 0.2], ["tight", "refuted", "tight"]))
    assert one["curve_word"] == "tight" and one["curve_refuted"] == 1 and one["curve_median"] == pytest.approx(0.9)
    assert curve_text(one) == ("tight to 0.90 of the claimed curve (median of 3 seeds, 0.84-1.01; 1 of 3 refuted at its "
                               "own level, not at the row's)")
    assert claimed_curve(audits([0.3, 0.003, 0.2], ["tight", "refuted", "tight"]))["curve_word"] == "refuted"
    unknown = audits([0.3, math.nan, 0.2], ["tight", "refuted", "tight"])  # a store without p-values: the audit's own
    assert claimed_curve(unknown)["curve_word"] == "refuted"
