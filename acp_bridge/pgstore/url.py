"""Telling a PostgreSQL ``--store`` from a SQLite path, and showing it without its password. Pure.

A store argument is PostgreSQL when it is a ``postgresql://`` or ``postgres://`` URL (libpq's
two schemes); anything else is a SQLite path. Credentials come from the URL itself, a
``PGPASSFILE`` (``~/.pgpass``) or libpq's environment (``PGPASSWORD``, ``PGUSER``, ...): libpq
reads the latter two, so the password need not be in the URL, nor on a command line that ``ps``
shows.

:func:`redact` is the one way a store URL reaches a message, a log line or an error: its
password (``user:PASSWORD@`` or a ``password=`` query parameter) becomes ``***``.
:func:`scrub` removes a known password from any text (a driver's error message).
"""

from __future__ import annotations

import urllib.parse
from typing import Final

__all__ = ["SCHEMES", "is_postgres_url", "password_of", "redact", "scrub"]

SCHEMES: Final = ("postgresql", "postgres")
MASK: Final = "***"


def is_postgres_url(store: str) -> bool:
    """True when ``store`` names a PostgreSQL database rather than a SQLite file."""
    scheme, sep, _ = store.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def password_of(url: str) -> str | None:
    """The password written in ``url`` (user info or ``password=`` parameter), or None."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return urllib.parse.unquote(parts.password)
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if name == "password" and value:
            return value
    return None


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (nothing else changed)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{hostport}"
    query = "&".join(
        f"password={MASK}" if pair.split("=", 1)[0] == "password" else pair
        for pair in parts.query.split("&")
    ) if parts.query else ""  # fmt: skip
    # Joined by hand: urlunsplit drops an empty host ("postgresql:///db", a Unix socket).
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        shown += f"?{query}"
    if parts.fragment:
        shown += f"#{parts.fragment}"
    return shown


def scrub(text: str, url: str) -> str:
    """``text`` with the password of ``url`` (raw and URL-encoded) replaced by ``***``."""
    password = password_of(url)
    if not password:
        return text
    for form in {password, urllib.parse.quote(password, safe="")}:
        text = text.replace(form, MASK)
    return text
