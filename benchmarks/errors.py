"""The one error type the CLI turns into a one-line message and exit code 2."""


class ConfigError(ValueError):
    """Bad user input: the message names the value and what is allowed, on one line."""
