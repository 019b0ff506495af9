"""A run is resolved once: one calibration per configuration (counted), its tags a function of the resolution, and
its key the configuration's, the noise's and the accounting's, so that a changed accountant reruns."""

from __future__ import annotations

import dataclasses

import pytest

from inputdp.benchmarks.cli import main
from inputdp.benchmarks.harness import run
from inputdp.benchmarks.resolve import check_feasible, resolve, resolve_all
from inputdp.benchmarks.sweep import build_config, run_sweep
from inputdp.core import names
from inputdp.core.config import PerfFlags
from inputdp.methods import METHODS

from ..helpers import QUIET


@pytest.fixture
def calibrations(monkeypatch):
    """Every call of a method's one calibration (its accountant's noise search), by method name."""
    counts: dict[str, int] = {}
    for name in METHODS.names():
        cls = METHODS.get(name).load()
        real = cls.calibrate

        def counting(self, spec, _real=real, _name=name):
            counts[_name] = counts.get(_name, 0) + 1
            return _real(self, spec)

        monkeypatch.setattr(cls, "calibrate", counting)
    return counts


def _smoke(method: str, epsilon: float = 4.0, seed: int = 0, **options):
    c = build_config(method=method, dataset="synthetic", preset="smoke", epsilon=epsilon, seed=seed)
    return c.replace(privacy=dataclasses.replace(c.privacy, steps=4), method_options={**c.method_options, **options})


@pytest.mark.slow
def test_a_sweep_calibrates_once_per_configuration(tmp_path, calibrations):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    argv = ["run", "--methods", "nonprivate,dirichlet_softmax,dpsgd", "--dataset", "synthetic", "--preset", "smoke",
            "--epsilons", "1,4", "--seeds", "0,1", "--steps", "4", "--tracking-uri", uri, "--no-progress"]
    assert main(argv) == 0
    # 2 seeds x 2 epsilons per private method, 2 seeds of the reference: the seeds share their budget's calibration
    assert calibrations == {"nonprivate": 1, "dirichlet_softmax": 2, "dpsgd": 2}
    calibrations.clear()
    assert main(argv) == 0  # all FINISHED: resolved (for their keys) once more, nothing run
    assert calibrations == {"nonprivate": 1, "dirichlet_softmax": 2, "dpsgd": 2}


@pytest.mark.slow
def test_a_run_and_an_audit_calibrate_once(tmp_path, calibrations):
    run(resolve(_smoke("dpsgd")), QUIET)
    assert calibrations == {"dpsgd": 1}
    calibrations.clear()
    common = ["--dataset", "synthetic", "--preset", "smoke", "--steps", "4", "--tracking-uri",
              f"sqlite:///{tmp_path / 'a.db'}", "--json"]
    assert main(["audit", "--method", "dpsgd", "--epsilon", "4", "--canaries", "20", *common]) == 0
    assert calibrations == {"dpsgd": 1}
    calibrations.clear()
    assert main(["audit", "--method", "dirichlet_softmax", "--epsilon", "4", "--model", "mlp", "--canary-kind",
                 "exclusive_support", "--runs", "8", *common]) == 0
    assert calibrations == {"dirichlet_softmax": 1}  # eight training runs, one calibration


def test_the_key_holds_the_noise_and_the_accounting(monkeypatch):
    r = resolve(_smoke("dpsgd"))
    assert r.identity()["noise"] == {"noise_multiplier": repr(float(r.calibration.noise["noise_multiplier"]))}
    assert "pld" in r.accounting and "dp_accounting" in r.accounting
    other_noise = dataclasses.replace(r, calibration=dataclasses.replace(
        r.calibration, noise={"noise_multiplier": r.calibration.noise["noise_multiplier"] * (1 + 1e-12)}))
    assert other_noise.key() != r.key()
    assert dataclasses.replace(r, accounting=r.accounting + "x").key() != r.key()
    assert r.key(PerfFlags(amp="bf16")) == f"{r.key()}-bf16"
    assert resolve(_smoke("dpsgd", accountant="rdp")).key() != r.key()
    assert resolve(_smoke("dpsgd")).key() == r.key()  # a pure function of the configuration
    assert resolve(_smoke("nonprivate")).accounting == ""


@pytest.mark.slow
def test_a_changed_accountant_version_reruns_instead_of_reusing(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    config = _smoke("dpsgd")
    assert len(run_sweep(check_feasible([config]), tracking_uri=uri, perf=QUIET).ran) == 1
    assert len(run_sweep(check_feasible([config]), tracking_uri=uri, perf=QUIET).skipped) == 1
    import inputdp.benchmarks.resolve as resolve_module

    real = resolve_module.accounting_version
    monkeypatch.setattr(resolve_module, "accounting_version", lambda: real() + "; a newer accountant")
    again = run_sweep(check_feasible([config]), tracking_uri=uri, perf=QUIET)
    assert len(again.ran) == 1 and not again.skipped


def test_tags_are_a_function_of_the_resolution():
    r = resolve(_smoke("dirichlet_softmax"))
    tags = r.tags(QUIET)
    assert tags[names.TAG_CONFIG_KEY] == r.key() and tags[names.TAG_VIEW] == "matched"
    assert tags[names.TAG_CONFIGS_TRIED] == "1" and tags[names.TAG_NORM] == r.norm
    assert tags[names.TAG_PRIVACY_ACCOUNTANT] == r.claim.accountant
    result = run(r, QUIET)
    assert result.calibration is r.calibration  # handed over, not searched again
    params = r.params()
    assert params[names.PARAM_ACCOUNTING_VERSION] == r.accounting
    assert params[f"{names.PARAM_NOISE}r"] == r.calibration.noise["r"]


def test_resolve_all_shares_a_budget_between_seeds_only(calibrations):
    configs = [_smoke("dpsgd", seed=s) for s in (0, 1, 2)] + [_smoke("dpsgd", epsilon=1.0)]
    out = resolve_all(configs)
    assert calibrations == {"dpsgd": 2}
    assert [r.config.seed for r in out] == [0, 1, 2, 0]
    assert len({r.key() for r in out}) == 4
    with pytest.raises(ValueError):
        out[0].with_config(configs[3])  # another budget is another resolution
