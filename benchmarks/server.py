"""Start and stop a real ``mlflow server`` on loopback (for shared tracking and for the integration test)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass


class ServerError(RuntimeError):
    """The server did not come up; the message says why (from its log) on one line."""


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when a process listens on (host, port)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _log_cause(log_path: str | None) -> str:
    """The last line of the server's log that names an error, for a one-line message."""
    if not log_path or not os.path.exists(log_path):
        return ""
    with open(log_path, errors="replace") as f:
        lines = [ln.strip() for ln in f.readlines()[-200:] if ln.strip()]
    for line in reversed(lines):
        if any(w in line for w in ("Error", "error", "Exception", "denied", "in use")):
            return line[:240]
    return lines[-1][:240] if lines else ""


def free_port() -> int:
    """A port nobody listens on now (the system's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MLflowServer:
    process: subprocess.Popen
    uri: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server and the workers it started: the whole process group, by the server's pid."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(timeout)


def start_mlflow_server(backend_store_uri: str, *, port: int | None = None, artifacts_dir: str | None = None,
                        timeout: float = 90.0, log_path: str | None = None) -> MLflowServer:
    """Start ``mlflow server`` on loopback and wait until it answers; stopped by its ``stop``."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_store_uri,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    if artifacts_dir:
        cmd += ["--artifacts-destination", artifacts_dir]
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    server = MLflowServer(proc, uri)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            cause = _log_cause(log_path)
            raise ServerError(f"mlflow server exited with code {proc.returncode} before it answered"
                              + (f": {cause} (full log: {log_path})" if cause else ""))
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise ServerError(f"mlflow server on {uri} did not answer within {timeout:.0f} s"
                      + (f" (log: {log_path})" if log_path else ""))
