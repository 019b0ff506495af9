"""``bench report``: the leaderboard (md, csv, html) and plots from a store's finished runs. The reports package
sits above the harness; ``bench`` loads this command by its import string (benchmarks/cli), as it would a plug-in's."""

from __future__ import annotations

import argparse

from inputdp.core.errors import ConfigError


def cmd_report(args: argparse.Namespace) -> int:
    """``bench report``: the leaderboard and plots of an experiment's finished runs, written to ``--out``, and (for a
    study) logged as an MLflow table on the study's parent run."""
    from pathlib import Path

    from inputdp.benchmarks.tracking import check_tracking_uri, open_store

    from .leaderboard import leaderboard, load_runs, tidy, write_audit_report, write_report

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {args.out!r} is not allowed: it is a file; give a folder (made if missing)")
    check_tracking_uri(args.tracking_uri, write=False)
    client, exp = open_store(args.tracking_uri, args.experiment, create=False)
    if exp is None:  # a misspelt name: say which experiments the store holds
        held = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise ConfigError(f"--experiment {args.experiment!r} is not in the store: it holds "
                          f"{', '.join(held) if held else 'no experiment yet (run bench run first)'}")
    runs = load_runs(args.tracking_uri, args.experiment)
    train, audits = tidy(runs)
    if train.empty and audits.empty:
        raise ConfigError(f"no finished runs in experiment {args.experiment!r} of the store: run `bench run` first")
    from .leaderboard import speed_ratios

    try:
        if train.empty:  # a store of audits alone (bench audit into its own experiment): its audit table
            for f in write_audit_report(audits, out, stamp=args.stamp):
                print(f"wrote {f}")
            return 0
        board = leaderboard(train, audits, speed_ratios(runs))
        files = write_report(board, out, stamp=args.stamp, audits=audits)
    except OSError as err:
        raise ConfigError(f"--out {args.out!r} cannot be written: {err.strerror or err}") from None
    print(f"{len(train)} runs, {len(board)} leaderboard rows")
    for f in (files.markdown, files.csv, files.html, *files.plots):
        print(f"wrote {f}")
    study = log_on_study_run(runs, board, args.tracking_uri)
    if study:
        print(f"logged the leaderboard as the table {study} on the study's run")
    return 0


def log_on_study_run(runs, board, tracking_uri: str | None) -> str:
    """Log the leaderboard as an MLflow table (the UI's Artifacts, Evaluation) on the experiment's study run, where
    there is one; returns the table's artifact name, or ""."""
    from inputdp.benchmarks.tracking import log_table
    from inputdp.core import names

    column = f"tags.{names.TAG_KIND}"
    if runs.empty or column not in runs.columns:
        return ""
    study = runs[runs[column] == names.KIND_STUDY]
    if study.empty:
        return ""
    table = board.astype(object).where(board.notna(), None)
    log_table(tracking_uri, study["run_id"].iloc[0], table, names.LEADERBOARD_TABLE)
    return names.LEADERBOARD_TABLE


class Report:
    name = "report"
    help = ("leaderboard (md, csv, html) and plots from the finished MLflow runs")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
        p.add_argument("--experiment", default="inputdp", help="the experiment reported (a study's: its name)")
        p.add_argument("--out", default="reports/out", help="output directory, made if missing")
        p.add_argument("--stamp", default="", help="a line saying when and where the runs were measured")

    run = staticmethod(cmd_report)
