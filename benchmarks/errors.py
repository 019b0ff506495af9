"""The one error type the CLI turns into a one-line message and exit code 2, and the one that SIGTERM raises."""


class ConfigError(ValueError):
    """Bad user input: the message names the value and what is allowed, on one line."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised like Ctrl-C's KeyboardInterrupt, so a run ends KILLED; the CLI exits with 143."""
