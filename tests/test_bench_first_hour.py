"""``repogym bench`` and ``leaderboard`` as a new user meets them (issue 42): no model server is one clear error
before anything starts, every infra error's cause is printed, ``--retry-errors`` re-runs stored errors without
losing a row, ``--task`` picks tasks by id, ``--json`` prints one JSON object, and a wrong agent option stops the
run before a database or a sandbox exists."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from repogym.agents.null import NullAgent
from repogym.agents.oracle import OracleAgent
from repogym.bench.db import EpisodeRow, ResultsDB
from repogym.bench.metrics import error_causes, error_causes_text, summarize
from repogym.bench.runner import SEED_STRIDE, BenchConfig, plan, run_bench
from repogym.cli import build_parser, main
from repogym.envs.core.errors import ConfigError
from repogym.envs.core.status import Status
from repogym.envs.tasks.suites import load_suite
from tests.conftest import require_backend

BUILTIN = load_suite("builtin")
FIRST = BUILTIN[0].instance_id


def closed_port() -> int:
    """A port that was free a moment ago: nothing listens there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stored_row(task_id: str = FIRST, status: str = "infra_error", agent: str = "null", sample: int = 0,
               error: dict | None = None, trajectory: str | None = None) -> EpisodeRow:
    """A row as bench stores it for ``agent`` on builtin (checkpoint '')."""
    excluded = status in ("infra_error", "internal_error")
    return EpisodeRow(agent=agent, suite="builtin", task_id=task_id, sample=sample, seed=sample, status=status,
                      reward=None if excluded else float(status == "resolved"), turns=1, wall_s=1.0,
                      error=(error or {"where": "sandbox.start", "message": "daemon gone"}) if excluded else None,
                      trajectory=trajectory)


def fill(db: Path, *rows: EpisodeRow) -> None:
    with ResultsDB(db) as store:
        for row in rows:
            assert store.add_episode(row)


def rows_of(db: Path) -> list[EpisodeRow]:
    with ResultsDB(db) as store:
        return store.episodes()


def bench(db: Path, *args: str) -> list[str]:
    return ["bench", "--suite", "builtin", "--db", str(db), "--sandbox", "local", "--no-progress", *args]


# -- 1a. the llm agent's server is checked before anything starts -----------------------------------------
def test_llm_without_a_server_fails_fast_naming_the_url_and_how_to_start_one(tmp_path, capsys):
    port = closed_port()
    config = tmp_path / "agent.yaml"
    config.write_text(f"base_url: http://127.0.0.1:{port}/v1\nmodel: qwen\n")
    db = tmp_path / "x.db"
    assert main(bench(db, "--agent", "llm", "--limit", "1", "--agent-config", str(config))) == 2
    err = capsys.readouterr().err
    assert f"no model server answers at http://127.0.0.1:{port}/v1" in err
    assert "repogym proxy --model smollm2-135m-instruct" in err and "--agent-config" in err
    assert not db.exists() and not (tmp_path / "x-trajectories").exists()  # nothing was written, nothing ran


def test_llm_default_url_comes_from_the_environment_and_is_in_help(tmp_path, monkeypatch, capsys):
    from repogym.agents.llm import DEFAULT_BASE_URL, LLMConfig

    assert DEFAULT_BASE_URL == "http://localhost:8000/v1"
    monkeypatch.delenv("REPOGYM_LLM_BASE_URL", raising=False)
    assert LLMConfig().base_url == DEFAULT_BASE_URL  # what --help names is what the agent targets
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert DEFAULT_BASE_URL in help_text and "REPOGYM_LLM_BASE_URL" in help_text and "--retry-errors" in help_text
    port = closed_port()
    monkeypatch.setenv("REPOGYM_LLM_BASE_URL", f"http://127.0.0.1:{port}/v1")
    assert main(bench(tmp_path / "x.db", "--agent", "llm", "--limit", "1")) == 2
    assert f"no model server answers at http://127.0.0.1:{port}/v1" in capsys.readouterr().err


class ChatServer:
    """An OpenAI-compatible server: ``GET /v1/models``, and chat completions answering ``status`` with a refusal,
    or (200) a submit tool call."""

    def __init__(self):
        self.status = 400
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                if fake.status != 200:
                    self._send(fake.status, {"error": {"message": "model 'm' does not exist"}})
                    return
                call = {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
                self._send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                                      "tool_calls": [call]}}],
                                 "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = ChatServer()
    yield server
    server.close()


