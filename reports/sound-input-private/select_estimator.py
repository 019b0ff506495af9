"""Choose dp_least_squares' estimator (PSD projection or not, ridge) on public data: for MNIST on Fashion-MNIST and
vice versa. The release is the method's own (noisy_statistics at the calibrated noise, clip 1, split 0.5,
replace_input); each setting's solve is done from one eigendecomposition of the noisy A~ per (data set, eps, draw)
(checked against DPLeastSquares.solve for the default setting). Accuracy on the selection data set's test split.
Usage: python reports/sound-input-private/select_estimator.py [DATASET ...] [--no-check]  (prints one line per
setting; the data from $INPUTDP_SHARED_DATA, default shared/data beside the clone; about 16 minutes a data set on one
core). Its output of 2026-12-06 is estimator_selection.txt beside it."""
import math
import os
import sys
import time
from pathlib import Path

import torch

from inputdp.benchmarks.models import build_model
from inputdp.core.config import PrivacySpec
from inputdp.datasets import load_tensor_data
from inputdp.methods.dp_least_squares import DPLeastSquares, sensitivities
from inputdp.methods.features import clipped_features, feature_map

torch.set_num_threads(1)
SETTINGS = [(True, 0.05), (True, 0.1), (True, 0.25), (True, 0.5), (True, 1.0), (False, 2.0)]
EPSILONS = (1.0, 2.93)
DRAWS = (0, 1)
CHECK = "--no-check" not in sys.argv
DATA_DIR = os.environ.get("INPUTDP_SHARED_DATA", str(Path(__file__).resolve().parents[3] / "shared" / "data"))

for dataset in [a for a in sys.argv[1:] if not a.startswith("--")] or ["fashionmnist", "mnist"]:
    t0 = time.time()
    data = load_tensor_data(dataset, data_dir=DATA_DIR, download=False)
    torch.manual_seed(0)
    model = build_model("scatter_linear", num_classes=data.info.num_classes, channels=data.shape[0],
                        size=data.shape[1], norm="group")
    feats = feature_map(model)
    x = clipped_features(feats, data.x_train, 1.0)
    xt = clipped_features(feats, data.x_test, 1.0)
    print(f"{dataset}: features {tuple(x.shape)} in {time.time() - t0:.0f} s", flush=True)
    for eps in EPSILONS:
        spec = PrivacySpec(epsilon=eps, delta=1e-5, sampling_rate=0.01, steps=1)
        method = DPLeastSquares()
        cal = method.calibrate(spec)
        d_a, _ = sensitivities(1.0, "replace_input")
        unit = method.release_family(method.spec).multipliers(cal.release_noise)[0] * d_a * math.sqrt(x.shape[1])
        for draw in DRAWS:
            a, b = method.noisy_statistics(x, data.y_train, data.info.num_classes, torch.Generator().manual_seed(draw))
            w, v = torch.linalg.eigh(a)
            vb = v.T @ b
            for psd, ridge in SETTINGS:
                ev = (torch.clamp(w, min=0.0) if psd else w) + ridge * unit
                weights = v @ (vb / ev[:, None])
                acc = float(((xt @ weights).argmax(1) == data.y_test).double().mean())
                if CHECK and (psd, ridge) == (True, 0.1) and draw == 0:  # the method's own solve gives the same predictions
                    own = DPLeastSquares(ridge=0.1, psd=True)
                    own.calibrate(spec)
                    agree = float(((xt @ own.solve(a, b)).argmax(1) == (xt @ weights).argmax(1)).double().mean())
                    print(f"  check: method.solve agrees on {100 * agree:.2f}% of test predictions", flush=True)
                print(f"{dataset} eps={eps:g} draw={draw} psd={psd} ridge={ridge:g}: {100 * acc:.2f}", flush=True)
    print(f"{dataset}: done in {time.time() - t0:.0f} s", flush=True)
