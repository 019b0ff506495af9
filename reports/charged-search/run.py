"""The charged searches of reports/charged-search: for one data set, each sound method's built-in space searched at
eps 1 and 2.93 under its relations, seeds 0, 1, 2, in one process (the fixed frontend's features computed once),
each search's summary appended to ``STORE`` (JSON lines) as it ends; a search already in the store is skipped, so
a killed run resumes with the same command.

    python reports/charged-search/run.py DATASET DATA_DIR STORE [--threads N]

Each search is ``bench tune --method M --dataset DATASET --epsilon E [--option M.adjacency=R] --seed 1000*S
--search-seed 1000+S --show-trials`` (its randomness seeded, and said to be; its number of trials and the recipes
tried recorded as a diagnosis: these searches are measurements, and publishing K puts them outside their claim).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from inputdp.benchmarks.cli.tune import summarise, trial_count
from inputdp.benchmarks.tuning.search import TuneRequest, plan_search, run_search
from inputdp.benchmarks.tuning.spaces import load_space
from inputdp.core.config import PerfFlags

#: (method, relation) searched; zero-out's accounting is add/remove's (THEORY.md), so it is not searched apart
CASES = (("dpsgd", "add_remove"), ("dpsgd", "replace_input"), ("dp_least_squares", "replace_input"),
         ("feature_perturbation", "replace_input"), ("dp_least_squares", "add_remove"))
EPSILONS = (1.0, 2.93)
SEEDS = (0, 1, 2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("data_dir")
    ap.add_argument("store")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    store = Path(args.store)
    done = set()
    if store.exists():
        done = {(r["method"], r["relation"], r["epsilon_target"], r["seed"]) for r in map(json.loads, store.open())}
    for method, relation in CASES:
        for eps in EPSILONS:
            for seed in SEEDS:
                if (method, relation, eps, seed) in done:
                    continue
                options = {} if method == "feature_perturbation" else {"adjacency": relation}
                req = TuneRequest(method=method, dataset=args.dataset, epsilon=eps,
                                  space=load_space(method, None, options), count=trial_count(4.0, "poisson"),
                                  seed=1000 * seed, data_dir=args.data_dir, search_seed=1000 + seed)
                t0 = time.time()
                result = run_search(plan_search(req), perf=PerfFlags(threads=args.threads, progress=False),
                                    progress=lambda line: print(line, file=sys.stderr, flush=True),
                                    show_trials=True)
                row = {**summarise(result, show_trials=True), "epsilon_target": eps, "seed": seed,
                       "wall_s": round(time.time() - t0, 1), "planned_noise": result.plan.noises,
                       "threads": torch.get_num_threads()}
                with store.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{method} {relation} eps {eps} seed {seed}: test {row['test_accuracy']}, "
                      f"eps {row['claim']['epsilon']:.4f}, {row['wall_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
