"""The error answers of `bt serve`, in vLLM's (OpenAI's) shape: `{"object": "error", "message",
"type", "code"}`, one line naming what to change."""

from __future__ import annotations

from typing import Any

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "PayloadTooLargeError",
    429: "TooManyRequestsError",
}


class BadRequest(ValueError):
    """The request cannot be served as sent (HTTP 400, one line naming the field)."""


def error_body(status: int, message: str) -> dict[str, Any]:
    """The JSON body of an error answer with HTTP status `status`."""
    return {
        "object": "error",
        "message": message,
        "type": ERROR_TYPES.get(status, "InternalServerError"),
        "code": status,
    }
