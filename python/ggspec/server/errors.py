"""Errors as OpenAI's clients read them: a status and
`{"error": {"message", "type", "param", "code"}}`, where a message names the field."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          503: "unavailable_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param,
                      "code": status}}


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error_body(error.status, error.message, error.param), status_code=error.status,
                        headers=error.headers)


def validation_error(exc: RequestValidationError) -> APIError:
    """The first problem pydantic found in a body, as a 400 naming its field."""
    problem = exc.errors()[0]
    location = [part for part in problem.get("loc", ()) if part != "body"]
    # a union's members show up in the location as their type names: keep the field path
    path = [p for p in location if isinstance(p, int) or not any(c in p for c in "[]()'\"")]
    param = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path)) or None
    kind = problem.get("type", "")
    if kind == "json_invalid":
        return APIError(400, f"the request body is not valid JSON ({problem.get('msg')})")
    if not param:  # a check across fields: its message names them
        return APIError(400, str(problem.get("msg", "invalid body")).removeprefix("Value error, "))
    if kind == "extra_forbidden":
        return APIError(400, f"unknown field {param!r}", param)
    if kind == "missing":
        return APIError(400, f"{param} is required", param)
    message = str(problem.get("msg", "invalid value")).removeprefix("Value error, ")
    given = problem.get("input")
    if isinstance(given, (str, int, float, bool)) and kind != "value_error":
        message += f", got {_short(given)}"
    return APIError(400, f"{param}: {message}", param)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["APIError", "error_body", "error_response", "validation_error"]
