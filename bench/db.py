"""The results database (SQLite): one row per finished episode, plus the metrics of training runs and, in a
table of their own (``best_of_n``), best-of-n trials, which never mix into the episodes' pass@1.

Episodes are written one by one as they finish, each in its own transaction (WAL journal), so a run
killed at any moment keeps every episode that finished. ``episode_key`` (agent, checkpoint, suite,
task, sample) is unique: re-running the same benchmark skips what is already there. An episode stored as an error
(``infra_error``, ``internal_error``: :data:`ERROR_STATUSES`) can be run again and its row replaced
(``replace_error=True``): the old row is deleted and the new one written in one transaction, so it stays until its
replacement is stored.

``status`` is stored as the plain string of its :class:`repogym.envs.core.status.Status` and read back as one.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from repogym.agents.trajectory import status_of
from repogym.envs.core.status import Status, excluded

SCHEMA_VERSION = 1

ERROR_STATUSES = (Status.INFRA_ERROR, Status.INTERNAL_ERROR)
"""Stored statuses that say nothing of the agent (the machine's failure, a bug of ours): ``--retry-errors`` re-runs
them."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    id INTEGER PRIMARY KEY,
    episode_key TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,            -- the name shown on the leaderboard (agent, or agent@label)
    checkpoint TEXT NOT NULL DEFAULT '',
    suite TEXT NOT NULL,
    task_id TEXT NOT NULL,
    difficulty INTEGER,
    long_horizon INTEGER NOT NULL DEFAULT 0,  -- the task needs 10+ turns
    sample INTEGER NOT NULL,        -- 0..k-1 within (agent, checkpoint, suite, task)
    seed INTEGER NOT NULL,
    status TEXT NOT NULL,           -- a Status: resolved | unresolved | patch_failed | infra_error | internal_error | ...
    reward REAL,                    -- NULL for infra_error, internal_error (NaN is not stored)
    components TEXT NOT NULL DEFAULT '{}',    -- JSON: reward components
    turns INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    tool_errors INTEGER NOT NULL DEFAULT 0,   -- error observations (malformed calls, bad arguments, ...)
    well_formed INTEGER NOT NULL DEFAULT 0,   -- well-formed tool calls
    self_corrected INTEGER NOT NULL DEFAULT 0, -- resolved after a failing run_tests
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    wall_s REAL NOT NULL,
    trajectory TEXT,                -- path of the trajectory file
    error TEXT,                     -- JSON {"where", "message"} for infra errors
    finished_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS episodes_by_agent ON episodes (agent, suite);
CREATE TABLE IF NOT EXISTS best_of_n (  -- best-of-n trials (repogym bench --best-of N): never pass@1 rows
    id INTEGER PRIMARY KEY,
    trial_key TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,
    checkpoint TEXT NOT NULL DEFAULT '',
    suite TEXT NOT NULL,
    task_id TEXT NOT NULL,
    difficulty INTEGER,
    sample INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    n INTEGER NOT NULL,             -- branches asked for
    branches INTEGER NOT NULL,      -- branches run: n, or 1 after a fallback
    chosen INTEGER,                 -- index of the graded branch
    status TEXT NOT NULL,           -- the chosen branch's graded Status
    reward REAL,                    -- NULL for infra_error, internal_error
    turns INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    fallback TEXT,                  -- why the episode could not be forked (then one plain episode), else NULL
    scores TEXT NOT NULL DEFAULT '[]',  -- JSON: per branch, its verifier score, turns, trajectory, chosen
    trajectory TEXT,                -- the chosen branch's trajectory file
    error TEXT,
    finished_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS training_metrics (
    run TEXT NOT NULL, step INTEGER NOT NULL, key TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run, step, key)
);
"""


class Outcome:
    """What every stored result (an episode, a best-of-n trial) says the same way: its status, resolved or not,
    and whether it is left out of the rates, and why when it is. Subclasses are dataclasses with ``status``,
    ``reward`` and ``error``."""

    status: Status | str
    reward: float
    error: dict[str, Any] | None
    """``{"where", "message"}`` of an excluded row (an infra or internal error), else None."""

    def __post_init__(self):
        self.status = status_of(self.status)

    @property
    def resolved(self) -> bool:
        return self.status == Status.RESOLVED

    @property
    def excluded(self) -> bool:
        """Left out of every rate (:func:`repogym.envs.core.status.excluded`): an infrastructure failure, a bug of
        repogym's, or no reward."""
        return excluded(self.status, self.reward)

    @property
    def internal_error(self) -> bool:
        """Ended by a bug of repogym's (excluded, and counted apart from infrastructure failures)."""
        return self.status == Status.INTERNAL_ERROR


@dataclass
class EpisodeRow(Outcome):
    """One finished episode as stored."""

    agent: str
    suite: str
    task_id: str
    sample: int
    seed: int
    status: Status | str
    """A :class:`Status` (a plain string given is taken as one); a string only for outcomes it does not name."""
    reward: float | None
    """None for an excluded episode (NaN is not stored)."""
    turns: int
    wall_s: float
    checkpoint: str = ""
    difficulty: int | None = None
    long_horizon: bool = False
    components: dict[str, float] = field(default_factory=dict)
    tool_calls: int = 0
    tool_errors: int = 0
    well_formed: int = 0
    self_corrected: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trajectory: str | None = None
    error: dict[str, Any] | None = None
    finished_at: str = ""

    @property
    def key(self) -> str:
        return episode_key(self.agent, self.checkpoint, self.suite, self.task_id, self.sample)


@dataclass
class BestOfNRow(Outcome):
    """One best-of-n trial as stored (table ``best_of_n``): the chosen branch's graded outcome; kept apart from
    the episodes so a verifier-selected result never counts as pass@1."""

    agent: str
    suite: str
    task_id: str
    sample: int
    seed: int
    n: int
    branches: int
    chosen: int | None
    status: Status | str
    reward: float | None
    turns: int
    wall_s: float
    checkpoint: str = ""
    difficulty: int | None = None
    fallback: str | None = None
    """Why the episode could not be forked (the trial was one plain episode), else None."""
    scores: list[dict[str, Any]] = field(default_factory=list)
    trajectory: str | None = None
    error: dict[str, Any] | None = None
    finished_at: str = ""

    @property
    def key(self) -> str:
        return best_of_n_key(self.agent, self.checkpoint, self.suite, self.task_id, self.sample, self.n)


def best_of_n_key(agent: str, checkpoint: str, suite: str, task_id: str, sample: int, n: int) -> str:
    """The identity of a best-of-n trial: best-of-3 and best-of-5 of the same sample are different trials."""
    return json.dumps([agent, checkpoint, suite, task_id, sample, f"best-of-{n}"])


def episode_key(agent: str, checkpoint: str, suite: str, task_id: str, sample: int) -> str:
    """The identity of an episode in a benchmark: re-running it is skipped."""
    return json.dumps([agent, checkpoint, suite, task_id, sample])


class ResultsDB:
    """A results database file (created on first use)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread=False: the runner's threads hand rows to one writer, guarded by SQLite itself.
        self.conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ResultsDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add_episode(self, row: EpisodeRow, replace_error: bool = False) -> bool:
        """Store one episode (committed at once); False when its key is already there. With ``replace_error``, a
        row of the same key stored as an error (:data:`ERROR_STATUSES`) is replaced by this one."""
        values = asdict(row)
        values["components"] = json.dumps(row.components)
        values["error"] = json.dumps(row.error) if row.error else None
        values["long_horizon"], values["self_corrected"] = int(row.long_horizon), int(row.self_corrected)
        values["episode_key"] = row.key
        return self._insert("episodes", "episode_key", values, replace_error)

    def _insert(self, table: str, key_column: str, values: dict[str, Any], replace_error: bool = False) -> bool:
        """INSERT OR IGNORE one row (``finished_at`` now when unset), after deleting an error row of the same key in
        the same transaction when ``replace_error``; whether it was stored."""
        if not values["finished_at"]:
            import datetime

            values["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        columns = ", ".join(values)
        marks = ", ".join(f":{k}" for k in values)
        with self.conn:  # one transaction: the old error row goes only with its replacement in
            self.conn.execute("BEGIN")
            if replace_error:
                self.conn.execute(f"DELETE FROM {table} WHERE {key_column} = ? AND status IN (?, ?)",
                                  (values[key_column], *ERROR_STATUSES))
            cur = self.conn.execute(f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})", values)
        return cur.rowcount == 1

    def _select(self, table: str, key_column: str, agent: str | None, suite: str | None) -> list[dict[str, Any]]:
        """Rows of ``table`` (optionally of one agent and/or suite) as dicts without ``id`` and the key, in order."""
        query, args, where = f"SELECT * FROM {table}", [], []
        for column, value in (("agent", agent), ("suite", suite)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if where:
            query += " WHERE " + " AND ".join(where)
        rows = []
        for r in self.conn.execute(query + " ORDER BY id", args):
            d = dict(r)
            for k in ("id", key_column):
                d.pop(k)
            rows.append(d)
        return rows

    def done_keys(self) -> set[str]:
        """Keys of every stored episode."""
        return {r[0] for r in self.conn.execute("SELECT episode_key FROM episodes")}

    def error_keys(self) -> dict[str, str | None]:
        """Key -> trajectory file of every episode stored as an error (:data:`ERROR_STATUSES`)."""
        return self._error_keys("episodes", "episode_key")

    def _error_keys(self, table: str, key_column: str) -> dict[str, str | None]:
        return dict(self.conn.execute(f"SELECT {key_column}, trajectory FROM {table} WHERE status IN (?, ?)",
                                      ERROR_STATUSES).fetchall())

    def episodes(self, agent: str | None = None, suite: str | None = None) -> list[EpisodeRow]:
        """Stored episodes (optionally of one agent and/or suite), in the order they finished."""
        rows = []
        for d in self._select("episodes", "episode_key", agent, suite):
            d["components"] = json.loads(d["components"] or "{}")
            d["error"] = json.loads(d["error"]) if d["error"] else None
            d["long_horizon"], d["self_corrected"] = bool(d["long_horizon"]), bool(d["self_corrected"])
            rows.append(EpisodeRow(**d))
        return rows

    def add_best_of_n(self, row: BestOfNRow, replace_error: bool = False) -> bool:
        """Store one best-of-n trial (committed at once); False when its key is already there. With
        ``replace_error``, a trial of the same key stored as an error is replaced by this one."""
        values = asdict(row)
        values["scores"] = json.dumps(row.scores)
        values["error"] = json.dumps(row.error) if row.error else None
        values["trial_key"] = row.key
        return self._insert("best_of_n", "trial_key", values, replace_error)

    def best_of_n_keys(self) -> set[str]:
        """Keys of every stored best-of-n trial."""
        return {r[0] for r in self.conn.execute("SELECT trial_key FROM best_of_n")}

    def best_of_n_error_keys(self) -> dict[str, str | None]:
        """Key -> chosen branch's trajectory file of every best-of-n trial stored as an error."""
        return self._error_keys("best_of_n", "trial_key")

    def best_of_n(self, agent: str | None = None, suite: str | None = None) -> list[BestOfNRow]:
        """Stored best-of-n trials (optionally of one agent and/or suite), in the order they finished."""
        rows = []
        for d in self._select("best_of_n", "trial_key", agent, suite):
            d["scores"] = json.loads(d["scores"] or "[]")
            d["error"] = json.loads(d["error"]) if d["error"] else None
            rows.append(BestOfNRow(**d))
        return rows

    def add_training_metrics(self, run: str, lines: Iterable[dict[str, Any]]) -> int:
        """Store a training run's metrics lines (``{"step": N, key: value, ...}``); returns values stored."""
        values = [(run, int(line["step"]), k, float(v)) for line in lines for k, v in line.items()
                  if k != "step" and isinstance(v, (int, float)) and v == v]
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany("INSERT OR REPLACE INTO training_metrics VALUES (?, ?, ?, ?)", values)
        return len(values)

    def training_runs(self) -> dict[str, dict[str, list[tuple[int, float]]]]:
        """run -> metric key -> [(step, value), ...] by step."""
        out: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for run, step, key, value in self.conn.execute(
                "SELECT run, step, key, value FROM training_metrics ORDER BY run, key, step"):
            out.setdefault(run, {}).setdefault(key, []).append((step, value))
        return out


__all__ = ["ERROR_STATUSES", "BestOfNRow", "EpisodeRow", "ResultsDB", "best_of_n_key", "episode_key"]
