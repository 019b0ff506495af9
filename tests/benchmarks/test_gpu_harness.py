"""The speed flags on the CPU: bf16 autocast leaves every private computation in float32, compile and amp are
refused in one line where a method cannot take them, the device sampler draws the same law as the CPU sampler
(which is unchanged), and `bench gpu-check` runs at a smoke size."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch

from inputdp.benchmarks.cli import main
from inputdp.benchmarks.harness import prepare, run
from inputdp.benchmarks.performance.speed import synthetic_data
from inputdp.benchmarks.resolve import check_feasible, resolve
from inputdp.benchmarks.sampling import batch_generator, poisson_batches, poisson_indices, poisson_indices_by_coins
from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError

BF16 = PerfFlags(device="cpu", amp="bf16", progress=False)


def _prepared(method: str, perf: PerfFlags = BF16, **options):
    data = synthetic_data("mnist", 512, "cpu")
    config = build_config(method=method, dataset="synthetic", preset="smoke", epsilon=4.0, seed=0,
                          overrides=Overrides(sampling_rate=32 / 512, steps=4, train_examples=512,
                                              method_options={method: options} if options else {}))
    return prepare(resolve(config), perf, data), data


def _batch(data, n=32):
    return data.x_train[:n], data.y_train[:n]


def test_dirichlet_under_bf16_draws_its_gammas_in_float32(monkeypatch):
    from inputdp.methods import dirichlet_softmax as ds

    seen = {}
    real = ds.Gamma

    class Recording(real):
        def __init__(self, concentration, rate, **kw):
            seen["concentration"] = concentration.dtype
            super().__init__(concentration, rate, **kw)

    monkeypatch.setattr(ds, "Gamma", Recording)
    real_nll = ds.dirichlet_nll

    def nll(logits, y, r, alpha, observe=None, generator=None):
        seen["logits"] = logits.dtype
        out = real_nll(logits, y, r, alpha, observe, generator)
        seen["loss"] = out.dtype
        return out

    monkeypatch.setattr(ds, "dirichlet_nll", nll)
    p, data = _prepared("dirichlet_softmax")
    with p.method.autocast(data.x_train):  # what the network computes in: bf16
        assert p.model(_batch(data)[0]).dtype == torch.bfloat16
    loss = p.step(*_batch(data))
    assert seen == {"concentration": torch.float32, "logits": torch.float32, "loss": torch.float32}
    assert loss.dtype == torch.float32 and math.isfinite(float(loss))
    assert all(q.dtype == torch.float32 for q in p.model.parameters())


def test_gaussian_penultimate_under_bf16_noises_float32_features():
    p, data = _prepared("gaussian_penultimate")
    with p.method.autocast(data.x_train):
        assert p.model.features(_batch(data)[0]).dtype == torch.bfloat16
    released = p.method.noisy_features(p.model, _batch(data)[0])
    assert released.dtype == torch.float32
    assert float(p.step(*_batch(data))) > 0


@pytest.mark.parametrize("mode", ["hooks", "functorch"])
def test_dpsgd_under_bf16_clips_and_noises_float32_per_example_gradients(mode, monkeypatch):
    p, data = _prepared("dpsgd", grad_sample_mode=mode)
    seen = []
    optimizer = p.optimizer
    real_clip = optimizer.clip_and_accumulate

    def clip_and_accumulate():
        seen.extend(g.dtype for g in optimizer.grad_samples)
        real_clip()

    monkeypatch.setattr(optimizer, "clip_and_accumulate", clip_and_accumulate)
    before = [q.detach().clone() for q in p.model.parameters()]
    p.step(*_batch(data))
    assert seen and set(seen) == {torch.float32}
    assert all(q.grad is None or q.grad.dtype == torch.float32 for q in p.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, p.model.parameters()))


def test_the_calibration_does_not_depend_on_speed_flags():
    fp32, _ = _prepared("dpsgd", PerfFlags(device="cpu", progress=False))
    bf16, _ = _prepared("dpsgd")
    assert fp32.calibration.noise == bf16.calibration.noise and fp32.calibration.epsilon == bf16.calibration.epsilon


@pytest.mark.parametrize("method,perf,needle", [
    ("dpsgd", PerfFlags(device="cpu", compile=True, progress=False), "--compile is not allowed for dpsgd"),
    ("pate", PerfFlags(device="cpu", amp="bf16", progress=False), "own loop"),
])
def test_flags_a_method_cannot_take_are_refused(method, perf, needle):
    with pytest.raises(ConfigError, match=needle):
        _prepared(method, perf)


def test_ghost_clipping_under_bf16_is_refused():
    with pytest.raises(ConfigError, match="ghost"):
        _prepared("dpsgd", grad_sample_mode="ghost")


def test_bad_amp_is_one_line(capsys):
    assert main(["speed", "--methods", "dirichlet_softmax", "--dataset", "synthetic", "--synthetic", "--amp", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--amp 'fp8'" in err


@pytest.mark.slow
def test_a_bf16_smoke_run_trains_as_float32_does():
    config = build_config(method="nonprivate", dataset="synthetic", preset="smoke", epsilon=4.0, seed=0,
                          overrides=Overrides())
    fp32 = run(resolve(config), PerfFlags(device="cpu", progress=False)).metrics["final_test_accuracy"]
    bf16 = run(resolve(config), BF16).metrics["final_test_accuracy"]
    assert bf16 > 0.8 and abs(bf16 - fp32) < 0.03  # the cpu-preset Dirichlet comparison (2 seeds): README


# --- the samplers ----------------------------------------------------------------------------------------------

def test_the_cpu_sampler_is_unchanged():
    """The geometric-gap sampler every CPU figure was measured with: the same indices as before the device sampler
    existed (a digest of 50 batches taken before the change)."""
    g = torch.Generator().manual_seed(123)
    h = hashlib.sha256()
    for b in poisson_batches(60000, 256 / 60000, 50, g):
        h.update(b.numpy().tobytes())
    assert h.hexdigest() == "42c3d301795efb69be4c7052a714de55fd7debb7ffc9b1773ec694d347ce43aa"


@pytest.mark.parametrize("sampler", [poisson_indices, poisson_indices_by_coins], ids=["gaps", "coins"])
def test_both_samplers_draw_bernoulli_inclusions(sampler):
    n, q, draws = 400, 0.05, 3000
    g = torch.Generator().manual_seed(7)
    counts = torch.zeros(n)
    sizes = []
    for _ in range(draws):
        idx = sampler(n, q, g)
        assert torch.all(idx[1:] > idx[:-1])  # sorted, no repeats
        counts[idx] += 1
        sizes.append(len(idx))
    sizes_t = torch.tensor(sizes, dtype=torch.float64)
    mean, var = n * q, n * q * (1 - q)
    assert abs(float(sizes_t.mean()) - mean) < 5 * math.sqrt(var / draws)
    assert abs(float(sizes_t.var()) / var - 1) < 0.12  # Binomial(n, q) spread
    # each example's inclusion count is Binomial(draws, q): a chi-square over the n examples
    expected = draws * q
    chi2 = float(((counts - expected) ** 2 / (expected * (1 - q))).sum())
    assert abs(chi2 - n) < 6 * math.sqrt(2 * n)


def test_the_device_generator_path_is_taken_for_a_device_generator(monkeypatch):
    """poisson_batches draws by coins, on the device, for a generator that lives there, and by gaps otherwise. No
    CUDA here: a generator that says it lives on a device reaches the coins sampler (recorded), never the gaps one."""
    from inputdp.benchmarks import sampling

    calls = []

    class DeviceGenerator:  # what poisson_batches reads of a CUDA generator: where it lives
        device = torch.device("cuda", 0)

    def coins(n, q, generator):
        calls.append(("coins", n, q, generator))
        return torch.arange(3)

    def gaps(n, q, generator):
        calls.append(("gaps", n, q, generator))
        return torch.arange(2)

    monkeypatch.setattr(sampling, "poisson_indices_by_coins", coins)
    monkeypatch.setattr(sampling, "poisson_indices", gaps)
    g = DeviceGenerator()
    out = list(sampling.poisson_batches(1000, 0.1, 2, g, "cpu"))
    assert [c[0] for c in calls] == ["coins", "coins"] and all(c[3] is g for c in calls)
    assert all(torch.equal(b, torch.arange(3)) for b in out)
    calls.clear()
    list(sampling.poisson_batches(1000, 0.1, 2, torch.Generator().manual_seed(0), "cpu"))
    assert [c[0] for c in calls] == ["gaps", "gaps"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_generator_draws_on_the_device():
    g = batch_generator("cuda", 0)
    idx = next(poisson_batches(1000, 0.1, 1, g, "cuda"))
    assert idx.device.type == "cuda"
    assert torch.equal(idx, poisson_indices_by_coins(1000, 0.1, batch_generator("cuda", 0)))


# --- bench gpu-check at a smoke size -----------------------------------------------------------------------------

@pytest.mark.slow
def test_gpu_check_runs_at_a_smoke_size_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "gc.json"
    code = main(["gpu-check", "--device", "cpu", "--steps", "3", "--warmup", "1", "--batch-size", "8",
                 "--variants", "fp32,bf16", "--out", str(out), "--json"])
    assert code == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    rows = {(r["dataset"], r["method"], r["options"].removeprefix("grad_sample_mode="), r["variant"]): r
            for r in result["rows"]}
    for dataset in ("cifar10", "mnist"):  # the paper's shapes: ResNet-18 on CIFAR-10, Inception on MNIST
        for method in ("nonprivate", "dirichlet_softmax", "gaussian_penultimate"):
            for variant in ("fp32", "bf16"):
                r = rows[(dataset, method, "", variant)]
                assert r["epoch_s"] > 0 and r["examples_per_s"] > 0 and r["peak_memory_mb"] > 0
                assert r["ratio_to_nonprivate"] > 0
        for mode in ("hooks", "functorch", "ghost", "bk"):
            assert rows[(dataset, "dpsgd", mode, "fp32")]["dpsgd_over_dirichlet_softmax"] > 0
        assert rows[(dataset, "dpsgd", "hooks", "bf16")]["epoch_s"] > 0
        assert "ghost" in rows[(dataset, "dpsgd", "ghost", "bf16")]["refused"]
        assert "bk" in rows[(dataset, "dpsgd", "bk", "bf16")]["refused"]
    assert result["steps"] == 3 and result["expected_batch_size"] == 8 and result["complete"] is True


def test_gpu_check_keeps_its_rows_when_it_dies_part_way(tmp_path, monkeypatch):
    """The JSON is rewritten after every configuration: a check killed part-way (the CPU machine's OOM killer ended
    a full-size check after 14 minutes) leaves what it measured, marked incomplete."""
    from inputdp.benchmarks.performance import gpucheck

    real, calls = gpucheck._time_one, []

    def dies_on_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as uncatchable as a kill, for the loop
        return real(*args, **kwargs)

    monkeypatch.setattr(gpucheck, "_time_one", dies_on_the_third)
    out = tmp_path / "gc.json"
    with pytest.raises(KeyboardInterrupt):
        gpucheck.check(shapes="mnist:small_cnn", variants="fp32", methods="dirichlet_softmax,gaussian_penultimate",
                       steps=2, warmup=0, batch_size=8, device="cpu", progress=False, out=out)
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and [r["method"] for r in saved["rows"]] == ["nonprivate", "dirichlet_softmax"]
    assert all(r["epoch_s"] > 0 for r in saved["rows"])


@pytest.mark.slow
def test_gpu_check_compiles_what_can_be_compiled(tmp_path):
    out = tmp_path / "gc.json"
    assert main(["gpu-check", "--device", "cpu", "--steps", "2", "--warmup", "1", "--batch-size", "8",
                 "--shapes", "mnist:small_cnn", "--variants", "compile", "--methods", "dirichlet_softmax,dpsgd",
                 "--out", str(out), "--json"]) == 0
    rows = json.loads(out.read_text())["rows"]
    compiled = [r for r in rows if r["method"] in ("nonprivate", "dirichlet_softmax")]
    assert len(compiled) == 2 and all(r["epoch_s"] > 0 for r in compiled)
    assert all("--compile is not allowed for dpsgd" in r["refused"] for r in rows if r["method"] == "dpsgd")


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_a_bf16_run_is_not_the_float32_run_of_its_configuration(tmp_path):
    from inputdp.benchmarks.sweep import expand, run_sweep
    from inputdp.reports.leaderboard import load_runs, tidy

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    configs = expand(methods=["nonprivate"], dataset="synthetic", preset="smoke", epsilons=[1.0], seeds=[0],
                     overrides=Overrides(steps=4))
    fp32 = PerfFlags(device="cpu", progress=False)
    assert len(run_sweep(check_feasible(configs), tracking_uri=uri, perf=fp32).ran) == 1
    second = run_sweep(check_feasible(configs), tracking_uri=uri, perf=BF16)
    assert len(second.ran) == 1 and not second.skipped  # not taken for the float32 run
    assert len(run_sweep(check_feasible(configs), tracking_uri=uri, perf=BF16).skipped) == 1  # but a bf16 rerun is
    train, _ = tidy(load_runs(uri))
    assert sorted(train["method"]) == ["nonprivate", "nonprivate [bf16]"]
