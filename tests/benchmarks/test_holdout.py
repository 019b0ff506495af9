"""`--holdout N`: a recipe search judged on training examples held out of training, never on the test split."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inputdp.benchmarks import harness
from inputdp.benchmarks.cli import main
from inputdp.benchmarks.performance.speed import synthetic_data
from inputdp.benchmarks.resolve import resolve
from inputdp.benchmarks.steps import evaluate
from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.core.errors import ConfigError
from inputdp.reports.leaderboard import leaderboard, load_runs, tidy

from ..helpers import QUIET


def _numbered(n_train: int = 100, n_test: int = 30):
    """Synthetic data whose every image carries its own index (train: 0..n-1, test: 1000+), to follow examples."""
    data = synthetic_data("mnist", n_train, "cpu")
    x_train = torch.arange(n_train, dtype=torch.float32).view(-1, 1, 1, 1).expand(-1, 1, 28, 28).clone()
    x_test = (1000 + torch.arange(n_test, dtype=torch.float32)).view(-1, 1, 1, 1).expand(-1, 1, 28, 28).clone()
    return dataclasses.replace(data, x_train=x_train, y_train=torch.arange(n_train) % 10, x_test=x_test,
                               y_test=torch.arange(n_test) % 10)


def _ids(x: torch.Tensor) -> list[int]:
    return [int(v) for v in x[:, 0, 0, 0]]


def test_the_held_out_examples_leave_training_and_replace_the_test_split():
    data = _numbered()
    split = data.hold_out(20)
    kept, held = _ids(split.x_train), _ids(split.x_test)
    assert len(kept) == 80 and len(held) == 20 and not set(kept) & set(held)
    assert sorted(kept + held) == list(range(100))  # every training example once, no test example
    assert [int(v) for v in split.y_test] == [i % 10 for i in held]  # labels travel with their images
    assert _ids(data.hold_out(20).x_test) == held  # a fixed draw: the same for every run and seed
    assert held != list(range(20)) and held != list(range(80, 100))  # drawn, not the first or last examples
    assert _ids(data.x_train) == list(range(100))  # the caller's data untouched


@pytest.mark.parametrize("bad", [0, -1, 100, 1000])
def test_a_holdout_that_leaves_nothing_to_train_or_evaluate_is_refused(bad):
    with pytest.raises(ConfigError, match=f"holdout={bad} is not allowed: it must be an integer in \\[1, 99\\]"):
        _numbered().hold_out(bad)


def _config(method: str = "dirichlet_softmax", holdout: int = 20, seed: int = 0):
    return build_config(method=method, dataset="mnist", preset="smoke", epsilon=2.0, seed=seed,
                        overrides=Overrides(steps=3, sampling_rate=0.1, holdout=holdout))


def test_a_held_out_run_trains_without_them_and_reports_its_accuracy_on_them():
    data = _numbered()
    p = harness.prepare(resolve(_config()), QUIET, data)
    assert p.data.train_size == 80 and _ids(p.data.x_test) == _ids(data.hold_out(20).x_test)
    assert harness.params_and_tags(p)[0]["train_size"] == 80 and harness.params_and_tags(p)[0]["holdout"] == 20
    result = harness.run(resolve(_config()), QUIET, data=data, keep_model=True)
    held = data.hold_out(20)
    acc, _ = evaluate(result.model, held.x_test, held.y_test, 1000)
    assert result.metrics["final_test_accuracy"] == pytest.approx(acc)
    # the privacy figures are those of the same (epsilon, delta, q, T): nothing about them depends on the split
    plain = harness.run(resolve(_config(holdout=0)), QUIET, data=data)
    assert result.claim == plain.claim
    assert result.metrics["final_epsilon_spent"] == pytest.approx(plain.metrics["final_epsilon_spent"], rel=1e-12)


def test_a_scatter_models_held_out_run_splits_the_features_computed_for_the_whole_training_set():
    data = synthetic_data("mnist", 60, "cpu")
    config = dataclasses.replace(_config(holdout=10), model="scatter_linear", norm="group")
    p = harness.prepare(resolve(config), QUIET, data)
    assert p.data.train_size == 50 and tuple(p.data.x_test.shape) == (10, 81, 7, 7)


def test_pate_refuses_a_holdout_its_public_inputs_would_be_private_examples(monkeypatch):
    from inputdp.benchmarks.resolve import check_feasible

    def no_data(*args, **kwargs):
        raise AssertionError("data was loaded before the refusal")

    monkeypatch.setattr(harness, "load_tensor_data", no_data)
    with pytest.raises(ConfigError, match="holdout=20 is not allowed with pate: it takes public inputs"):
        harness.prepare(resolve(_config("pate")), QUIET)  # refused before any data is read
    with pytest.raises(ConfigError, match="holdout=20 is not allowed with pate: it takes public inputs"):
        check_feasible([_config("dpsgd"), _config("pate")])  # a sweep refuses it before its first run


def test_runs_on_the_test_split_keep_their_keys_and_a_held_out_run_is_another_run():
    plain, held = _config(holdout=0), _config(holdout=20)
    assert "holdout" not in plain.identity()  # the keys stores already hold stay valid
    assert plain.key() != held.key() and held.identity()["holdout"] == 20
    with pytest.raises(ConfigError, match="holdout=-3 is not allowed"):
        dataclasses.replace(plain, holdout=-3)


def test_bench_run_with_holdout_says_so_and_the_leaderboard_keeps_it_apart(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke", "--no-progress",
              "--steps", "5", "--tracking-uri", uri]
    assert main([*common, "--holdout", "500"]) == 0
    out = capsys.readouterr().out
    assert "accuracy on 500 held-out training examples (--holdout), not on the test split" in out
    assert "holdout_acc" in out
    assert main(common) == 0
    train, audits = tidy(load_runs(uri))
    board = leaderboard(train, audits)
    assert sorted(board["method"]) == ["nonprivate", "nonprivate [holdout 500]"]


def test_an_audit_refuses_a_holdout_that_could_take_its_canaries_out():
    from inputdp.benchmarks.audits.multi_run import multi_run_audit
    from inputdp.benchmarks.audits.one_run import audit

    with pytest.raises(ConfigError, match="holdout=20 is not allowed in an audit"):
        audit(resolve(_config()), canaries=10, perf=QUIET, data=_numbered())
    with pytest.raises(ConfigError, match="holdout=20 is not allowed in an audit"):
        multi_run_audit(resolve(_config()), runs=8, canary_kind="random_pattern", score="loss", perf=QUIET)
