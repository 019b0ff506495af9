"""Studies: declared, run by one command into one store, resumable, their status read from the store."""

from __future__ import annotations

import re
import time

import pytest

from inputdp.benchmarks.cli import main
from inputdp.benchmarks.studies import STUDIES, configurations, rounds
from inputdp.benchmarks.study_audits import audited
from inputdp.methods import METHODS


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_the_published_studies_are_declared():
    cpu = configurations(STUDIES.get("mnist-cpu"), check_data=False)
    assert {r.config.method for r in cpu} == set(METHODS.names())  # every method, pate included
    private = [r for r in cpu if r.config.privacy.is_private]
    assert {r.config.privacy.epsilon for r in private} == {1.0, 4.0}
    assert {r.config.seed for r in cpu} == {0, 1, 2} and {r.config.preset for r in cpu} == {"cpu"}
    private_methods = {r.config.method for r in private}
    # each private method at each epsilon, by each of the study's audits; DP-SGD twice, at each relation:
    assert len(audited(cpu)) == 2 * (len(private_methods) + 1) == 14
    assert {r.variant for r in audited(cpu) if r.config.method == "dpsgd"} == {"", "adjacency=replace_input"}
    # random patterns on the row's model, exclusive support on an MLP, the canaries' own coordinates on the row's,
    # gradient canaries through DP-SGD's every iterate
    plans = STUDIES.get("mnist-cpu").audits
    assert [(p.canary_kind, p.canaries, p.model) for p in plans] == [("random_pattern", 1000, None),
                                                                    ("exclusive_support", 67, "mlp"),
                                                                    ("canary_inputs", 1000, None),
                                                                    ("gradient_canaries", 39_000, None)]
    # ... canary inputs for every method that trains its features (the fixed-feature methods are audited at the
    # mechanism), gradient canaries for DP-SGD's rows alone, at both relations
    assert {r.config.method for r in audited(cpu) if plans[2].applies(r)} == {
        "dirichlet_softmax", "dpsgd", "gaussian_penultimate", "pate"}
    gradient = [r for r in audited(cpu) if plans[3].applies(r)]
    assert {(r.config.method, r.variant) for r in gradient} == {("dpsgd", ""), ("dpsgd", "adjacency=replace_input")}
    assert len(gradient) == 4 and plans[3].every_seed
    assert len(plans[3].rows(cpu)) == 12 and {r.config.seed for r in plans[3].rows(cpu)} == {0, 1, 2}
    for name in ("mnist-best", "fashionmnist-best"):
        runs = configurations(STUDIES.get(name), check_data=False)
        assert {r.config.privacy.epsilon for r in runs if r.config.privacy.is_private} == {1.0, 2.93}
        assert {r.config.preset for r in runs} == {"best"}
        seeds = {m: {r.config.seed for r in runs if r.config.method == m} for m in METHODS.names()}
        # 3 seeds; 2 for PATE, whose one run at its best recipe takes over 10 minutes on 2 cores (the note says so)
        assert seeds.pop("pate") == {0, 1} and all(s == {0, 1, 2} for s in seeds.values())
        assert "pate at 2 seeds" in STUDIES.get("mnist-best").note
        # own recipes are compared by their whole runs: no interleaved step at one batch
        assert [part.speed_steps for part in STUDIES.get(name).parts] == [0, 0, 0, 0]
        # the three relations side by side for DP-SGD and DP least squares (feature perturbation: replace_input only)
        relations = {(r.config.method, r.claim.relation.key) for r in runs if r.config.privacy.is_private
                     and r.config.method in ("dpsgd", "dp_least_squares", "feature_perturbation")}
        assert relations == {(m, rel) for m in ("dpsgd", "dp_least_squares")
                             for rel in ("add_remove", "zero_out", "replace_input")} | {
            ("feature_perturbation", "replace_input")}
        # the zero-out rows: audited by gradient canaries (DP-SGD) alone; input canaries cannot build the null example
        zero = [r for r in runs if r.config.privacy.is_private and r.claim.relation.key == "zero_out"]
        assert len(zero) == 2 * 2 * 3
        plans = STUDIES.get(name).audits
        assert {(r.config.method, p.canary_kind) for r in zero for p in plans if p.applies(r)} == {
            ("dpsgd", "gradient_canaries")}
    # the interleaved step timing is the matched part's; DP-SGD at replace_input runs the same step as at add/remove
    assert [part.speed_steps for part in STUDIES.get("mnist-cpu").parts] == [50, 0]


