"""Several processes on one store: each configuration runs exactly once, a live run is left to its process, a dead
one is reaped, and SIGTERM ends a run KILLED with exit code 143. Real processes, real MLflow (sqlite)."""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from inputdp.benchmarks import tracking
from inputdp.benchmarks.tracking import MLflowTracker, client, experiment_id
from inputdp.core import names

from ..helpers import not_parents


def _bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "inputdp.benchmarks.cli", *args]


def _runs(uri: str, experiment: str = "inputdp") -> list:
    c, exp = tracking.open_store(uri, experiment)  # under the store's lock: a bench process may be creating it
    return c.search_runs([exp], max_results=1000)


@pytest.mark.slow
def test_two_sweeps_on_a_fresh_store_run_each_configuration_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"  # does not exist yet: both processes meet its schema creation
    argv = _bench("run", "--methods", "nonprivate,dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke",
                  "--epsilons", "1,2", "--seeds", "0,1", "--steps", "4",
                  "--no-progress", "--tracking-uri", uri)
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "Traceback" not in err
    every = _runs(uri)
    runs = not_parents(every)
    finished = collections.Counter(r.data.tags[names.TAG_CONFIG_KEY] for r in runs if r.info.status == "FINISHED")
    assert len(finished) == 6 and set(finished.values()) == {1}  # 2 seeds x (nonprivate + 2 epsilons)
    assert len(runs) == 6  # no RUNNING, FAILED or stray claim run left behind
    # the same sweep started twice at once has one parent run (the store's lock), and every run nests under it
    (parent,) = [r for r in every if r.data.tags.get(names.TAG_KIND) == names.KIND_SWEEP]
    assert {r.data.tags.get(names.TAG_PARENT_RUN) for r in runs} == {parent.info.run_id}
    # every configuration's result printed (by the process that ran it, and by the other where it found it finished)
    rows = {tuple(line.split()[:3]) for out, _ in outs for line in out.splitlines()
            if line.startswith(("nonprivate", "dirichlet"))}
    assert len(rows) == 6


