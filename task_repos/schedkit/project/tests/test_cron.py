from datetime import datetime

import pytest

from schedkit import CronExpr, CronParseError, parse_cron


def test_parse_star_fields():
    expr = parse_cron("* * * * *")
    assert expr.minutes == frozenset(range(60))
    assert expr.hours == frozenset(range(24))
    assert expr.weekdays == frozenset(range(7))


def test_parse_lists_ranges_and_steps():
    expr = parse_cron("0,30 9-11 */10 * *")
    assert expr.minutes == {0, 30}
    assert expr.hours == {9, 10, 11}
    assert expr.days == {1, 11, 21, 31}


def test_range_with_step():
    assert parse_cron("10-30/10 * * * *").minutes == {10, 20, 30}


def test_month_and_day_names():
    expr = parse_cron("0 0 * jan,Mar mon-wed")
    assert expr.months == {1, 3}
    assert expr.weekdays == {1, 2, 3}


def test_sunday_as_seven():
    assert parse_cron("0 0 * * 7").weekdays == {0}


def test_aliases():
    assert parse_cron("@daily").minutes == {0}
    assert parse_cron("@hourly").hours == frozenset(range(24))
    assert parse_cron("@weekly").weekdays == {0}


@pytest.mark.parametrize(
    "expr",
    ["* * * *", "60 * * * *", "* 24 * * *", "5-2 * * * *", "*/0 * * * *", "@sometimes", "a * * * *", "1,,2 * * * *"],
)
def test_invalid_expressions(expr):
    with pytest.raises(CronParseError):
        parse_cron(expr)


def test_error_names_the_field():
    with pytest.raises(CronParseError) as err:
        parse_cron("0 25 * * *")
    assert err.value.field == "hour"
    assert "hour" in str(err.value)


def test_matches_weekday_numbering():
    expr = parse_cron("0 12 * * 1")  # Mondays at noon
    assert expr.matches(datetime(2024, 1, 1, 12, 0))  # a Monday
    assert not expr.matches(datetime(2024, 1, 2, 12, 0))


def test_day_of_month_only():
    expr = parse_cron("@monthly")
    assert expr.matches(datetime(2024, 2, 1, 0, 0))
    assert not expr.matches(datetime(2024, 2, 2, 0, 0))


def test_next_after_is_strict():
    expr = parse_cron("*/15 * * * *")
    assert expr.next_after(datetime(2024, 1, 1, 10, 0)) == datetime(2024, 1, 1, 10, 15)
    assert expr.next_after(datetime(2024, 1, 1, 10, 7, 30)) == datetime(2024, 1, 1, 10, 15)


def test_next_after_rolls_over_year():
    expr = parse_cron("0 0 1 1 *")
    assert expr.next_after(datetime(2024, 6, 1)) == datetime(2025, 1, 1)


def test_next_after_impossible_returns_none():
    assert parse_cron("0 0 30 2 *").next_after(datetime(2024, 1, 1)) is None


def test_expand_window_is_half_open():
    expr = parse_cron("0 * * * *")
    times = expr.expand(datetime(2024, 1, 1, 9, 0), datetime(2024, 1, 1, 12, 0))
    assert times == [datetime(2024, 1, 1, h, 0) for h in (9, 10, 11)]


def test_expand_weekdays_across_weekend():
    expr = parse_cron("30 8 * * mon-fri")
    times = expr.expand(datetime(2024, 1, 5), datetime(2024, 1, 9))
    assert times == [datetime(2024, 1, 5, 8, 30), datetime(2024, 1, 8, 8, 30)]


def test_cronexpr_parse_classmethod_equivalent():
    assert CronExpr.parse("@daily") == CronExpr.parse("@daily")
