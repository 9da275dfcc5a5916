"""Kubernetes API errors, shared by every transport.

The in-memory API (``sim``) raises these directly and the official-client adapter maps HTTP
``Status`` responses onto them, so controller code handles one set of exceptions whichever
transport it runs on. Each error can render itself back into a ``metav1.Status`` body, which is
how the HTTP front serves it.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered by the Kubernetes API, shaped like ``metav1.Status``."""

    code: int = 500
    reason: str = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if reason is not None:
            self.reason = reason
        self.details = details or {}
        self.retry_after_seconds = retry_after_seconds

    def to_status(self) -> dict[str, Any]:
        """Render as a ``metav1.Status`` object, as the API server sends it."""
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details)
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        if details:
            status["details"] = details
        return status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code} {self.reason}: {self.message})"


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    code = 401
    reason = "Unauthorized"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    """A stale resourceVersion or a failed precondition: re-read and try again."""

    code = 409
    reason = "Conflict"


class Gone(ApiError):
    """The requested resourceVersion is too old (watch history compacted): relist."""

    code = 410
    reason = "Expired"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    """422: the object failed validation; ``details.causes`` lists each field."""

    code = 422
    reason = "Invalid"


class TooManyRequests(ApiError):
    """429: throttled, or (for evictions) a PodDisruptionBudget forbids it right now."""

    code = 429
    reason = "TooManyRequests"


class InternalError(ApiError):
    code = 500
    reason = "InternalError"


class ServiceUnavailable(ApiError):
    code = 503
    reason = "ServiceUnavailable"


class Timeout(ApiError):
    code = 504
    reason = "Timeout"


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    410: Gone,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: Timeout,
}


def error_from_status(status: dict[str, Any], http_code: int | None = None) -> ApiError:
    """Build the matching ``ApiError`` from a ``metav1.Status`` body (or an HTTP code alone)."""
    code = int(status.get("code") or http_code or 500)
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or f"HTTP {code}")
    details = status.get("details") or {}
    retry_after = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    if code == 409:
        cls: type[ApiError] = AlreadyExists if reason == "AlreadyExists" else Conflict
    else:
        cls = _BY_CODE.get(code, ApiError)
    return cls(
        message,
        code=code,
        reason=reason or None,
        details=details if isinstance(details, dict) else None,
        retry_after_seconds=int(retry_after) if retry_after is not None else None,
    )


def refused_by_api(error: BaseException) -> bool:
    """Whether the API judged this one request and said no (400-422: invalid, forbidden, not
    found, already exists, conflict): retrying the same request will not help, and other
    requests are not affected, unlike an API that is away or busy (429, 5xx)."""
    return isinstance(error, ApiError) and 400 <= error.code < 500 and error.code != 429


def retry_after(error: BaseException | None) -> float:
    """The ``Retry-After`` seconds a server asked for in ``error`` or what it was raised from.

    A plugin may wrap the API's 429 in its own error (``raise RetryableCreateError(...) from
    exc``); the server's request still stands, so the ``__cause__``/``__context__`` chain is
    searched. 0 when no server asked for anything.
    """
    for cause in _chain(error):
        if isinstance(cause, ApiError) and cause.retry_after_seconds:
            return float(cause.retry_after_seconds)
    return 0.0


STORAGE_INITIALIZING = "storage is (re)initializing"
"""kube-apiserver's 429 message while a resource's storage (its watch cache) is not ready: a
just-started server says this until etcd answers, so it is part of the outage, not throttling."""


def _chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and what it was raised from (a plugin may wrap the API's error in its own)."""
    chain: list[BaseException] = []
    while error is not None and all(error is not seen for seen in chain):
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def storage_initializing(error: BaseException | None) -> bool:
    """Whether ``error`` (or its cause) is kube-apiserver's ``429 storage is (re)initializing``."""
    return any(
        isinstance(e, ApiError) and e.code == 429 and STORAGE_INITIALIZING in e.message
        for e in _chain(error)
    )


def unreachable(error: BaseException | None) -> bool:
    """Whether ``error`` (or its cause) says the API server cannot be reached or cannot answer
    yet: connection refused or reset (the clients map those to 503), a timeout, a 5xx, or a
    server still initializing its storage. Such errors end when the server is back, so whoever
    waits on them retries within seconds rather than backing off for minutes."""
    return any(
        isinstance(e, ApiError) and (e.code >= 500 or isinstance(e, ServiceUnavailable | Timeout))
        for e in _chain(error)
    ) or storage_initializing(error)


def expected(error: BaseException | None) -> bool:
    """Whether ``error`` is one a controller meets in normal operation and retries: the server
    unreachable, throttling (429) or a write conflict (409). Logged as one line, no traceback."""
    return unreachable(error) or any(
        isinstance(e, TooManyRequests | Conflict | AlreadyExists) for e in _chain(error)
    )