def test_seeds_by_method_is_a_subset_of_the_seeds():
    import pytest

    from inputdp.benchmarks.studies import StudyPart

    with pytest.raises(ValueError, match="seeds_by_method"):
        StudyPart(dataset="mnist", preset="cpu", seeds=(0, 1), seeds_by_method={"pate": (2,)})
    assert {r.config.method for r in configurations(STUDIES.get("pate-paper"), check_data=False)} == {"pate"}


def test_a_study_runs_first_seed_first():
    study = STUDIES.get("mnist-cpu")
    runs = configurations(study, check_data=False)
    batches = rounds(study, runs)
    # every method, recipe and epsilon at seed 0, then at seed 1, then at seed 2: a study stopped part-way leaves
    # every row at fewer seeds (the audits and speed run follow the first round)
    assert [{r.config.seed for r in b} for b in batches] == [{0}, {1}, {2}]
    rows = [{(r.config.method, r.variant, r.config.privacy.epsilon) for r in b} for b in batches]
    private = {r.config.method for r in runs if r.config.privacy.is_private}
    # nonprivate once; DP-SGD at both relations
    assert rows[0] == rows[1] == rows[2] and len(rows[0]) == 1 + 2 * (len(private) + 1) == 15
    assert sorted(r.key() for b in batches for r in b) == sorted(r.key() for r in runs)


