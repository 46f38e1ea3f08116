"""Errors a user can cause and fix: the entry points print their message as one sentence, no traceback."""


class UserError(Exception):
    """A problem the user can fix (bad override, missing data, no network, unwritable directory).

    The message must be one clear sentence that ends by saying what to do.
    """
