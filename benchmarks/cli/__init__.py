"""``bench``: the command line. Bad input gives one line on stderr and exit code 2, never a traceback, and is refused
before any store is opened.

Each subcommand is a small class (``name``, ``help``, ``add_arguments``, ``run``) in its own module, found through
:data:`COMMANDS` by import string; ``bench report`` is the reports package's (it reads the store through the harness,
so the harness reaches it only by name, as it would reach a plug-in's command).
"""

from __future__ import annotations

import importlib
import sys

from inputdp.core.errors import ConfigError, Terminated, raise_on_signal

from .common import EXIT_USAGE, HelpFormatter, Parser, check_store_flags

#: subcommand -> "module:Class", in the order ``bench --help`` lists them
COMMANDS = {
    "run": "inputdp.benchmarks.cli.run:Run",
    "list": "inputdp.benchmarks.cli.listing:List",
    "calibrate": "inputdp.benchmarks.cli.calibrate:Calibrate",
    "speed": "inputdp.benchmarks.cli.speed:Speed",
    "gpu-check": "inputdp.benchmarks.cli.speed:GpuCheck",
    "report": "inputdp.reports.cli:Report",
    "audit": "inputdp.benchmarks.cli.audit:Audit",
    "hidden-state": "inputdp.benchmarks.cli.audit:HiddenState",
    "server": "inputdp.benchmarks.cli.server:Server",
    "study": "inputdp.benchmarks.cli.study:Study",
    "tune": "inputdp.benchmarks.cli.tune:Tune",
    "store": "inputdp.benchmarks.cli.store:Store",
}
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


def command(name: str):
    """The subcommand's class, imported on first use."""
    module, _, attr = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def build_parser() -> Parser:
    """The ``bench`` parser: one subparser per command, each showing its defaults."""
    parser = Parser(prog="bench", description="inputdp: DP training with private inputs and public labels")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for name in COMMANDS:
        cmd = command(name)
        p = sub.add_parser(name, help=cmd.help, description=cmd.help, formatter_class=HelpFormatter)
        cmd.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """SIGTERM (what ``timeout``, ``kill`` and schedulers send) ends a command like Ctrl-C: the run in progress is
    marked KILLED in the store, and the exit code is 143."""
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:  # both raise at once, or, during a store write, as soon as it ends (errors.shielded)
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, raise_on_signal(Terminated)),
                    signal.SIGINT: signal.signal(signal.SIGINT, raise_on_signal(KeyboardInterrupt))}
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    try:
        check_store_flags(args)
        return command(args.command).run(args)
    except ConfigError as err:
        sys.stderr.write(f"bench: error: {' '.join(str(err).split())}\n")
        return EXIT_USAGE
    except Terminated:
        sys.stderr.write("bench: terminated\n")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        sys.stderr.write("bench: interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

