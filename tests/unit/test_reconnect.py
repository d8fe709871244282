"""The reconnect backoff's bound, and the one-line cause of a failed PostgreSQL connection.

The bound is a property of the schedule: no pause between connection attempts (of the pool,
the listener, or the claim loop after a failed claim) is longer than its cap, so once the
database accepts connections again the next attempt starts within the cap.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.domain.errors import ConnectionFailed, StoreUnavailable
from rota.domain.retry import RECONNECT_BACKOFF
from rota.store.postgres.failures import connection_failed

URL = "postgresql://app:Sekr1t-pw@db.example:6543/jobs"


@given(attempt=st.integers(min_value=1, max_value=10_000), rand=st.floats(0.0, 1.0))
def test_no_pause_between_reconnect_attempts_exceeds_the_cap(attempt: int, rand: float) -> None:
    delay = RECONNECT_BACKOFF.delay(attempt, lambda: rand)
    assert timedelta(0) < delay <= RECONNECT_BACKOFF.cap


def test_the_cap_keeps_claims_within_a_second_of_the_database_returning() -> None:
    # docs/guarantees.md: claims resume within the cap plus one connection set-up.
    assert RECONNECT_BACKOFF.cap <= timedelta(milliseconds=500)
    # The first retries are quick (a restart is over in well under a second)...
    assert RECONNECT_BACKOFF.bounds(1)[1] <= timedelta(milliseconds=100)
    # ...and the schedule reaches its cap, not a busy loop, in a long outage.
    assert RECONNECT_BACKOFF.bounds(10)[0] >= timedelta(milliseconds=250)


def _refused() -> psycopg.OperationalError:
    return psycopg.OperationalError(
        'connection failed: connection to server at "10.1.2.3", port 6543 failed: Connection '
        "refused\n\tIs the server running on that host and accepting TCP/IP connections?"
    )


@pytest.mark.parametrize(
    ("text", "permanent", "expected"),
    [
        (
            'connection failed: connection to server at "10.1.2.3", port 6543 failed: FATAL:  '
            'database "jobs" does not exist',
            True,
            'database "jobs" does not exist (PostgreSQL at db.example:6543)',
        ),
        (
            'connection failed: connection to server at "10.1.2.3", port 6543 failed: FATAL:  '
            'role "app" does not exist',
            True,
            'role "app" does not exist (PostgreSQL at db.example:6543)',
        ),
        (
            'connection failed: connection to server at "10.1.2.3", port 6543 failed: FATAL:  '
            'password authentication failed for user "app"',
            True,
            'password authentication failed for user "app" (PostgreSQL at db.example:6543)',
        ),
        (
            'connection failed: connection to server at "10.1.2.3", port 6543 failed: server '
            "does not support SSL, but SSL was required",
            True,
            "SSL error with PostgreSQL at db.example:6543: server does not support SSL, but "
            "SSL was required",
        ),
        (
            'connection is bad: invalid sslmode value: "bogus"',
            True,
            'bad connection setting: invalid sslmode value: "bogus"',
        ),
        (
            'connection failed: connection to server at "10.1.2.3", port 6543 failed: FATAL:  '
            "the database system is starting up",
            False,
            "the database system is starting up (PostgreSQL at db.example:6543)",
        ),
        (
            'connection failed: connection to server at "10.1.2.3", port 6543 failed: FATAL:  '
            "sorry, too many clients already",
            False,
            "sorry, too many clients already (PostgreSQL at db.example:6543)",
        ),
    ],
)
def test_a_failed_connection_is_said_in_one_line_and_marked_permanent_if_waiting_cannot_help(
    text: str, permanent: bool, expected: str
) -> None:
    failure = connection_failed(psycopg.OperationalError(text), URL)
    assert isinstance(failure, ConnectionFailed)
    assert isinstance(failure, StoreUnavailable)  # an API still answers 503
    assert str(failure) == expected
    assert failure.permanent is permanent
    assert "\n" not in str(failure)


def test_a_refused_connection_names_host_and_port_and_is_worth_retrying() -> None:
    failure = connection_failed(_refused(), URL)
    assert str(failure) == "connection refused at db.example:6543: is PostgreSQL running there?"
    assert failure.address == "db.example:6543"
    assert failure.permanent is False


def test_the_password_never_appears_in_the_message() -> None:
    # libpq does not echo passwords; even a message that did is cleaned.
    echoed = psycopg.OperationalError("connection is bad: invalid value Sekr1t-pw for port")
    for error in (echoed, _refused()):
        assert "Sekr1t-pw" not in str(connection_failed(error, URL))
