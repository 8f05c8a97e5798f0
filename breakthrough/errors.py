"""The one exception type a user can cause; the CLI prints it as one line and exits with code 2."""


class BtError(Exception):
    """A user-facing error whose message names the file, line or field at fault."""