# -- 1b, 2. causes printed; --retry-errors through the CLI -----------------------------------------------------
@pytest.mark.slow
def test_an_infra_error_prints_its_cause_and_retry_errors_replaces_its_row(tmp_path, chat_server, capsys):
    require_backend("local")
    config = tmp_path / "agent.yaml"
    config.write_text(f"base_url: {chat_server.base_url}\nmodel: m\n")
    db = tmp_path / "x.db"
    args = bench(db, "--agent", "llm", "--task", FIRST, "--agent-config", str(config))
    assert main(args) == 0  # the server answers GET /models but refuses every completion: an infra error
    out = capsys.readouterr()
    assert f"llm agent: server {chat_server.base_url} answers (it lists m)" in out.err
    assert "errors of llm @ m on builtin (excluded from every rate):" in out.out  # m: the model, its checkpoint
    assert "1 x infra_error at llm: POST " in out.out and "HTTP 400" in out.out and "does not exist" in out.out
    assert "--retry-errors" in out.out
    [before] = rows_of(db)
    assert before.status == Status.INFRA_ERROR and Path(before.trajectory).exists()

    assert main(args) == 0  # without --retry-errors: nothing runs, and the start line says why
    err = capsys.readouterr().err
    assert "1 already in" in err and "(1 of them infra or internal errors: --retry-errors runs them again" in err
    assert "0 to run" in err and rows_of(db) == [before]

    chat_server.status = 200  # the server is fixed: the agent now submits
    assert main([*args, "--retry-errors", "--json"]) == 0
    out = capsys.readouterr()
    assert "1 to run (1 of them stored as errors, run again)" in out.err
    assert "1 episodes stored this run (1 of them replacing stored errors)" in out.err  # --json: notes on stderr
    document = json.loads(out.out)  # a real episode ran, and stdout still holds the JSON object alone
    assert (document["written"], document["retried"], document["skipped"]) == (1, 1, 0)
    [summary] = document["summaries"]
    assert (summary["episodes"], summary["infra_errors"], summary["errors"]) == (1, 0, [])
    [after] = rows_of(db)  # replaced, not added
    assert (after.task_id, after.sample, after.status) == (FIRST, 0, "unresolved") and after.error is None
    assert after.trajectory != before.trajectory and Path(after.trajectory).exists()
    assert not Path(before.trajectory).exists()  # the replaced row's trajectory went with it


class Interrupts:
    """An agent whose first action is a Ctrl-C (as if the user pressed it mid-episode)."""

    def reset(self, observation, info):
        pass

    def act(self, observation, info):
        raise KeyboardInterrupt

    def turn_record(self):
        return None


@pytest.mark.slow
def test_an_interrupted_retry_keeps_the_error_row_and_its_trajectory(tmp_path):
    require_backend("local")
    config = BenchConfig(agent="null", suite="builtin", db=tmp_path / "r.db", task_ids=[FIRST], sandbox="local",
                         progress=False, retry_errors=True)
    old = (config.trajectory_dir / f"{FIRST}.s0.jsonl").resolve()
    old.parent.mkdir(parents=True)
    old.write_text('{"type": "header"}\n')
    error = stored_row(trajectory=str(old))
    fill(config.db, error)
    report = run_bench(config, agent_factory=Interrupts)
    assert report.interrupted and report.written == 0
    [kept] = rows_of(config.db)
    assert (kept.status, kept.trajectory, kept.error) == (Status.INFRA_ERROR, str(old), error.error)
    assert old.read_text() == '{"type": "header"}\n'  # the retry wrote the other file
    report = run_bench(config, agent_factory=lambda: OracleAgent(tasks=BUILTIN))
    assert (report.written, report.retried, report.skipped) == (1, 1, 0)
    [row] = rows_of(config.db)
    assert row.resolved and row.trajectory == str(old.with_name(f"{FIRST}.s0.retry.jsonl"))
    assert not old.exists()
    # A second retry of a row that names X.retry.jsonl writes X.jsonl: each retry leaves its old row its file.
    specs = plan(config, BUILTIN, set(), {row.key: row.trajectory})
    assert [s.trajectory for s in specs] == [old] and specs[0].superseded == (Path(row.trajectory),)


