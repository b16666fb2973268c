"""Old name of pymemdb.retention, kept so ``from pymemdb.cleanup import Cleanup`` keeps working."""

from pymemdb.retention import Cleanup  # noqa: F401
