"""The one error type the CLI turns into a one-line message and exit code 2, and the one that SIGTERM raises."""


class ConfigError(ValueError):
    """Bad user input: the message names the value and what is allowed, on one line."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised like Ctrl-C's KeyboardInterrupt, so a run ends KILLED; the CLI exits with 143."""


def one_line(err: BaseException, limit: int = 200) -> str:
    """An exception's message on one line (its type's name when it has none), cut at ``limit`` characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    return (text[:limit] + "...") if len(text) > limit else text
