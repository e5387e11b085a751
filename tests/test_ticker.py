"""No long phase without progress (issue 42): the ticker, and the slow steps that use it (image builds, wheel
downloads, vLLM's start), each faked slow, print a line with the time elapsed while they run."""

from __future__ import annotations

import re
import time

import pytest

from repogym.envs.core import ticker
from repogym.envs.core.ticker import ticking

from tests.test_vllm_engine import fake_vllm  # noqa: F401  (the stand-in of vLLM, one fixture for both files)
SLOW_S, EVERY_S = 0.5, 0.1  # a step of five ticks: at least two lines even on a loaded machine


@pytest.fixture
def fast_ticks(monkeypatch):
    monkeypatch.setattr(ticker, "EVERY_S", EVERY_S)


def _ticks(text: str, what: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"{what}: still running (")]


def test_a_slow_step_prints_what_it_does_and_the_time_elapsed_at_least_twice():
    lines: list[str] = []
    with ticking("building something", lines.append, every=EVERY_S):
        time.sleep(SLOW_S)
    assert lines[0] == "building something..."
    ticks = _ticks("\n".join(lines), "building something")
    assert len(ticks) >= 2, lines
    assert all(re.fullmatch(r"building something: still running \(\d+ s\)", t) for t in ticks), ticks
    assert re.fullmatch(r"building something: done after \d+ s", lines[-1]), lines
    assert len(lines) == len(ticks) + 2


def test_a_quick_step_says_only_what_it_does_and_a_failed_one_says_it_failed():
    lines: list[str] = []
    with ticking("quick", lines.append, every=60):
        pass
    assert lines == ["quick..."]
    lines.clear()
    with pytest.raises(RuntimeError), ticking("doomed", lines.append, every=EVERY_S):
        time.sleep(SLOW_S)
        raise RuntimeError("the daemon went away")
    assert len(_ticks("\n".join(lines), "doomed")) >= 2
    assert re.fullmatch(r"doomed: failed after \d+ s", lines[-1]), lines


def test_a_step_named_by_a_long_list_is_named_whole_once_and_short_in_its_ticks():
    lines: list[str] = []
    what = "downloading wheels of " + " ".join(f"package{i}==1.0" for i in range(40))
    with ticking(what, lines.append, every=EVERY_S):
        time.sleep(SLOW_S)
    assert lines[0] == f"{what}..."
    assert all(len(line) < 140 and line.startswith("downloading wheels of package0==1.0") for line in lines[1:]), lines
    assert "...: still running (" in lines[1] and re.search(r"\.\.\.: done after \d+ s$", lines[-1]), lines


def test_without_a_log_the_lines_go_to_stderr_and_minutes_read_as_minutes(fast_ticks, capsys):
    with ticking("pulling"):
        time.sleep(SLOW_S)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("pulling...\n") and len(_ticks(err, "pulling")) >= 2
    assert ticker._elapsed(125.7) == "2 min 05 s" and ticker._elapsed(9.9) == "9 s"


class _SlowImages:
    def __init__(self):
        self.built = []

    def build(self, **kwargs):
        time.sleep(SLOW_S)
        self.built.append(kwargs["tag"])


class _SlowClient:
    def __init__(self):
        self.images = _SlowImages()


def test_an_image_build_shows_progress_on_stderr(fast_ticks, capsys):
    from repogym.envs.sandbox.images import _build

    client = _SlowClient()
    _build(client, "FROM scratch\n", {"inside/x.py": b""}, "repogym/env:test", network=False)
    assert client.images.built == ["repogym/env:test"]
    err = capsys.readouterr().err
    assert err.startswith("building repogym/env:test...\n") and len(_ticks(err, "building repogym/env:test")) >= 2


def test_the_cli_s_image_build_shows_progress_on_its_log(fast_ticks):
    from repogym.envs.sandbox.images import _build

    lines: list[str] = []
    _build(_SlowClient(), "FROM scratch\n", {}, "repogym/base:test", network=True, log=lines.append)
    assert lines[0] == "building repogym/base:test..." and len(_ticks("\n".join(lines), "building repogym/base:test")) >= 2


def test_a_wheel_download_shows_progress(fast_ticks, monkeypatch, tmp_path, capsys):
    from repogym.envs.sandbox import wheelhouse

    def slow_download(requirements, python, dest, *, deps):
        time.sleep(SLOW_S)
        return None

    monkeypatch.setattr(wheelhouse, "_pip_download", slow_download)
    assert wheelhouse.download_wheels(["attrs", "six"], wheelhouse.HOST_PYTHON, tmp_path) is None
    err = capsys.readouterr().err
    what = f"downloading wheels of attrs six for Python {wheelhouse.HOST_PYTHON}"
    assert err.startswith(what + "...\n") and len(_ticks(err, what)) >= 2
    assert f"{what}: done after" in err




def test_the_vllm_engine_s_start_shows_progress(fake_vllm, fast_ticks, monkeypatch, capsys):
    from repogym.trainer.inference.vllm_engine import VLLMEngine, VLLMEngineConfig

    start = fake_vllm.AsyncLLMEngine.from_engine_args

    def slow_start(args):  # a model load: blocks the engine's event loop, as vLLM's does
        time.sleep(SLOW_S)
        return start(args)

    monkeypatch.setattr(fake_vllm.AsyncLLMEngine, "from_engine_args", slow_start)
    engine = VLLMEngine(VLLMEngineConfig(model="/models/tiny"))
    try:
        err = capsys.readouterr().err
        what = "starting vLLM for /models/tiny"
        assert err.startswith(what + "...\n") and len(_ticks(err, what)) >= 2, err
        assert f"{what}: done after" in err
    finally:
        engine.shutdown()
