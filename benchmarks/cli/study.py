"""``bench study list | status NAME | run NAME``: declared sets of work (benchmarks/studies.py)."""

from __future__ import annotations

import argparse

from inputdp.core.errors import ConfigError

from .common import PROGRESS_HELP, THREADS_HELP, add_executor_flags, executor_options


def cmd_study(args: argparse.Namespace) -> int:
    """List the studies, say what the store holds of one, or run what it lacks (then ``bench report``)."""
    from inputdp.benchmarks.studies import STUDIES, expanded, run_study
    from inputdp.benchmarks.study_status import status
    from inputdp.core.config import PerfFlags

    if args.action == "list":  # counted, not calibrated: listing is instant
        for s in STUDIES:
            print(f"{s.name:<20} {len(expanded(s)):>4} runs  {s.summary}" + (f"  ({s.note})" if s.note else ""))
        return 0
    if not args.name:
        raise ConfigError(f"bench study {args.action} needs a study's name: choose one of {', '.join(STUDIES.names())}")
    study = STUDIES.get(args.name)
    perf = PerfFlags(device=args.device, threads=args.threads, progress=not args.no_progress)
    if args.action == "status":
        st = status(study, tracking_uri=args.tracking_uri, perf=perf, data_dir=args.data_dir)
        for label in st.running:
            print(f"running  {label}")
        for label in st.missing if args.verbose else ():
            print(f"missing  {label}")
        if st.missing and not args.verbose:
            print("missing  " + ", ".join(f"{k} x{n}" for k, n in sorted(st.missing_kinds.items()))
                  + " (--verbose: each one)")
        print(f"study {study.name}: {len(st.done)} done, {len(st.running)} running, {len(st.missing)} missing")
        if st.missing:
            lo, hi = st.minutes
            fewest, most = _duration(lo), _duration(hi)
            print(f"estimated time for the missing work: about {fewest if fewest == most else f'{fewest} to {most}'}")
        for note in st.notes:
            print(f"  {note}")
        return 0
    perf.resolve_device()
    outcome, audits = run_study(study, tracking_uri=args.tracking_uri, perf=perf, executor=args.executor,
                                executor_options=executor_options(args), data_dir=args.data_dir,
                                only=args.only or "")
    print(f"study {study.name}: ran {len(outcome.ran)}, already finished {len(outcome.skipped)}, running elsewhere "
          f"{len(outcome.elsewhere)}; audits and speed measurements run {len(audits)}")
    print(f"next: bench report --experiment {study.name} --out reports/{study.name}")
    return 0


def _duration(minutes: float) -> str:
    """"45 min" or "3 h 20 min"."""
    m = int(round(minutes))
    return f"{m} min" if m < 60 else f"{m // 60} h {m % 60:02d} min"


class Study:
    name = "study"
    help = "declared sets of work: list them, the store's status of one, or run what it lacks (resumable)"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=("list", "status", "run"))
        p.add_argument("name", nargs="?", help="the study (bench study list)")
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here); the "
                       "study's runs go to the experiment named after it")
        p.add_argument("--data-dir", help="where the data sets are (torchvision's layout, as for bench run); default "
                       "$INPUTDP_DATA, else the user cache, downloading what is missing")
        p.add_argument("--only", choices=("training", "audits"),  # studies.ONLY, not imported before it is needed
                       help="run: only the timed work (training and speed runs, to be run alone) or only the audits "
                       "(no timings: two studies' audits may share the cores); default all")
        p.add_argument("--device", default="auto", help="auto | cpu | cuda")
        p.add_argument("--threads", type=int, default=0, help=THREADS_HELP)
        p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
        p.add_argument("--verbose", action="store_true", help="status: each missing item on its own line")
        add_executor_flags(p)

    run = staticmethod(cmd_study)
