"""Credentials for the official client: bearer tokens read from a file as it rotates, trimmed
of the whitespace token files end with, CA bundles given as PEM or base64, and the headers
that carry them on every request (``RequestHeaders``).

Why a module of its own: ``official.py`` sends requests; how the ``Configuration`` it sends them
with gets and keeps its credentials is a separate concern with its own tests.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient, Configuration


class TokenFile:
    """A ``refresh_api_key_hook`` that reads the bearer token from a file when it changes.

    A mounted Secret is updated in place when the token is rotated; stat-ing the file on each
    request and reading it only when its mtime or size moved keeps that cheap. While the file
    cannot be read (mid-update), the token read last is kept.
    """

    def __init__(self, path: str) -> None:
        self._path = os.path.expanduser(path)
        self._stamp: tuple[int, int] | None = None

    def __call__(self, configuration: Configuration) -> None:
        try:
            stat = os.stat(self._path)
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            with open(self._path, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError:
            return
        configuration.api_key["BearerToken"] = token
        self._stamp = stamp


RefreshHook = Callable[[Configuration], None]


class RefreshAtMostEvery:
    """Runs a credentials loader's ``refresh_api_key_hook`` at most once every ``seconds``.

    The kubeconfig and in-cluster loaders install a hook that re-applies their whole
    configuration before every request; setting the host again re-reads the proxy settings
    from the environment, a twentieth of the controller's CPU in a 1,000-pod scale-up over
    HTTP (issue 25). What they refresh changes far more slowly: kubeconfig tokens are renewed
    five minutes before they expire, the service account token once a minute. The loaders
    install their hook again on every run, so this one takes the new hook as the next to run
    and puts itself back. A monotonic clock of the process, not ``core.clock``: this paces
    the transport, it decides nothing the controller does.
    """

    def __init__(
        self,
        hook: RefreshHook,
        seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hook = hook
        self._seconds = seconds
        self._clock = clock
        self._last: float | None = None

    def __call__(self, configuration: Configuration) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._seconds:
            return
        self._last = now
        self._hook(configuration)
        installed = configuration.refresh_api_key_hook
        if installed is not None and installed is not self:
            self._hook = installed
        configuration.refresh_api_key_hook = self  # type: ignore[assignment]


def pace_refresh(configuration: Configuration) -> None:
    """Wrap a loader's refresh hook in ``RefreshAtMostEvery``; ``TokenFile`` is cheap as is."""
    hook = configuration.refresh_api_key_hook
    if hook is not None and not isinstance(hook, TokenFile | RefreshAtMostEvery):
        configuration.refresh_api_key_hook = RefreshAtMostEvery(hook)


class _TrimmedKeys(dict[str, Any]):
    """``Configuration.api_key`` that strips whitespace around every token it is given."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value.strip() if isinstance(value, str) else value)


def trim_credentials(configuration: Configuration) -> None:
    """Strip whitespace around bearer tokens, now and whenever they are reloaded.

    Token files usually end with a newline (``echo $TOKEN > token``): kubectl trims it, the
    official client sends it as part of the header, which http.client then refuses. The
    kubeconfig and in-cluster loaders store each (re)loaded token with ``api_key[...] = ...``,
    so a dict that trims on assignment covers their refresh hooks too.
    """
    keys = _TrimmedKeys()
    for name, value in (configuration.api_key or {}).items():
        keys[name] = value
    configuration.api_key = keys


def decode_ca_data(ca_data: str) -> str:
    """PEM text from base64 (kubeconfig ``certificate-authority-data`` style) or PEM itself."""
    text = ca_data.strip()
    if text.startswith("-----BEGIN"):
        return text
    try:
        decoded = base64.b64decode(text, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError("CA data is neither PEM nor base64-encoded PEM") from exc
    if "-----BEGIN" not in decoded:
        raise ValueError("CA data decodes from base64 but is not a PEM bundle")
    return decoded


_BEARER = "BearerToken"
_AUTHORIZATION = "authorization"


class RequestHeaders:
    """The headers ``ApiClient.param_serialize`` builds for a request, built once per content
    type and kept while what they are made of stays the same.

    Why: ``param_serialize`` runs ``sanitize_for_serialization`` over the header dict and
    ``parameters_to_tuples`` over the result, then ``update_params_for_auth``, for every
    request: some 10 µs of each request's CPU, for a dict that changes only when the token
    does. The credentials are still asked for on every request, as ``param_serialize`` asks
    (``Configuration.auth_settings()``, which runs the refresh hook: a rotated token is sent
    from the next request on), and the client's ``default_headers`` (``User-Agent``) and
    ``cookie`` are read each time; the dict is rebuilt when any of them changed. Only the
    plain case is kept: a header value that is not a string, or credentials other than a
    bearer token in a header, return ``None`` and the caller goes through ``param_serialize``.
    Each call returns a fresh dict (callers below may add to it).
    """

    def __init__(self, api_client: ApiClient) -> None:
        self._api = api_client
        self._made: dict[str | None, tuple[object, dict[str, str]]] = {}

    def __call__(self, accept: str, content_type: str | None) -> dict[str, str] | None:
        api = self._api
        auth = api.configuration.auth_settings()
        bearer = auth.get(_BEARER)
        if len(auth) > 1 or (bearer is not None and bearer.get("in") != "header"):
            return None
        token = None if bearer is None else bearer.get("value")
        defaults: dict[str, Any] = api.default_headers
        cookie = api.cookie
        stamp = (accept, token, cookie, tuple(defaults.items()))
        made = self._made.get(content_type)
        if made is not None and made[0] == stamp:
            return dict(made[1])
        headers: dict[str, Any] = {"Accept": accept}
        if content_type is not None:
            headers["Content-Type"] = content_type
        headers.update(defaults)
        if cookie:
            headers["Cookie"] = cookie
        if bearer is not None:
            headers[str(bearer.get("key") or _AUTHORIZATION)] = token
        if not all(isinstance(v, str) for v in headers.values()):
            return None  # param_serialize would turn it into one: its way, then
        self._made[content_type] = (stamp, headers)
        return dict(headers)
