"""A small five-field cron expression parser and matcher.

Supported syntax per field: ``*``, numbers, ranges ``a-b``, steps ``*/n``,
``a-b/n`` and ``a/n`` (from ``a`` to the field maximum), and comma lists.
Month and weekday fields accept three-letter names (``jan``, ``mon``).
Weekday ``7`` is an alias of Sunday (``0``).  The aliases ``@hourly``,
``@daily``, ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly`` and
``@annually`` are recognised.

As in classic cron, when both the day-of-month and the day-of-week fields
are restricted (not ``*``), a day matches if *either* field matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .errors import CronParseError

MONTH_NAMES = {
    name: i
    for i, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        start=1,
    )
}
DAY_NAMES = {name: i for i, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}

# (field name, minimum, maximum, names)
FIELDS = [
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day", 1, 31, {}),
    ("month", 1, 12, MONTH_NAMES),
    ("weekday", 0, 7, DAY_NAMES),
]

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

#: how far :meth:`CronExpr.next_after` searches before giving up
SEARCH_LIMIT = timedelta(days=366 * 5)


def _parse_value(token: str, spec: tuple, expr: str) -> int:
    """Parse one number or name of a field and check its bounds."""
    field, lo, hi, names = spec
    token = token.strip().lower()
    if token in names:
        return names[token]
    if not token.isdigit():
        raise CronParseError(expr, f"bad value {token!r}", field)
    value = int(token)
    if not lo <= value <= hi:
        raise CronParseError(expr, f"value {value} out of range {lo}-{hi}", field)
    return value


def _parse_field(text: str, spec: tuple, expr: str) -> frozenset[int]:
    """Expand one field (e.g. ``"1-10/3,15"``) into the set of its values."""
    field, lo, hi, _ = spec
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronParseError(expr, "empty list element", field)
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronParseError(expr, f"bad step {step_text!r}", field)
            step = int(step_text)
        if base == "*":
            start, stop = lo, hi
        elif "-" in base:
            a, _, b = base.partition("-")
            start, stop = _parse_value(a, spec, expr), _parse_value(b, spec, expr)
            if start > stop:
                raise CronParseError(expr, f"range {base!r} is reversed", field)
        else:
            start = _parse_value(base, spec, expr)
            stop = hi if slash else start
        values.update(range(start, stop + 1, step))
    if field == "weekday" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


def cron_weekday(moment: datetime) -> int:
    """Weekday of ``moment`` in cron numbering (Sunday = 0)."""
    return (moment.weekday() + 1) % 7


@dataclass(frozen=True)
class CronExpr:
    """A parsed cron expression.  Build one with :meth:`parse`."""

    source: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_restricted: bool
    weekday_restricted: bool

    @classmethod
    def parse(cls, expr: str) -> "CronExpr":
        """Parse a five-field expression or an ``@`` alias."""
        text = expr.strip()
        text = ALIASES.get(text.lower(), text)
        if text.startswith("@"):
            raise CronParseError(expr, f"unknown alias {text!r}")
        parts = text.split()
        if len(parts) != 5:
            raise CronParseError(expr, f"expected 5 fields, got {len(parts)}")
        sets = [_parse_field(p, spec, expr) for p, spec in zip(parts, FIELDS)]
        return cls(
            source=expr,
            minutes=sets[0],
            hours=sets[1],
            days=sets[2],
            months=sets[3],
            weekdays=sets[4],
            day_restricted=parts[2] != "*",
            weekday_restricted=parts[4] != "*",
        )

    def day_matches(self, moment: datetime) -> bool:
        """Whether the calendar day of ``moment`` is selected."""
        dom = moment.day in self.days
        dow = cron_weekday(moment) in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return dom or dow
        return dom and dow

    def matches(self, moment: datetime) -> bool:
        """Whether the minute containing ``moment`` fires."""
        return (
            moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
            and self.day_matches(moment)
        )

    def next_after(self, moment: datetime, limit: datetime | None = None) -> datetime | None:
        """First firing time strictly after ``moment``, or ``None``.

        The search stops at ``limit`` (exclusive), by default five years
        after ``moment``.
        """
        if limit is None:
            limit = moment + SEARCH_LIMIT
        t = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while t < limit:
            if t.month not in self.months:
                year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
                t = t.replace(year=year, month=month, day=1, hour=0, minute=0)
                continue
            if not self.day_matches(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
                continue
            if t.minute not in self.minutes:
                t += timedelta(minutes=1)
                continue
            return t
        return None

    def expand(self, start: datetime, end: datetime) -> list[datetime]:
        """All firing times ``t`` with ``start <= t < end``."""
        times: list[datetime] = []
        first = start.replace(second=0, microsecond=0)
        if first < start:
            first += timedelta(minutes=1)
        t: datetime | None = first if self.matches(first) else self.next_after(first, end)
        while t is not None and t < end:
            times.append(t)
            t = self.next_after(t, end)
        return times


def parse_cron(expr: str) -> CronExpr:
    """Shortcut for :meth:`CronExpr.parse`."""
    return CronExpr.parse(expr)
