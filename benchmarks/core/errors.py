"""The one error type the CLI turns into a one-line message and exit code 2, the one that SIGTERM raises, and
the shield that holds both signals while the store is being written."""

import contextlib
import functools
import threading


class ConfigError(ValueError):
    """Bad user input: the message names the value and what is allowed, on one line."""


class DataMissing(ConfigError):
    """A data set is not on disk and could not be downloaded (a ConfigError: one line, exit 2, where it stops work;
    what only reads a declaration, such as ``bench study status``, goes on without it)."""


class Diverged(RuntimeError):
    """The training loss became NaN or infinite: the run ends FAILED, its message one line naming the epoch and lr."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised like Ctrl-C's KeyboardInterrupt, so a run ends KILLED; the CLI exits with 143."""


def one_line(err: BaseException, limit: int = 200) -> str:
    """An exception's message on one line (its type's name when it has none), cut at ``limit`` characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    return (text[:limit] + "...") if len(text) > limit else text


_held = 0  # depth of shielded sections in the main thread
_pending: type[KeyboardInterrupt] | None = None


@contextlib.contextmanager
def shielded():
    """Hold Ctrl-C and SIGTERM (as the CLI handles them) until the section ends, then raise. A store write cut in
    the middle leaves its database transaction open, and the run's KILLED status then waits on that lock."""
    global _held, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held += 1
    try:
        yield
    finally:
        _held -= 1
    if _held == 0 and _pending is not None:
        exc, _pending = _pending, None
        raise exc()


def shield(method):
    """Decorator: the method runs :func:`shielded`."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with shielded():
            return method(*args, **kwargs)
    return wrapper


def raise_on_signal(exc_type: type[KeyboardInterrupt]):
    """A signal handler that raises ``exc_type``, or, inside a shielded section, raises it when the section ends."""
    def handler(signum, frame):
        global _pending
        if _held:
            _pending = exc_type
        else:
            raise exc_type()
    return handler
