"""``vllm.inputs.TokensPrompt``: a TypedDict in vLLM, so a plain dict here."""


def TokensPrompt(**fields):  # noqa: N802 - vLLM's name
    if "prompt_token_ids" not in fields:
        raise TypeError("TokensPrompt needs prompt_token_ids")
    return dict(fields)