def test_a_stores_lock_lies_beside_its_database_not_in_the_temporary_folder(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    db = tmp_path / "s.db"
    tracking.open_store(f"sqlite:///{db}", "e")
    assert (tmp_path / "s.db.lock").is_file()
    assert list(temp.glob("inputdp-store-*")) == []  # (MLflow leaves its own db_init_lock-* there: not ours)
    # a database in a folder it may not write beside (read-only reading): the lock falls back to the temporary folder
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    fallback = tracking.lock_path(f"sqlite:///{db}")
    assert fallback.parent == temp and fallback.name.startswith("inputdp-store-")


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _fake_run(uri: str, key: str, *, pid: int, host: str, heartbeat: float, claim: str = "held") -> str:
    c = client(uri)
    run = c.create_run(experiment_id(c), tags={names.TAG_CONFIG_KEY: key, names.TAG_PID: str(pid),
                                               names.TAG_HOST: host, names.TAG_HEARTBEAT: f"{heartbeat:.3f}",
                                               names.TAG_CLAIM: claim})
    return run.info.run_id


def test_a_live_run_is_left_alone_and_a_dead_one_reaped(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    here = socket.gethostname()
    sleeper = _sleeper()
    try:
        other = _fake_run(uri, "k1", pid=sleeper.pid, host=here, heartbeat=time.time())
        claim = MLflowTracker(uri).claim("k1", "r")
        assert claim.status == "elsewhere" and f"pid {sleeper.pid}" in claim.holder
        assert client(uri).get_run(other).info.status == "RUNNING"
    finally:
        sleeper.kill()
        sleeper.wait()
    tracker = MLflowTracker(uri)
    claim = tracker.claim("k1", "r")  # its process is gone: the run is reaped and the configuration claimed
    assert claim.status == "claimed" and claim.marked_failed == 1
    assert client(uri).get_run(other).info.status == "FAILED"
    assert client(uri).get_run(tracker.run_id).data.tags[names.TAG_CLAIM] == "held"
    tracker.release()  # never started: withdrawn, not left RUNNING
    assert [r.info.status for r in _runs(uri)] == ["FAILED"]


def test_a_run_withdrawn_after_the_list_was_read_is_not_reaped_and_not_an_error(tmp_path):
    """Another thread's pending claim can be listed, then withdrawn (deleted) before this one marks it: found
    under load in a full test run, where marking the deleted run raised and killed the claiming thread."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # its pid names no live process: the run reads as dead
    gone = _fake_run(uri, "k2", pid=ended.pid, host=socket.gethostname(), heartbeat=time.time())
    c = client(uri)
    exp = experiment_id(c)
    listed = tracking.runs_with_key(c, exp, "k2")
    c.delete_run(gone)
    assert tracking.reap(c, exp, listed) == ([], 0)
    assert c.get_run(gone).info.lifecycle_stage == "deleted"


def test_another_hosts_run_lives_by_its_heartbeat(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    fresh = _fake_run(uri, "k2", pid=1, host="another-host", heartbeat=time.time())
    assert MLflowTracker(uri).claim("k2", "r").status == "elsewhere"
    stale = _fake_run(uri, "k3", pid=1, host="another-host", heartbeat=time.time() - 2 * tracking.STALE_AFTER_S)
    claim = MLflowTracker(uri).claim("k3", "r")
    assert claim.status == "claimed" and claim.marked_failed == 1
    c = client(uri)
    assert c.get_run(fresh).info.status == "RUNNING" and c.get_run(stale).info.status == "FAILED"


@pytest.mark.slow
def test_the_heartbeat_is_renewed_while_the_run_lives(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking.uri, "HEARTBEAT_S", 0.2)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tracker = MLflowTracker(uri)
    assert tracker.claim("k4", "r").status == "claimed"
    first = float(client(uri).get_run(tracker.run_id).data.tags[names.TAG_HEARTBEAT])
    time.sleep(1.0)
    second = float(client(uri).get_run(tracker.run_id).data.tags[names.TAG_HEARTBEAT])
    tracker.on_end({}, "FINISHED")
    assert second > first


_CLAIMER = textwrap.dedent("""
    import sys, time
    from inputdp.benchmarks.tracking import MLflowTracker
    uri, start = sys.argv[1], float(sys.argv[2])
    tracker = MLflowTracker(uri)
    time.sleep(max(0.0, start - time.time()))
    statuses = [tracker.__class__(uri).claim(k, k).status for k in ("a", "b", "c")]
    print(" ".join(statuses), flush=True)
    time.sleep(3)  # hold the claims while the others look
""")


@pytest.mark.slow
def test_claims_made_at_the_same_instant_have_one_winner_each(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    MLflowTracker(uri)  # the schema exists; the processes race on the claims alone
    start = time.time() + 8  # the processes import MLflow first, then claim together
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIMER, uri, str(start)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-1000:] for _, e in outs]
    per_key = list(zip(*(out.split() for out, _ in outs)))
    for statuses in per_key:  # one process holds each configuration; the other three leave it to that one
        assert sorted(statuses) == ["claimed", "elsewhere", "elsewhere", "elsewhere"], per_key


@pytest.mark.slow
def test_threads_of_one_process_claim_like_processes(tmp_path):
    """Several threads running sweeps in one process share its pid: each claim is told apart by its owner token."""
    import threading

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    MLflowTracker(uri)
    results: dict[str, list[str]] = collections.defaultdict(list)
    barrier = threading.Barrier(3)

    def claim_all() -> None:
        trackers = [MLflowTracker(uri) for _ in "abc"]
        barrier.wait()
        for key, tracker in zip("abc", trackers):
            results[key].append(tracker.claim(key, key).status)

    threads = [threading.Thread(target=claim_all) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for key in "abc":
        assert sorted(results[key]) == ["claimed", "elsewhere", "elsewhere"], dict(results)


def test_a_signal_during_a_store_write_waits_for_it_to_end():
    """Ctrl-C or SIGTERM in the middle of a store write (which would leave its transaction open, and the KILLED status
    waiting on that lock) is raised as soon as the write ends, not inside it."""
    from inputdp.core.errors import Terminated, raise_on_signal, shielded

    previous = signal.signal(signal.SIGTERM, raise_on_signal(Terminated))
    finished = False
    try:
        with pytest.raises(Terminated):
            with shielded():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler has run by now, and held the signal
                finished = True
        assert finished
        with pytest.raises(Terminated):  # outside a write: at once
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("signum,code,last_line", [(signal.SIGTERM, 143, "bench: terminated"),
                                                    (signal.SIGINT, 130, "bench: interrupted")])
@pytest.mark.slow
def test_a_signal_ends_the_run_killed(tmp_path, signum, code, last_line):
    """SIGTERM (timeout, kill, schedulers) ends a run like Ctrl-C does: KILLED in the store, nothing left RUNNING."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    proc = subprocess.Popen(_bench("run", "--methods", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke",
                                   "--steps", "100000", "--epsilons", "100", "--option", "accountant=paper", "--no-progress",
                                   "--tracking-uri", uri), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        started = False
        while not started and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if os.path.exists(tmp_path / "m.db"):
                started = any(r.data.tags.get("status_note") == "started" for r in _runs(uri))
        assert started, "the run never started"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert err.strip().splitlines()[-1] == last_line and "Traceback" not in err
    assert [r.info.status for r in not_parents(_runs(uri))] == ["KILLED"]


def test_a_withdrawn_claim_is_ended_before_it_is_deleted(tmp_path):
    """A claim given up (its run never started) leaves no deleted run RUNNING in the store: KILLED, then deleted."""

    tracker = MLflowTracker(f"sqlite:///{tmp_path / 'w.db'}", "e")
    assert tracker.claim("key-w", "w").status == "claimed"
    run_id = tracker.run_id
    tracker.release()
    got = tracker.client.get_run(run_id)
    assert got.info.lifecycle_stage == "deleted" and got.info.status == "KILLED"


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_a_signal_to_the_main_process_alone_ends_a_study_and_its_children(tmp_path, signum):
    """The signal reaches the main process only (not its group: `kill PID`, not Ctrl-C) while a spawned child
    measures memory for the study's speed run: the command ends within 10 s, the child with it, nothing is left
    RUNNING, and the same command then resumes (it once waited over 10 minutes on the child)."""
    uri = f"sqlite:///{tmp_path / 's.db'}"
    argv = _bench("study", "run", "smoke", "--no-progress", "--device", "cpu", "--tracking-uri", uri)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not _children(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        children = _children(proc.pid)
        assert children, "no child process ever started"
        time.sleep(1.0)  # the child is at work (importing, or measuring)
        proc.send_signal(signum)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert took < 10, (took, err[-2000:])
    assert proc.returncode == (130 if signum == signal.SIGINT else 143), err[-2000:]
    time.sleep(2.0)
    assert not [c for c in children if os.path.exists(f"/proc/{c}") and
                open(f"/proc/{c}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    assert "RUNNING" not in {r.info.status for r in _runs(uri, "smoke")}
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    # the first round (2 runs) and its audits were done; the speed run cut short is made now, then the second round
    assert again.returncode == 0, again.stderr[-2000:]
    assert "ran 2, already finished 2" in again.stdout and "audits and speed measurements run 1" in again.stdout
