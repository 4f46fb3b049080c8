"""The one token bucket (``sepp_anyio._bucket``), on a clock the test passes in.

Its two users have their own tests: the worker's rate-limited lanes on both virtual
clocks (tests/worker/test_rate_limit.py) and the HTTP/2 core's budgets
(tests/http2/test_limits.py).
"""

from __future__ import annotations

from sepp_anyio._bucket import TokenBucket


def test_it_starts_full_and_grants_what_it_has() -> None:
    bucket = TokenBucket(5, rate=1.0)
    assert bucket.take(0.0, 3) == 3
    assert bucket.take(0.0, 10) == 2
    assert bucket.take(0.0, 1) == 0
    assert bucket.tokens(0.0) == 0


def test_tokens_are_whole_and_come_at_their_own_time() -> None:
    bucket = TokenBucket(2, rate=4.0)
    assert bucket.take(10.0, 2) == 2
    due = bucket.next_refill()
    assert due.at == 10.25
    assert bucket.tokens(10.2499) == 0  # no fraction of a token
    assert bucket.tokens(10.25) == 1
    assert bucket.next_refill().at == 10.5


def test_waking_at_the_refill_earns_it_whatever_the_clock_reads() -> None:
    bucket = TokenBucket(1, rate=3.0)
    assert bucket.take(0.0, 1) == 1
    due = bucket.next_refill()
    # A clock that rounds the refill's time (1/3) down by a hair still earns it.
    assert bucket.take(due.at - 1e-12, 1, due) == 1


def test_a_full_bucket_earns_nothing_while_idle() -> None:
    bucket = TokenBucket(3, rate=1.0)
    assert bucket.take(0.0, 1) == 1
    assert bucket.tokens(100.0) == 3
    assert bucket.take(100.0, 10) == 3


def test_spend_overdraws_and_says_when_the_budget_is_used_up() -> None:
    bucket = TokenBucket(3, rate=1.0)
    assert bucket.spend(0.0)
    assert bucket.spend(0.0)
    assert not bucket.spend(0.0)  # at 0: used up
    assert not bucket.spend(0.0)
    assert bucket.tokens(0.0) == -1
    assert bucket.tokens(2.0) == 1


def test_give_returns_tokens_up_to_the_burst() -> None:
    bucket = TokenBucket(4, rate=1.0)
    assert bucket.take(0.0, 4) == 4
    bucket.give(0.0, 2)
    assert bucket.tokens(0.0) == 2
    bucket.give(0.0, 10)
    assert bucket.tokens(0.0) == 4
    bucket.give(0.0, 0)
    assert bucket.tokens(0.0) == 4