@pytest.mark.slow
def test_a_study_runs_resumes_and_says_where_it_stands(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["--tracking-uri", uri, "--no-progress", "--device", "cpu"]
    assert main(["study", "status", "smoke", *common]) == 0
    assert "0 done, 0 running, 8 missing" in capsys.readouterr().out  # 4 runs, 3 audits, 1 speed: nothing stored
    assert main(["study", "run", "smoke", *common]) == 0
    assert "ran 4, already finished 0" in capsys.readouterr().out
    assert main(["study", "status", "smoke", *common]) == 0
    assert "8 done, 0 running, 0 missing" in capsys.readouterr().out
    t0 = time.perf_counter()
    assert main(["study", "run", "smoke", *common]) == 0
    again = capsys.readouterr().out
    assert "ran 0, already finished 4" in again and "speed measurements run 0" in again
    assert time.perf_counter() - t0 < 60  # a finished study run again starts nothing
    out = tmp_path / "report"
    assert main(["report", "--tracking-uri", uri, "--experiment", "smoke", "--out", str(out)]) == 0
    board = (out / "leaderboard.csv").read_text()
    assert "dirichlet_softmax" in board and "nonprivate" in board and "dpsgd" not in board
    # the speed column comes from the study's interleaved measurement, unless that was contended
    import pandas as pd

    from inputdp.benchmarks.tracking import client, experiment_id
    from inputdp.core import names

    c = client(uri)
    (speed,) = [r for r in c.search_runs([experiment_id(c, "smoke")]) if r.data.tags.get(names.TAG_KIND) == "speed"]
    sources = pd.read_csv(out / "leaderboard.csv").set_index("method")["speed_source"]
    board = pd.read_csv(out / "leaderboard.csv").set_index("method")
    if speed.data.metrics[names.METRIC_CONTENDED] == 0:
        assert sources["dirichlet_softmax"].startswith("interleaved, quartiles")
        assert speed.data.metrics[names.METRIC_SPEED_RATIO.format("nonprivate")] == 1.0
        # memory: each method alone in a fresh process (a CPU's shared RSS is never shown)
        for m in ("nonprivate", "dirichlet_softmax"):
            alone = speed.data.metrics[names.METRIC_SPEED_MEMORY.format(m)]
            assert board.loc[m, "peak_memory_mb"] == alone and alone > 50  # torch alone holds more than that
            assert 0 < speed.data.metrics[names.METRIC_SPEED_STEP_MEMORY.format(m)] < alone
            assert board.loc[m, "memory_source"] == "alone in a fresh process (CPU), speed run"
        assert speed.data.params[names.PARAM_MEMORY_KIND].startswith("CPU: each method alone")
    else:
        assert sources["dirichlet_softmax"] == "sequential runs"
        assert board["peak_memory_mb"].isna().all()  # the runs' own RSS is not attributable


@pytest.mark.slow
def test_a_study_runs_its_timed_work_and_its_audits_apart(tmp_path, capsys):
    """--only training runs the training and speed runs (timed: to be run alone) and no audit; --only audits then
    runs the audits alone (no timings: they may share the cores), and nothing of the rest is run again."""
    uri = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["--tracking-uri", uri, "--no-progress", "--device", "cpu"]
    assert main(["study", "run", "smoke", "--only", "training", *common]) == 0
    out, err = capsys.readouterr()
    assert "ran 4, already finished 0" in out and "audits and speed measurements run 1" in out
    assert "finished audit" not in err and err.count("] ran ") == 4  # a line per run, on stderr
    assert main(["study", "status", "smoke", *common]) == 0
    assert "5 done, 0 running, 3 missing" in capsys.readouterr().out  # the three audits
    assert main(["study", "run", "smoke", "--only", "audits", *common]) == 0
    out, err = capsys.readouterr()
    assert "ran 0, already finished 0" in out and "audits and speed measurements run 3" in out
    assert err.count("finished audit") == 3 and "] ran " not in err
    # each audit's line: its place among the study's, its verdict (the four words) and its minutes
    lines = re.findall(r"\[(\d)/3\] finished audit \(.+\) of .+: (refuted|not refuted|no power).* in \d+\.\d min", err)
    assert [k for k, _ in lines] == ["1", "2", "3"]
    assert main(["study", "status", "smoke", *common]) == 0
    assert "8 done, 0 running, 0 missing" in capsys.readouterr().out


def test_a_study_reaps_an_audit_whose_process_died_and_leaves_a_live_one(tmp_path):
    """A study claims each audit as a training run is claimed: one left RUNNING by a process killed outright
    (SIGKILL) is marked FAILED and run again; one whose process lives (its heartbeat fresh, on another host) is left
    to it; a FINISHED one is not run again."""
    import socket
    import subprocess
    import time as clock

    from inputdp.benchmarks.tracking import MLflowTracker
    from inputdp.core import names

    uri = f"sqlite:///{tmp_path / 's.db'}"
    store = MLflowTracker(uri, "s")
    c, exp = store.client, store.experiment_id
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = socket.gethostname()

    def stored(key: str, **tags: str) -> str:
        return c.create_run(exp, tags={names.TAG_CONFIG_KEY: key, **tags}).info.run_id

    def audit_needed(key: str) -> bool:
        tracker = MLflowTracker(uri, "s")
        needed = tracker.claim(key, "audit-x").status == "claimed"
        tracker.release()  # the claim withdrawn: this test runs no audit
        return needed

    gone = stored("audit:a", **{names.TAG_HOST: here, names.TAG_PID: str(dead.pid),
                                names.TAG_HEARTBEAT: f"{clock.time():.3f}"})
    assert audit_needed("audit:a")
    assert c.get_run(gone).info.status == "FAILED"
    live = stored("audit:b", **{names.TAG_HOST: "another-host", names.TAG_PID: "1",
                                names.TAG_HEARTBEAT: f"{clock.time():.3f}"})
    assert not audit_needed("audit:b") and c.get_run(live).info.status == "RUNNING"
    c.set_terminated(stored("audit:c"), status="FINISHED")
    assert not audit_needed("audit:c")
    assert audit_needed("audit:d")  # nothing stored


def test_a_study_reads_its_data_where_it_is_told(tmp_path, capsys):
    """``--data-dir`` reaches every configuration (training, audits and speed); a folder without the data is refused
    in one line before any store exists."""
    from inputdp.benchmarks.studies import expanded

    assert {c.data_dir for c in expanded(STUDIES.get("mnist-cpu"), str(tmp_path))} == {str(tmp_path)}
    db = tmp_path / "s.db"
    rc = main(["study", "run", "mnist-cpu", "--data-dir", str(tmp_path / "empty"), "--tracking-uri", f"sqlite:///{db}",
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "mnist" in err.lower()
    assert not db.exists()


def test_study_refusals_are_one_line(capsys):
    assert main(["study", "run", "nosuch"]) == 2
    assert "unknown study 'nosuch'" in capsys.readouterr().err
    assert main(["study", "status"]) == 2
    assert "needs a study's name" in capsys.readouterr().err


def test_an_audit_the_data_cannot_hold_is_refused_before_any_work(tmp_path):
    """Exclusive-support canaries each need coordinates blank in every training example: a study whose audit asks
    for more than the data leave is refused in one line before its store is opened, not after its first round."""
    import pytest

    from inputdp.benchmarks.studies import AuditPlan, Study, StudyPart, run_study
    from inputdp.core.config import PerfFlags
    from inputdp.core.errors import ConfigError

    study = Study(name="too-many", target="", summary="", parts=(
        StudyPart(dataset="synthetic", preset="smoke", methods=("dirichlet_softmax",), epsilons=(4.0,), seeds=(0,),
                  overrides={"steps": 2}, speed_steps=0),),
        audits=(AuditPlan(canary_kind="exclusive_support", canaries=10**6, model="mlp"),))
    db = tmp_path / "s.db"
    with pytest.raises(ConfigError, match=r"exclusive_support x1000000 on mlp' does not fit synthetic.*declare at most"):
        run_study(study, tracking_uri=f"sqlite:///{db}", perf=PerfFlags(device="cpu", progress=False))
    assert not db.exists()


@pytest.mark.slow
def test_the_declared_exclusive_support_audits_fit_their_data(shared_data):
    """On the real data: MNIST's 60,000 training images leave 67 coordinates blank in all of them (the audit's 67
    canaries), Fashion-MNIST's none, so fashionmnist-best declares random patterns only (both bounds)."""
    from inputdp.benchmarks.audits.one_run import free_coordinates
    from inputdp.benchmarks.study_audits import check_audits
    from inputdp.datasets import load_tensor_data

    free = {name: len(free_coordinates(load_tensor_data(name, data_dir=str(shared_data), download=False)))
            for name in ("mnist", "fashionmnist")}
    assert free == {"mnist": 67, "fashionmnist": 0}
    for name in ("mnist-cpu", "mnist-best", "fashionmnist-best"):
        study = STUDIES.get(name)
        check_audits(study, configurations(study, str(shared_data)))  # refuses what does not fit
    assert [p.canary_kind for p in STUDIES.get("fashionmnist-best").audits] == ["random_pattern", "canary_inputs",
                                                                                 "gradient_canaries"]


def _dpsgd_study(name: str, canaries: int):
    from inputdp.benchmarks.studies import AuditPlan, Study, StudyPart

    return Study(name=name, target="", summary="", parts=(
        StudyPart(dataset="synthetic", preset="smoke", methods=("dpsgd", "dirichlet_softmax"), epsilons=(4.0,),
                  seeds=(0,), overrides={"steps": 20}, speed_steps=0),),
        audits=(AuditPlan(canary_kind="gradient_canaries", canaries=canaries),))


def test_gradient_canaries_that_break_delta_below_one_over_n_are_refused_before_any_work(tmp_path):
    """Every gradient canary is a training row: n + m must stay below 1/delta, refused in one line up front."""
    import pytest

    from inputdp.benchmarks.studies import run_study
    from inputdp.core.config import PerfFlags
    from inputdp.core.errors import ConfigError

    db = tmp_path / "s.db"
    with pytest.raises(ConfigError, match=r"gradient_canaries x1000000. of .*dpsgd.*: 1000000 gradient canaries do not "
                                          r"fit synthetic: delta=.* is not allowed for n=\d+ .*declare fewer gradient "
                                          r"canaries"):
        run_study(_dpsgd_study("too-many-gradients", 10**6), tracking_uri=f"sqlite:///{db}",
                  perf=PerfFlags(device="cpu", progress=False))
    assert not db.exists()


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_a_study_audits_its_dpsgd_rows_with_gradient_canaries_and_no_other_row(tmp_path):
    """The gradient-canary plan applies to DP-SGD alone (Dirichlet's row is not audited by it), goes through the
    study's store under its audit key, and the stored audit names its relation and design."""
    from inputdp.benchmarks.studies import run_study
    from inputdp.benchmarks.tracking import open_store
    from inputdp.core import names
    from inputdp.core.config import PerfFlags

    db = tmp_path / "s.db"
    _, extra = run_study(_dpsgd_study("gradients", 200), tracking_uri=f"sqlite:///{db}",
                         perf=PerfFlags(device="cpu", progress=False))
    assert [e.split(" of ")[0] for e in extra] == ["audit (gradient_canaries x200)"]
    assert "dpsgd" in extra[0] and "dirichlet" not in extra[0]
    client, exp = open_store(f"sqlite:///{db}", "gradients", create=False)
    runs = client.search_runs([exp], filter_string=f"tags.{names.TAG_KIND} = '{names.KIND_AUDIT}'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    tags = runs[0].data.tags
    assert tags[names.TAG_CANARY_KIND] == "gradient_canaries" and tags[names.TAG_AUDIT_DESIGN] == "absent"
    assert names.METRIC_THREAT_BOUND.format("white_box") in runs[0].data.metrics


def test_status_without_the_data_reads_the_declaration_and_estimates(tmp_path, monkeypatch, capsys):
    """A fresh clone with no data and no store: ``bench study status mnist-cpu`` says what is missing, by kind, and
    how long it should take, from the preset's measured minutes; exit 0 (the store is matched by tags, and says so)."""
    monkeypatch.setenv("INPUTDP_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["study", "status", "mnist-cpu", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    n = len(configurations(STUDIES.get("mnist-cpu"), check_data=False))
    assert f"0 done, 0 running, {n + 14 + 14 + 10 + 12 + 1} missing" in out  # 45 runs, 50 audits, a speed run
    assert "training dpsgd x12" in out and "audit gradient_canaries x12" in out and "speed x1" in out
    # 95 runs and audits at the cpu preset's 0.4 to 2.3 minutes, and 5 for the speed run
    assert "estimated time for the missing work: about 43 min to 3 h 44 min" in out and "the data are not at hand" in out
    assert not (tmp_path / "none.db").exists()  # reading a status creates no store


def test_status_matched_by_tags_finds_a_stored_run(tmp_path, monkeypatch, capsys):
    """Without the data, a FINISHED run stored under the declaration's method, recipe, seed, model and budget (its
    match key carries the data's fingerprint) counts as done, and its time times the missing runs of its method."""
    from inputdp.benchmarks.study_status import status
    from inputdp.benchmarks.tracking import open_store

    monkeypatch.setenv("INPUTDP_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    study = STUDIES.get("mnist-cpu")
    r = next(r for r in configurations(study, check_data=False) if r.config.method == "dpsgd" and not r.variant)
    c, exp = open_store(uri, "mnist-cpu")
    run = c.create_run(exp, run_name="dpsgd-mnist", tags={
        **r.tags(), "match_key": r.config.match_key().replace("mnist|", "mnist@0123abcd|")})
    c.set_terminated(run.info.run_id, "FINISHED", end_time=run.info.start_time + 3 * 60_000)
    st = status(study, tracking_uri=uri)
    assert len(st.done) == 1 and st.done[0].startswith("dpsgd mnist cpu") and st.missing_kinds["training dpsgd"] == 11
    assert any("matched by their tags" in n for n in st.notes)
    lo, hi = st.minutes
    preset_only = status(STUDIES.get("mnist-cpu"), tracking_uri=f"sqlite:///{tmp_path / 'none.db'}").minutes
    # the other five add/remove dpsgd runs, and that row's audits (no audit is stored: an audit is timed by its row's
    # training), at the stored 3 minutes instead of the preset's 0.4 to 2.3 (the replace_input recipe's six are another
    # recipe: still the preset's); one run fewer missing
    audits = sum(label.startswith("audit (") and " of dpsgd mnist " in label for label in st.missing)
    assert audits == 12  # random patterns, exclusive support, canary inputs at seed 0, gradient canaries at 3 seeds
    assert lo == pytest.approx(preset_only[0] - (6 + audits) * 0.4 + (5 + audits) * 3)
    assert hi == pytest.approx(preset_only[1] - (6 + audits) * 2.3 + (5 + audits) * 3)


def test_status_times_a_missing_audit_by_its_row_before_its_kind(tmp_path):
    """A missing audit is timed by the finished audits of its kind on the same row, else by its row's training runs
    (an audit trains at its row's recipe), else by every audit of its kind; a training run only by its own row's."""
    from inputdp.benchmarks.study_status import _stored_minutes
    from inputdp.benchmarks.tracking import open_store
    from inputdp.core import names

    client, exp = open_store(f"sqlite:///{tmp_path / 'store.db'}", "mnist-cpu")

    def finished(minutes: float, **tags):
        run = client.create_run(exp, tags=tags)
        client.set_terminated(run.info.run_id, "FINISHED", end_time=run.info.start_time + minutes * 60_000)
        return client.get_run(run.info.run_id)

    rows = configurations(STUDIES.get("mnist-cpu"), check_data=False)
    dpsgd, dirichlet, gaussian = (next(r for r in rows if r.config.method == m and not r.variant)
                                  for m in ("dpsgd", "dirichlet_softmax", "gaussian_penultimate"))
    audit = {names.TAG_KIND: names.KIND_AUDIT, names.TAG_CANARY_KIND: "random_pattern"}
    train = [finished(3, **{names.TAG_KIND: "train", names.TAG_METHOD: "dpsgd"})]
    audits = [finished(10, **audit, **{names.TAG_METHOD: "dirichlet_softmax"})]
    assert _stored_minutes("audit", dpsgd, "random_pattern", train, audits) == pytest.approx(3)  # its row's training
    assert _stored_minutes("audit", dirichlet, "random_pattern", train, audits) == pytest.approx(10)
    audits.append(finished(20, **audit, **{names.TAG_METHOD: "dpsgd"}))
    assert _stored_minutes("audit", dpsgd, "random_pattern", train, audits) == pytest.approx(20)  # its kind's, its row
    assert _stored_minutes("audit", gaussian, "random_pattern", train, audits) == pytest.approx(15)  # its kind's
    assert _stored_minutes("audit", gaussian, "canary_inputs", train, audits) is None
    assert _stored_minutes("training", gaussian, "", train, audits) is None


def test_the_relations_study_puts_each_sound_method_under_each_relation_it_supports():
    """What public labels buy, side by side: DP-SGD and DP least squares under add/remove, zero-out and one input
    replaced, feature perturbation under the one relation it has, beside the non-private reference, on both data
    sets at eps 1 and 2.93, 3 seeds; audited by gradient canaries (DP-SGD's rows alone)."""
    runs = configurations(STUDIES.get("relations"), check_data=False)
    private = [r for r in runs if r.config.privacy.is_private]
    got = {(r.config.dataset, r.config.method, r.claim.relation.key) for r in private}
    want = {(d, m, rel) for d in ("mnist", "fashionmnist") for m in ("dpsgd", "dp_least_squares")
            for rel in ("add_remove", "zero_out", "replace_input")}
    assert got == want | {(d, "feature_perturbation", "replace_input") for d in ("mnist", "fashionmnist")}
    assert len(private) == len(got) * 2 * 3 and {r.config.privacy.epsilon for r in private} == {1.0, 2.93}
    assert sum(r.config.method == "nonprivate" for r in runs) == 2 * 3
    (plan,) = STUDIES.get("relations").audits
    assert {(r.config.method, r.claim.relation.key) for r in private if plan.applies(r)} == {
        ("dpsgd", rel) for rel in ("add_remove", "zero_out", "replace_input")}
