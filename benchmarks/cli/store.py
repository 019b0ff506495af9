"""``bench store``: a store's schema, and the one migration that brings an older experiment up to it."""

from __future__ import annotations

import argparse


def cmd_store(args: argparse.Namespace) -> int:
    """``bench store schema``: each experiment's store schema; ``bench store migrate``: bring one up to date."""
    from inputdp.benchmarks.tracking import STEPS, STORE_SCHEMA, default_tracking_uri, migrate, open_store, schema_of

    uri = args.tracking_uri or default_tracking_uri()
    if args.action == "schema":
        client, _ = open_store(uri, args.experiment, create=False)
        for e in sorted(client.search_experiments(), key=lambda e: e.name):
            if e.name != "Default":
                found = schema_of(client, e.experiment_id)
                print(f"{e.name}: schema {found}" + ("" if found == STORE_SCHEMA else
                                                     f" (this inputdp reads {STORE_SCHEMA}: bench store migrate)"))
        return 0
    before, n, changed = migrate(uri, args.experiment, dry_run=args.dry_run)
    verb = "would add" if args.dry_run else "added"
    print(f"{args.experiment}: schema {before} -> {STORE_SCHEMA}{' (dry run: nothing written)' if args.dry_run else ''}"
          f"; {n} finished runs read")
    for step in STEPS:
        if changed[step.name]:
            print(f"  {step.name}: {verb} to {changed[step.name]} run(s): {step.what}")
    if not changed:
        print("  every run already carries what schema "
              f"{STORE_SCHEMA} reads" + ("" if args.dry_run else "; the experiment is tagged with it"))
    return 0


class Store:
    name = "store"
    help = "a store's schema: each experiment's version (schema), or bring an older experiment up to date (migrate)"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=("schema", "migrate"))
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
        p.add_argument("--experiment", default="inputdp", help="the experiment migrated (a study's: its name)")
        p.add_argument("--dry-run", action="store_true", help="count what would be added; write nothing")

    run = staticmethod(cmd_store)
