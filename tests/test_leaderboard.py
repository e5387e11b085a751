"""The leaderboard (Markdown, static HTML in a real headless Chromium) and the trajectory viewer."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

from repogym.bench.db import EpisodeRow, ResultsDB
from repogym.cli import main

IN_CI = os.environ.get("CI", "").lower() == "true"
TRICKY = "<b>gamma</b> | x"
"""An agent name that must come back as text: escaped in HTML, ``|`` escaped in Markdown."""


# -- a hand-built database --------------------------------------------------------------------------------
def _row(agent: str, task: int, status: str, *, difficulty: int = 1, trajectory: str | None = None,
         checkpoint: str = "") -> EpisodeRow:
    return EpisodeRow(agent=agent, suite="builtin", task_id=f"task-{task}", sample=0, seed=task, status=status,
                      checkpoint=checkpoint,
                      reward=None if status == "infra_error" else float(status == "resolved"), turns=4,
                      wall_s=1.0, difficulty=difficulty, well_formed=4, tool_calls=4, trajectory=trajectory,
                      error={"where": "sandbox", "message": "died"} if status == "infra_error" else None)


def build_db(path: Path, trajectory: str | None = None) -> ResultsDB:
    """alpha: 5/8 resolved (+2 infra errors); beta: 1/4; TRICKY: 0/3. beta is stored first."""
    db = ResultsDB(path)
    for i in range(4):
        db.add_episode(_row("beta", i, "resolved" if i == 0 else "unresolved", difficulty=1 + i % 2))
    for i in range(10):
        status = "infra_error" if i >= 8 else "resolved" if i < 5 else "unresolved"
        db.add_episode(_row("alpha", i, status, difficulty=1 + i % 2,
                            trajectory=trajectory if i == 0 else f"missing/{i}.jsonl"))
    for i in range(3):
        db.add_episode(_row(TRICKY, i, "unresolved"))
    return db


# Wilson 95% intervals worked out by hand: 5/8 -> [30.6, 86.3], 1/4 -> [4.6, 69.9], 0/3 -> [0.0, 56.2].
EXPECTED = [("alpha", "62.5% [30.6, 86.3]", "2 (20.0%)", "10"),
            ("beta", "25.0% [4.6, 69.9]", "0 (0.0%)", "4"),
            (TRICKY, "0.0% [0.0, 56.2]", "0 (0.0%)", "3")]


def _markdown_rows(text: str) -> tuple[list[str], list[list[str]]]:
    def cells(line: str) -> list[str]:
        parts, cur, escaped = [], "", False
        for ch in line.strip()[1:-1]:
            if escaped:
                cur, escaped = cur + ch, False
            elif ch == "\\":
                escaped = True
            elif ch == "|":
                parts, cur = parts + [cur.strip()], ""
            else:
                cur += ch
        return parts + [cur.strip()]
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return cells(lines[0]), [cells(line) for line in lines[2:]]


def _check_ranking(header: list[str], rows: list[list[str]]) -> None:
    assert header[:3] == ["agent", "suite", "resolved [95% CI]"]
    got = [(r[0], r[2], r[header.index("infra errors")], r[header.index("episodes")]) for r in rows]
    assert got == EXPECTED


def test_markdown_table_ranks_and_excludes_infra_errors(tmp_path, capsys):
    build_db(tmp_path / "results.db").close()
    md = tmp_path / "out" / "board.md"
    assert main(["leaderboard", "--db", str(tmp_path / "results.db"), "--md", str(md)]) == 0
    out = capsys.readouterr().out
    assert md.read_text().strip() == out.strip()
    header, rows = _markdown_rows(out)
    _check_ranking(header, rows)
    assert any(h.startswith("pass@") for h in header)
    assert {"mean turns", "mean tokens", "format adherence", "self-correction", "long-horizon"} <= set(header)


def test_checkpoints_of_one_agent_are_rows_of_their_own(tmp_path):
    from repogym.bench.leaderboard import table
    from repogym.bench.metrics import summarize

    rows = [_row("alpha", i, "resolved" if i < resolved else "unresolved", checkpoint=step)
            for step, resolved in (("step-10", 1), ("step-20", 3)) for i in range(4)]
    header, cells = table(summarize(rows))
    assert header[:4] == ["agent", "suite", "checkpoint", "resolved [95% CI]"]
    assert [(r[0], r[2], r[3][:5]) for r in cells] == [("alpha", "step-20", "75.0%"), ("alpha", "step-10", "25.0%")]


def test_missing_database_and_bad_run_are_clean_errors(tmp_path, capsys):
    assert main(["leaderboard", "--db", str(tmp_path / "nope.db")]) == 2
    assert "no such file" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "rollout/success_rate": 0.5}\n{"no step": 1}\n{"step": 2}\n')
    assert main(["leaderboard", "--db", str(tmp_path / "r.db"), "--import-run", str(run)]) == 2
    assert "metrics.jsonl:2" in capsys.readouterr().err


# -- real trajectories ------------------------------------------------------------------------------------
class Scripted:
    """An agent that plays fixed actions."""

    def __init__(self, actions: list[str]):
        self.actions = actions

    def reset(self, observation, info) -> None:
        self.queue = list(self.actions)

    def act(self, observation, info) -> str:
        return self.queue.pop(0)

    def turn_record(self) -> None:
        return None


def _call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture(scope="module")
def trajectory(tiny_task, tmp_path_factory) -> Path:
    """A resolved episode on the tiny task: long output, a bad call, unparsable text, a fix, diff, submit."""
    import gymnasium as gym

    import repogym.envs  # noqa: F401  (registers the env id)
    from repogym.agents.rollout import run_episode

    path = tmp_path_factory.mktemp("traj") / "episode.jsonl"
    agent = Scripted([_call("bash", command="seq 1 100"), _call("nope"), "let me think <script>x</script>",
                      _call("edit", path="calc/ops.py", old="min(x, high - 1)", new="min(x, high)"),
                      _call("diff"), _call("submit")])
    env = gym.make("repogym/RepoTask-v0", task=tiny_task, sandbox="local", max_turns=10)
    try:
        result = run_episode(env, agent, task_id=tiny_task.instance_id, agent_name="scripted", trajectory=path)
    finally:
        env.close()
    assert result.status == "resolved"
    return path


@pytest.mark.slow
def test_show_prints_calls_outputs_and_grading(trajectory, capsys):
    assert main(["show", str(trajectory)]) == 0
    out = capsys.readouterr().out
    assert "episode tiny__calc-1" in out and "agent scripted" in out
    assert "turn 1 · bash" in out and "command: seq 1 100" in out
    assert "[... 60 lines cut; --full shows all ...]" in out  # 100 lines of output, 40 kept
    kept = {line.strip() for line in out.splitlines()}
    assert {"1", "30", "91", "100"} <= kept and "50" not in kept
    assert "turn 2 · nope" in out and "error: unknown_tool" in out
    assert "turn 3 · unparsed action" in out and "error: parse_error" in out
    assert "-    return max(low, min(x, high - 1))" in out and "final diff (from the diff tool at turn 5)" in out
    assert "status resolved" in out and "reward components: tests=1" in out
    assert "FAIL_TO_PASS 1/1" in out and "and 4 passed (--full lists them)" in out
    assert "\033[" not in out  # not a terminal: no colours


def test_show_full_and_html(trajectory, tmp_path, capsys):
    page = tmp_path / "episode.html"
    assert main(["show", str(trajectory), "--full", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "lines cut" not in out and "50" in {line.strip() for line in out.splitlines()}
    assert "passed   tests/test_hidden.py::test_clamp_above" in out
    text = page.read_text()
    assert "&lt;script&gt;x&lt;/script&gt;" in text and "<script>" not in text


def test_colours_only_when_asked(trajectory):
    from repogym.bench.viewer import load_episode, render_text

    view = load_episode(trajectory)
    assert "\033[1;32mresolved\033[0m" in render_text(view, color=True)  # bold green
    assert "\033[" not in render_text(view)


def test_show_missing_or_unreadable_file_is_a_clean_error(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text('{"type": "step"}\n')
    assert main(["show", str(tmp_path / "bad.jsonl")]) == 2
    assert "not a repogym trajectory" in capsys.readouterr().err


def test_a_malformed_trajectory_is_a_typed_error_naming_the_line(tmp_path):
    from repogym.agents.errors import TrajectoryFileError
    from repogym.agents.trajectory import UNFINISHED, read_trajectory
    from repogym.envs.core.status import Status
    path = tmp_path / "t.jsonl"
    header = json.dumps({"type": "header", "format": "repogym.trajectory/2", "task_id": "t", "observation": "o"})
    path.write_text(header + "\n[1, 2]\n{}\n")
    with pytest.raises(TrajectoryFileError, match=r"t\.jsonl:2: a trajectory line must be a JSON object") as caught:
        read_trajectory(path)
    assert caught.value.line == 2
    path.write_text(header + "\n")
    assert read_trajectory(path).status == UNFINISHED
    path.write_text(header + "\n" + json.dumps({"type": "end", "status": "resolved", "reward": 1.0}) + "\n")
    assert read_trajectory(path).status is Status.RESOLVED


# -- the HTML page in a real browser ----------------------------------------------------------------------
CHROMIUM = "/usr/bin/chromium"


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=True)


class _Tables(HTMLParser):
    """Rows of the table with ``id="leaderboard"`` (cell texts) and every link's href."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self._in_board = self._in_body = False
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id") == "leaderboard":
            self._in_board = True
        elif self._in_board and tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag == "td":
            self._cell = ""
        elif tag == "a":
            self.links.append(attrs.get("href", ""))
        elif self._in_body:
            raise AssertionError(f"unexpected <{tag}> inside the leaderboard: text was not escaped")

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._in_board = self._in_body = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


