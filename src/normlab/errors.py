"""Errors a user can cause and fix: the entry points print their message as one sentence, no traceback.

Each kind maps to a `status` in summary.json (docs/errors.md, "When something goes wrong"):

- `InvalidConfig` → `invalid`: a config value or combination we do not accept (exit 0, a sweep goes on);
- `UserError` → `failed`: the environment is not what the run needs (missing data or checkpoint, no
  network, no CUDA, an unwritable or full disk, a run directory in use);

anything else is a bug → `crashed`, with its traceback.
"""


class UserError(Exception):
    """A problem the user can fix outside the config (data, network, device, disk, files).

    The message must be one clear sentence that ends by saying what to do.
    """

    status = "failed"


class InvalidConfig(UserError):
    """A config value (or a combination of values) that is not accepted: one sentence naming the key, the
    value and the valid choices."""

    status = "invalid"

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
