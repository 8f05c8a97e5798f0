"""The HTTP backends' default and largest timeout and retry counts: one home for `EngineSpec`,
the retry policy and the command-line options (a module without NumPy, so `bt`'s options can
read the defaults at start-up)."""

from __future__ import annotations

REQUEST_TIMEOUT_S = 600.0
"""Default seconds one attempt of an HTTP request may take (`--request-timeout`)."""
RETRIES = 2
"""Default further attempts of a failed HTTP request (`--retries`)."""
MAX_REQUEST_TIMEOUT_S = 86400.0
"""A day: beyond it a hung server is not worth waiting for."""
MAX_RETRIES = 100
