"""One exception type for problems the user can fix; the CLI prints its message without a traceback."""


class UserError(ValueError):
    """Bad input or environment: the message says what is wrong and how to fix it.

    A ValueError, so pure functions that reject a bad value raise it and callers that only know
    ``ValueError`` still catch it.
    """