@pytest.fixture(scope="module")
def site(tmp_path_factory, trajectory) -> Path:
    """The leaderboard page (with a training run imported) in a folder of its own."""
    root = tmp_path_factory.mktemp("site")
    build_db(root / "results.db", trajectory=str(trajectory)).close()
    run = root / "tiny-run"
    run.mkdir()
    run.joinpath("metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "rollout/success_rate": s / 10, "eval/success_rate": s / 12, "losses/loss": 1.0,
                    "eval_heldout/success_rate": s / 20, "eval_heldout/success_low": s / 40,
                    "eval_heldout/success_high": s / 15})
        + "\n" for s in range(0, 11, 2)))
    assert main(["leaderboard", "--db", str(root / "results.db"), "--import-run", str(run),
                 "--html", str(root / "www" / "index.html")]) == 0
    return root / "www"


@pytest.fixture(scope="module")
def server(site):
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"CI=true but {CHROMIUM} is missing: .ci/run must install Debian's chromium")
        pytest.skip(f"{CHROMIUM} missing (apt-get install chromium)")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_page_is_static_and_offline(site):
    page = (site / "index.html").read_text()
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count("http://") == page.count('xmlns="http://www.w3.org/2000/svg"') and "https://" not in page
    assert page.count("<svg") == 4  # difficulty bars and three learning-curve charts
    assert page.count("<polyline") == 3 and "tiny-run" in page
    # The held-out curve's 95% interval is a band (the eval curve logged none here).
    assert page.count("<polygon") == 1 and "eval_heldout/success_rate" in page


