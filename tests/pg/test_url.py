"""Store URLs: PostgreSQL told from a SQLite path, and never shown with their password."""

from __future__ import annotations

import pytest

from acp_bridge.pgstore.url import is_postgres_url, password_of, redact, scrub


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ("postgresql://u@h/db", True),
        ("postgres://h/db", True),
        ("POSTGRESQL://h/db", True),
        ("/home/me/store.db", False),
        ("store.db", False),
        ("postgresql.db", False),
        ("file:store.db", False),
        ("sqlite://x", False),
    ],
)
def test_a_store_is_postgres_only_as_a_postgres_url(store: str, expected: bool) -> None:
    assert is_postgres_url(store) is expected


@pytest.mark.parametrize(
    ("url", "shown", "password"),
    [
        ("postgresql://u:s3cret@h:5432/db", "postgresql://u:***@h:5432/db", "s3cret"),
        ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db", "p@ss"),
        ("postgresql://u:a@b@h/db", "postgresql://u:***@h/db", "a@b"),
        (
            "postgresql://u@/db?host=/tmp/s&password=s3cret&port=5",
            "postgresql://u@/db?host=/tmp/s&password=***&port=5",
            "s3cret",
        ),
        ("postgresql://u@h/db?sslmode=require", "postgresql://u@h/db?sslmode=require", None),
        ("postgresql:///db", "postgresql:///db", None),
    ],
)
def test_redact_hides_the_password_and_keeps_the_rest(
    url: str, shown: str, password: str | None
) -> None:
    assert redact(url) == shown
    assert password_of(url) == password


def test_scrub_removes_a_known_password_raw_or_encoded_from_any_text() -> None:
    url = "postgresql://u:p%40ss@h/db"
    text = "FATAL: auth for p@ss failed (p%40ss)"
    assert scrub(text, url) == "FATAL: auth for *** failed (***)"
    assert scrub("no secret here", "postgresql://u@h/db") == "no secret here"