def test_a_retried_best_of_n_trial_writes_the_other_branch_files_and_drops_the_old_ones(tmp_path):
    from repogym.bench.best_of_n import branch_path
    from repogym.bench.runner import episode_key_of

    config = BenchConfig(agent="null", suite="builtin", db=tmp_path / "r.db", best_of=3, task_ids=[FIRST])
    base = (config.trajectory_dir / f"{FIRST}.s0.best3.jsonl").resolve()
    key = episode_key_of(config, BUILTIN[0], 0)
    [spec] = plan(config, BUILTIN, {key}, {key: str(branch_path(base, 1))})
    assert spec.retry and spec.trajectory == base.with_name(f"{FIRST}.s0.best3.retry.jsonl")
    assert spec.superseded == tuple(branch_path(base, i) for i in range(3))
    assert plan(config, BUILTIN, {key}) == []  # without retry: stored is stored
    [spec] = plan(config, BUILTIN, {key}, {key: None})  # a trial that failed before any branch wrote a file
    assert spec.trajectory.name == f"{FIRST}.s0.best3.retry.jsonl"


def test_replace_error_replaces_only_error_rows_in_one_step(tmp_path):
    db = tmp_path / "r.db"
    fill(db, stored_row("a"), stored_row("b", status="resolved"), stored_row("c", status="internal_error"))
    with ResultsDB(db) as store:
        assert set(store.error_keys()) == {stored_row("a").key, stored_row("c").key}
        assert store.add_episode(stored_row("a", status="unresolved"), replace_error=True)
        assert not store.add_episode(stored_row("b", status="unresolved"), replace_error=True)  # a result stays
        assert not store.add_episode(stored_row("c", status="resolved"))  # without the flag: never replaced
        assert store.add_episode(stored_row("c", status="resolved"), replace_error=True)
        by_task = {r.task_id: r.status for r in store.episodes()}
        assert store.error_keys() == {}
    assert by_task == {"a": "unresolved", "b": "resolved", "c": "resolved"}


# -- 1b. causes grouped ------------------------------------------------------------------------------------------
def test_error_causes_are_grouped_by_where_and_message_with_counts(tmp_path, capsys):
    refused = {"where": "llm", "message": "POST http://h/v1/chat/completions failed: Connection refused"}
    bug = {"where": "env.step", "message": "KeyError: 'x'"}
    rows = [stored_row(BUILTIN[i].instance_id, error=refused) for i in range(3)]
    rows += [stored_row(BUILTIN[3].instance_id, status="internal_error", error=bug),
             stored_row(BUILTIN[4].instance_id), stored_row(BUILTIN[5].instance_id, status="unresolved")]
    causes = [(c.status, c.where, c.count) for c in error_causes(rows)]
    assert causes == [("infra_error", "llm", 3), ("infra_error", "sandbox.start", 1), ("internal_error", "env.step", 1)]
    text = error_causes_text(summarize(rows))
    assert f"3 x infra_error at llm: {refused['message']}" in text and "1 x internal_error at env.step: KeyError" in text
    # The CLI prints them under the table, even when nothing is left to run.
    db = tmp_path / "r.db"
    fill(db, *rows)
    assert main(bench(db, "--agent", "null", "--limit", "6")) == 0
    out = capsys.readouterr()
    assert "| null | builtin |" in out.out and f"3 x infra_error at llm: {refused['message']}" in out.out
    assert "1 x infra_error at sandbox.start: daemon gone" in out.out and "1 x internal_error at env.step" in out.out
    assert "(5 of them infra or internal errors: --retry-errors runs them again" in out.err


# -- 3. --task ---------------------------------------------------------------------------------------------------
def test_an_unknown_task_id_is_a_config_error_with_close_matches_before_anything_starts(tmp_path, capsys):
    typo = FIRST[:-2] + "xx"
    db = tmp_path / "r.db"
    assert main(bench(db, "--agent", "null", "--task", typo)) == 2
    err = capsys.readouterr().err
    assert f"no task {typo!r} in suite 'builtin'" in err and f"did you mean {FIRST!r}" in err
    assert not db.exists()
    with pytest.raises(ConfigError, match="not both"):
        BenchConfig(agent="null", task_ids=[FIRST], limit=1)
    with pytest.raises(ConfigError, match="non-empty list"):
        BenchConfig(agent="null", task_ids=FIRST)


