"""vLLM's OpenAI-compatible server in a process of its own, for the ``llm`` agent (benchmarks, tests).

``python -m vllm.entrypoints.openai.api_server`` from this interpreter (``vllm serve`` fails on the CPU package:
its command line looks up a distribution named ``vllm``), with the hermes tool parser, serving a local model
folder under the folder's path as its name. On a machine without CUDA it gets the CPU build's environment
(:mod:`.vllm_engine`'s defaults, under the caller's own settings). Its output goes to a log file; :meth:`VLLMServer.ready` waits for ``/health`` and, when the
server exits or does not answer in time, raises :class:`~repogym.envs.core.errors.InfraError` with the log's tail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from repogym.envs.core.errors import ConfigError, InfraError
from repogym.trainer.inference.vllm_engine import CPU_ENV, OFFLINE_ENV, cannot_compile_cpu_kernels
from repogym.trainer.inference.weight_sync import free_port


class VLLMServer:
    """One vLLM OpenAI server on ``127.0.0.1`` (a free port), started on construction; :attr:`base_url` ends in
    ``/v1``. A context manager: leaving it stops the server."""

    def __init__(self, model: str, log: Path, *, max_model_len: int = 8192, dtype: str = "float32",
                 extra_args: list[str] | None = None):
        try:
            import vllm  # noqa: F401  (only to say early, and clearly, that this interpreter lacks it)
        except ImportError as exc:
            raise ConfigError(f"vLLM is not installed in {sys.executable} (scripts/setup_vllm.sh makes "
                              f".venv-vllm): {exc}") from exc
        self.model, self.log = model, Path(log)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        import torch

        defaults = dict(OFFLINE_ENV)
        if not torch.cuda.is_available():
            defaults.update(CPU_ENV)
            if cannot_compile_cpu_kernels():
                defaults["TORCHDYNAMO_DISABLE"] = "1"
        env = {**defaults, **os.environ}  # the caller's own settings win
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                   "--host", "127.0.0.1", "--port", str(self.port), "--dtype", dtype, "--enforce-eager",
                   "--max-model-len", str(max_model_len), "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                   *(extra_args or [])]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        self._ready = False

    @property
    def base_url(self) -> str:
        """The API root the ``llm`` agent takes (``LLMConfig.base_url``)."""
        return self.url + "/v1"

    def ready(self, timeout_s: float = 420) -> "VLLMServer":
        """Wait until the server answers ``/health`` (a CPU start takes a minute or more)."""
        deadline = time.monotonic() + timeout_s
        while not self._ready:
            if self.process.poll() is not None:
                raise InfraError("vllm server", f"exited ({self.process.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise InfraError("vllm server", f"did not answer /health in {timeout_s:g} s:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    self._ready = True
            except (urllib.error.URLError, OSError):
                time.sleep(2)
        return self

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> "VLLMServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
