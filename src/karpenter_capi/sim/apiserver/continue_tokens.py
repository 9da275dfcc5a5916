"""The ``continue`` token of a paginated list: where the next page starts, and in which snapshot.

A list with ``limit`` answers one page and a token; the next request with that token lists the
same snapshot (the resourceVersion the first page was read at) from the key after the last one
served, as kube-apiserver's etcd3 store does. The token is opaque to clients: base64 of a small
JSON document (kube's ``continueToken``: ``v``, ``rv``, ``start``).
"""

from __future__ import annotations

import base64
import binascii
import json

from karpenter_capi.core.kube.errors import BadRequest


def encode_continue(rv: int, start: str) -> str:
    """The token for a page that ended at key ``start`` of the snapshot at ``rv``."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, str]:
    """(snapshot resourceVersion, last key served) of a token; 400 for one that is not ours."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(decoded["rv"]), str(decoded["start"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise BadRequest(f"continue key is not valid: {token!r}") from None