def test_task_picks_tasks_by_id_and_keeps_their_seeds(tmp_path, capsys):
    config = BenchConfig(agent="null", suite="builtin", db=tmp_path / "r.db", k=2,
                         task_ids=[BUILTIN[5].instance_id, BUILTIN[2].instance_id, BUILTIN[5].instance_id])
    specs = plan(config, BUILTIN, set())
    assert [(s.task.instance_id, s.seed) for s in specs] == [  # suite order, each once, the full run's seeds
        (BUILTIN[2].instance_id, 2 * SEED_STRIDE), (BUILTIN[2].instance_id, 2 * SEED_STRIDE + 1),
        (BUILTIN[5].instance_id, 5 * SEED_STRIDE), (BUILTIN[5].instance_id, 5 * SEED_STRIDE + 1)]
    args = build_parser().parse_args(bench(tmp_path / "r.db", "--agent", "null", "--task", "a", "--task", "b"))
    assert args.task_ids == ["a", "b"]
    # Stored already: the task runs nothing, and the start line counts only the tasks picked.
    fill(config.db, stored_row(BUILTIN[7].instance_id, status="unresolved"))
    assert main(bench(config.db, "--agent", "null", "--task", BUILTIN[7].instance_id)) == 0
    assert "null on builtin: 1 tasks x 1 = 1 episodes, 1 already in" in capsys.readouterr().err


# -- 4. --json ---------------------------------------------------------------------------------------------------
def test_bench_json_is_one_object_on_stdout_and_nothing_else(tmp_path, capsys):
    db = tmp_path / "r.db"
    fill(db, stored_row(BUILTIN[0].instance_id, status="resolved"), stored_row(BUILTIN[1].instance_id),
         stored_row(BUILTIN[2].instance_id, status="unresolved"))
    assert main(bench(db, "--agent", "null", "--limit", "3", "--json")) == 0
    out = capsys.readouterr()
    document = json.loads(out.out)  # the whole of stdout is one JSON object
    assert (document["db"], document["suite"], document["agent"]) == (str(db), "builtin", "null")
    assert (document["planned"], document["skipped"], document["written"], document["interrupted"]) == (3, 3, 0, False)
    [s] = document["summaries"]
    assert (s["episodes"], s["resolved"], s["resolved_rate"], s["infra_errors"], s["internal_errors"]) == (
        3, 1, 0.5, 1, 0)
    assert 0 <= s["ci_low"] < 0.5 < s["ci_high"] <= 1 and s["pass_at_k"] == {"1": 0.5}
    assert s["errors"] == [{"status": "infra_error", "where": "sandbox.start", "message": "daemon gone", "count": 1}]
    assert document["best_of_n"] == []
    assert "results in" in out.err and "stored this run" in out.err and "|" not in out.out


def test_leaderboard_json_is_one_object_with_nan_as_null(tmp_path, capsys):
    db = tmp_path / "r.db"
    fill(db, stored_row("t1", status="resolved", agent="good"), stored_row("t2", status="unresolved", agent="good"),
         stored_row("t1", agent="down"))
    assert main(["leaderboard", "--db", str(db), "--json", "--md", str(tmp_path / "board.md")]) == 0
    out = capsys.readouterr().out
    document = json.loads(out)
    assert [(s["agent"], s["resolved"], s["episodes"]) for s in document["summaries"]] == [("good", 1, 2), ("down", 0, 1)]
    down = document["summaries"][1]
    assert down["resolved_rate"] is None and down["infra_errors"] == 1 and down["errors"][0]["where"] == "sandbox.start"
    assert "NaN" not in out and "| good |" in (tmp_path / "board.md").read_text()


# -- 5. a wrong agent option stops the run before a database or a sandbox exists -------------------------------
def test_a_wrong_agent_option_is_caught_before_the_database_is_made(tmp_path, capsys, monkeypatch):
    config = tmp_path / "agent.yaml"
    config.write_text("base_ulr: http://127.0.0.1:1/v1\n")
    db = tmp_path / "r.db"
    started = []
    monkeypatch.setattr("gymnasium.make", lambda *a, **k: started.append(a))
    assert main(bench(db, "--agent", "llm", "--limit", "1", "--agent-config", str(config))) == 2
    assert "has no option 'base_ulr' (did you mean 'base_url'?)" in capsys.readouterr().err
    assert not db.exists() and started == []
    config.write_text("max_tokens: 0\n")  # a value the agent's config refuses: also before anything exists
    assert main(bench(db, "--agent", "llm", "--limit", "1", "--agent-config", str(config))) == 2
    assert "max_tokens must be >= 1, got 0" in capsys.readouterr().err and not db.exists()


def test_a_finished_benchmark_builds_no_agent(tmp_path, monkeypatch):
    db = tmp_path / "r.db"
    fill(db, stored_row(status="unresolved"))
    built = []
    report = run_bench(BenchConfig(agent="null", suite="builtin", db=db, limit=1, progress=False),
                       agent_factory=lambda: built.append(1) or NullAgent())
    assert (report.skipped, report.written, built) == (1, 0, [])
