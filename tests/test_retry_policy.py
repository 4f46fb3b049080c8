"""``sepp.Retry``: the delay sequence and the jitter bounds of each policy (a seeded
random), the exception routing, and its argument checks. Pure values: no event loop."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

import sepp_anyio as sepp
from sepp_anyio import HandlerError, InvalidArgumentError, InvalidArgumentTypeError, Retry
from sepp_anyio._model._retry_policy import DEFAULT_RETRY

#: Enough draws that each bound is approached, few enough to stay fast.
DRAWS = 2_000


def test_the_nominal_delay_grows_by_the_factor_and_is_capped() -> None:
    policy = Retry(backoff=1.0, factor=2.0, max_delay=300.0, jitter=None)
    assert [policy.delay(n) for n in range(1, 12)] == [
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0,
    ]  # fmt: skip
    tripling = Retry(backoff=0.5, factor=3.0, max_delay=10.0, jitter=None)
    assert [tripling.delay(n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10.0, 10.0]
    # factor 1: a constant delay; backoff 0: no delay at all, even where the power overflows.
    assert {Retry(backoff=3.0, factor=1.0, jitter=None).delay(n) for n in (1, 5, 10**6)} == {3.0}
    assert Retry(backoff=0.0, jitter="full").delay(10**6) == 0.0


def test_a_huge_attempt_is_the_cap_not_an_overflow() -> None:
    policy = Retry(backoff=1.0, factor=10.0, max_delay=42.0, jitter=None)
    assert policy.delay(10**6) == 42.0
    assert policy.nominal_delay(2**62) == 42.0


def test_the_default_arguments_are_the_issues() -> None:
    policy = Retry()
    assert (policy.backoff, policy.factor, policy.max_delay, policy.jitter) == (
        1.0,
        2.0,
        300.0,
        "full",
    )
    assert (policy.retry_on, policy.dead_letter_on) == ((), ())


def test_the_workers_default_is_todays_backoff_with_full_jitter() -> None:
    assert [DEFAULT_RETRY.nominal_delay(n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert DEFAULT_RETRY.jitter == "full"


def test_full_jitter_is_uniform_between_zero_and_the_delay() -> None:
    policy = Retry(backoff=1.0, factor=2.0, max_delay=300.0, random=random.Random(7))
    for attempt, cap in [(1, 1.0), (4, 8.0), (12, 300.0)]:
        draws = [policy.delay(attempt) for _ in range(DRAWS)]
        assert all(0.0 <= d <= cap for d in draws)
        # Spread over the whole range, not clustered: both ends are reached within 2 %.
        assert min(draws) < 0.02 * cap and max(draws) > 0.98 * cap
        assert sum(draws) / len(draws) == pytest.approx(cap / 2, rel=0.05)


def test_equal_jitter_keeps_half_the_delay_and_draws_the_other_half() -> None:
    policy = Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter="equal", random=random.Random(7))
    for attempt, cap in [(1, 2.0), (3, 8.0), (9, 60.0)]:
        draws = [policy.delay(attempt) for _ in range(DRAWS)]
        assert all(cap / 2 <= d <= cap for d in draws)
        assert min(draws) < cap * 0.51 and max(draws) > cap * 0.99
        assert sum(draws) / len(draws) == pytest.approx(cap * 0.75, rel=0.05)


def test_no_jitter_is_the_nominal_delay() -> None:
    policy = Retry(backoff=1.5, factor=2.0, max_delay=10.0, jitter=None, random=random.Random(7))
    assert [policy.delay(n) for n in range(1, 5)] == [1.5, 3.0, 6.0, 10.0]


@pytest.mark.parametrize("jitter", ["full", "equal"])
def test_a_seeded_random_gives_the_same_delays(jitter: Any) -> None:
    def sequence(seed: int) -> list[float]:
        policy = Retry(backoff=1.0, jitter=jitter, random=random.Random(seed))
        return [policy.delay(n) for n in range(1, 9)]

    assert sequence(7) == sequence(7)
    assert sequence(7) != sequence(8)
    # The draws are the seeded Random's, in order: one per delay.
    rng = random.Random(7)
    expected = []
    for n in range(1, 9):
        cap = min(300.0, 2.0 ** (n - 1))
        draw = rng.random()
        expected.append(cap * draw if jitter == "full" else cap / 2 + cap / 2 * draw)
    assert sequence(7) == expected


class _Transient(Exception):
    pass


class _Flaky(_Transient):
    pass


class _Broken(ValueError):
    pass


def test_dead_letter_on_decides_by_type_and_subclasses_count() -> None:
    policy = Retry(retry_on=(TimeoutError, _Transient), dead_letter_on=(ValueError,))
    assert policy.dead_letters(ValueError("x"))
    assert policy.dead_letters(_Broken("a subclass"))
    assert not policy.dead_letters(TimeoutError())
    assert not policy.dead_letters(_Flaky())  # retry_on's subclass: retried
    # In neither: retried.
    assert not policy.dead_letters(KeyError("k"))


def test_dead_letter_on_wins_over_retry_on() -> None:
    policy = Retry(retry_on=(_Transient, ValueError), dead_letter_on=(_Flaky, _Broken))
    assert policy.dead_letters(_Flaky())  # in both (retry_on through its base): dead-lettered
    assert policy.dead_letters(_Broken())
    assert not policy.dead_letters(_Transient())
    assert not policy.dead_letters(ValueError())


def test_a_lone_class_or_a_list_is_taken_as_a_tuple() -> None:
    assert Retry(dead_letter_on=ValueError).dead_letter_on == (ValueError,)  # type: ignore[arg-type]
    assert Retry(retry_on=[KeyError, OSError]).retry_on == (KeyError, OSError)  # type: ignore[arg-type]


def test_it_is_a_frozen_value_compared_without_its_random() -> None:
    a = Retry(backoff=2.0, random=random.Random(1))
    b = Retry(backoff=2.0, random=random.Random(2))
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.backoff = 3.0  # type: ignore[misc]
    assert "random" not in repr(a)
    assert sepp.Retry is Retry and Retry.__module__ == "sepp_anyio"


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"backoff": -1.0}, InvalidArgumentError, "Retry backoff"),
        ({"backoff": math.inf}, InvalidArgumentError, "Retry backoff"),
        ({"backoff": "1"}, InvalidArgumentTypeError, "Retry backoff"),
        ({"factor": 0.5}, InvalidArgumentError, "Retry factor must be a finite number >= 1"),
        ({"factor": math.nan}, InvalidArgumentError, "Retry factor"),
        ({"factor": True}, InvalidArgumentTypeError, "Retry factor must be a number"),
        ({"max_delay": -0.1}, InvalidArgumentError, "Retry max_delay"),
        ({"jitter": "half"}, InvalidArgumentError, "Retry jitter must be 'full', 'equal' or None"),
        ({"retry_on": (KeyError, 3)}, InvalidArgumentTypeError, r"Retry retry_on\[1\]"),
        ({"retry_on": "KeyError"}, InvalidArgumentTypeError, "Retry retry_on must be a tuple"),
        (
            {"dead_letter_on": (KeyboardInterrupt,)},
            InvalidArgumentTypeError,
            r"Retry dead_letter_on\[0\] must be a subclass of Exception, got KeyboardInterrupt",
        ),
        (
            {"dead_letter_on": (HandlerError,)},
            InvalidArgumentTypeError,
            r"dead_letter_on\[0\] is HandlerError, a HandlerError",
        ),
        ({"random": 7}, InvalidArgumentTypeError, "Retry random must be a random.Random"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Retry(**options)


def test_a_bad_attempt_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="attempt"):
        Retry().delay(0)


def test_positional_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        Retry(1.0)  # type: ignore[call-arg]
