"""One exception type for problems the user can fix; the CLI prints its message without a traceback."""


class UserError(Exception):
    """Bad input or environment: the message says what is wrong and how to fix it."""