@pytest.mark.slow  # three browser runs: about 6 s on two cores
def test_page_renders_in_headless_chromium(server, site, tmp_path):
    from PIL import Image  # comes with tensorboard

    shot = tmp_path / "page.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,2000", f"{server}/index.html", profile=tmp_path / "p1")
    with Image.open(shot) as image:
        assert image.size == (1280, 2000)
        colours = {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 20)}
    assert len(colours) > 20 and (31, 119, 180) in colours  # text, table borders, the first series' bars

    dom = _chromium("--dump-dom", f"{server}/index.html", profile=tmp_path / "p2").stdout
    parser = _Tables()
    parser.feed(dom)
    assert [r[:1] + r[2:3] for r in parser.rows] == [[name, rate] for name, rate, _, _ in EXPECTED]
    assert all(len(r) == len(parser.rows[0]) and r[1] == "builtin" for r in parser.rows)
    episode_links = [href for href in parser.links if href.startswith("index_episodes/")]
    assert episode_links == ["index_episodes/1.html"]  # alpha's first episode; the others have no file
    assert (site / episode_links[0]).is_file()
    assert dom.count("no trajectory file (missing/") == 9  # alpha's other episodes (infra errors included)

    episode = _chromium("--dump-dom", f"{server}/{episode_links[0]}", profile=tmp_path / "p3").stdout
    assert "Turn 1 · bash" in episode and "seq 1 100" in episode and "resolved" in episode
    assert "&lt;script&gt;x&lt;/script&gt;" in episode
