"""What each command does, as functions that take their inputs and return results.

Nothing here prints or exits: the CLI layer (``bakery.cli``) renders what comes back and
turns :class:`~bakery.errors.BakeryError` into the contract's exit codes."""
