"""Who may call the API: named bearer keys, each with a role.

- A *chat* key answers: ``/v1/chat/completions``, ``/v1/feedback``, ``/v1/models``.
- An *admin* key also changes what is served: every ``/v1/aliases`` route (set, promote, force
  past the gate, roll back, delete, the automatic rollback's setting, the figures), the
  knowledge warm-up (``POST /v1/knowledge/warm``) and ``/metrics``.

Keys are set apart from the app's login (``TUNEDESK_AUTH``), in two variables of
``name:key`` pairs separated by commas::

    TUNEDESK_CHAT_KEYS="website:3f9c...,mobile:a71e..."
    TUNEDESK_ADMIN_KEYS="ana:9d0b..."

The name is what the alias audit records as ``by``; the key is the secret. The older single
key (``TUNEDESK_API_KEY`` or ``--api-key``) still works, as a *chat* key named ``api-key``:
it cannot change aliases. A server with no key at all answers everyone (only allowed on
localhost); one that must not be open (off localhost, or behind the app's login) but has no
key refuses every request with a sentence saying what to set.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field

from fastapi import Request

from serve.api_basics import ApiError

CHAT, ADMIN = "chat", "admin"
CHAT_ENV, ADMIN_ENV, LEGACY_ENV = "TUNEDESK_CHAT_KEYS", "TUNEDESK_ADMIN_KEYS", "TUNEDESK_API_KEY"
LEGACY_NAME = "api-key"
MIN_KEY_CHARS = 8  # a shorter secret is a typo or a guessable word
MAKE_KEY = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the key's name (None: the server has no keys) and its role."""

    name: str | None
    role: str


@dataclass
class KeyRing:
    """The API's keys by role (``{name: key}``); ``closed``: with no key, refuse everyone."""

    chat: dict[str, str] = field(default_factory=dict)
    admin: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    @property
    def empty(self) -> bool:
        return not self.chat and not self.admin

    def caller(self, request: Request, role: str = CHAT) -> Caller:
        """The caller of ``request``, allowed for ``role``.

        Raises:
            ApiError: 401 without a known key (or on a closed server with none), 403 for a chat
                key on an admin route.
        """
        if self.empty:
            if self.closed:
                raise ApiError(
                    401,
                    f"this server has no API key yet: set {CHAT_ENV} (and {ADMIN_ENV}) "
                    "as name:key pairs; the app's login is not an API key",
                    "invalid_request_error",
                    "invalid_api_key",
                )
            return Caller(None, ADMIN)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        given = given.strip().encode() if scheme.lower() == "bearer" else b""
        found = None
        for kind, keys in ((ADMIN, self.admin), (CHAT, self.chat)):
            for name, key in keys.items():  # every key compared: no early exit to time
                if hmac.compare_digest(given, key.encode()) and found is None:
                    found = Caller(name, kind)
        if found is None:
            raise ApiError(
                401,
                "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                "invalid_request_error",
                "invalid_api_key",
            )
        if role == ADMIN and found.role != ADMIN:
            raise ApiError(
                403,
                f"the key {found.name!r} is a chat key: {request.url.path} changes or shows "
                f"what is served and needs an admin key ({ADMIN_ENV})",
                "permission_error",
                "admin_key_required",
            )
        return found


def parse_keys(text: str | None, where: str) -> dict[str, str]:
    """``name:key,name:key`` as ``{name: key}``.

    Raises:
        ValueError: a pair without a name or key, a name given twice, a key under
            :data:`MIN_KEY_CHARS` characters or one no client can send (the sentence names
            ``where`` and the name, never the key).
    """
    keys: dict[str, str] = {}
    for i, pair in enumerate(p.strip() for p in (text or "").split(",")):
        if not pair:
            continue
        name, sep, key = pair.partition(":")
        name, key = name.strip(), key.strip()
        if not sep or not name or not key:
            raise ValueError(f"{where}: entry {i + 1} must look like name:key")
        if name in keys:
            raise ValueError(f"{where}: the name {name!r} is given twice")
        if len(key) < MIN_KEY_CHARS:
            raise ValueError(
                f"{where}: the key of {name!r} is shorter than {MIN_KEY_CHARS} characters"
            )
        keys[name] = check_sendable(key, f"{where}: the key of {name!r}")
    return keys


def check_sendable(key: str, what: str) -> str:
    """``key``, refused when it holds a character outside printable ASCII: a bearer key travels
    in an HTTP header, which clients send as ASCII (the openai client refuses others, curl sends
    UTF-8 bytes that never match), so such a key could never be used.

    Raises:
        ValueError: the sentence starts with ``what`` and never shows the key.
    """
    if not all(" " <= c <= "~" for c in key):
        raise ValueError(
            f"{what} holds a character other than printable ASCII, which no HTTP client sends "
            f"in a header as written; make one with {MAKE_KEY}"
        )
    return key


def key_ring(legacy: str | None = None, closed: bool = False, environ=None) -> KeyRing:
    """The keys of ``TUNEDESK_CHAT_KEYS`` and ``TUNEDESK_ADMIN_KEYS`` (``environ``, default the
    process's), plus ``legacy`` (``--api-key`` / ``TUNEDESK_API_KEY``) as the chat key
    ``api-key``.

    Raises:
        ValueError: a malformed variable, a key under :data:`MIN_KEY_CHARS` characters (the
            single key too) or one no client can send, or one key given to two names or both
            roles; the sentence never shows a key.
    """
    environ = os.environ if environ is None else environ
    chat = parse_keys(environ.get(CHAT_ENV), CHAT_ENV)
    admin = parse_keys(environ.get(ADMIN_ENV), ADMIN_ENV)
    if legacy:
        if LEGACY_NAME in chat:
            raise ValueError(
                f"{CHAT_ENV}: the name {LEGACY_NAME!r} is the single API key's; choose another"
            )
        if len(legacy) < MIN_KEY_CHARS:  # as the named keys: a typo or a guessable word
            raise ValueError(
                f"{LEGACY_ENV}: the key (--api-key) is shorter than {MIN_KEY_CHARS} characters; "
                f"make one with {MAKE_KEY}"
            )
        chat[LEGACY_NAME] = check_sendable(legacy, f"{LEGACY_ENV}: the key (--api-key)")
    secrets = [*chat.values(), *admin.values()]
    if len(set(secrets)) != len(secrets):
        raise ValueError(
            f"one key is given to two names ({CHAT_ENV}, {ADMIN_ENV}, {LEGACY_ENV}): "
            "each name needs its own key, or the audit cannot tell them apart"
        )
    return KeyRing(chat, admin, closed)


def as_ring(keys) -> KeyRing:
    """A :class:`KeyRing` from what a server is given: a ring, one key (a chat key named
    ``api-key``) or None (no keys)."""
    if isinstance(keys, KeyRing):
        return keys
    return KeyRing({LEGACY_NAME: keys} if keys else {})
