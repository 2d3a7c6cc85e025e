"""The user-facing error type: failures a command reports as one clear line, without a traceback."""


class CodespecError(Exception):
    """An error meant for the user (bad input, missing weights, ...): printed as one line, no traceback."""
