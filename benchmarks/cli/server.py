"""``bench server``: an MLflow tracking server on loopback."""

from __future__ import annotations

import argparse
import sys

from inputdp.core.errors import ConfigError


def cmd_server(args: argparse.Namespace) -> int:
    """``bench server``: an MLflow tracking server on loopback, its URI printed; it runs until stopped."""
    import time

    from inputdp.benchmarks.server import ServerError, port_in_use, start_mlflow_server
    from inputdp.benchmarks.tracking import check_sqlite_file

    uri = args.backend_store_uri
    if not uri.startswith(("sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+")):
        raise ConfigError(f"--backend-store-uri {uri!r} is not allowed: use sqlite:///FILE or postgresql://...")
    if uri.startswith("sqlite:///"):
        check_sqlite_file(uri, write=True, what="--backend-store-uri")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not allowed: give 1..65535, or 0 for a free port")
    if args.port and port_in_use(args.port):
        raise ConfigError(f"--port {args.port} is not allowed: another process listens on 127.0.0.1:{args.port}; "
                          "give another port, or 0 for a free one")
    try:
        server = start_mlflow_server(uri, port=args.port or None, artifacts_dir=args.artifacts,
                                     log_path="mlflow-server.log")
    except ServerError as err:
        raise ConfigError(str(err)) from None
    print(server.uri, flush=True)
    print(f"pid {server.pid}; stop it with: kill -- -{server.pid}", file=sys.stderr, flush=True)
    if args.detach:
        return 0
    try:
        while server.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


class Server:
    name = "server"
    help = ("start an MLflow tracking server on loopback and print its URI")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend-store-uri", default="sqlite:///mlflow-server.db",
                       help="sqlite:///FILE or postgresql://USER@HOST/DB")
        p.add_argument("--port", type=int, default=0, help="0: a free port")
        p.add_argument("--artifacts", default="mlartifacts", help="where the server keeps artifacts")
        p.add_argument("--detach", action="store_true", help="leave it running and return (prints its pid)")

    run = staticmethod(cmd_server)
