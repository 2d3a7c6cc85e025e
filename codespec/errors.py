class CodespecError(Exception):
    """An error meant for the user (bad input, missing weights, ...): printed as one line, no traceback."""
