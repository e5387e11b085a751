"""SFT data: any agent's trajectories tokenised exactly as the hf agent would have produced them.

Each recorded action becomes the hf agent's way of writing it (``<tool_call>{json}</tool_call>`` and the
stop token, loss mask 1); the first observation and every tool output are wrapped by the chat template
as the agent would have been fed them (loss mask 0).
"""

from __future__ import annotations

import glob
from typing import Any

from repogym.agents.hf import ChatFormat, DEFAULT_SYSTEM_PROMPT
from repogym.agents.policy import Completion
from repogym.agents.trajectory import TokenSequence, Trajectory, read_trajectory
from repogym.envs.core.status import Status
from repogym.envs.tools import tools_schema


def chat_format(tokenizer, options: dict[str, Any]) -> ChatFormat:
    """The ChatFormat an hf agent with ``options`` (system_prompt, tools) uses."""
    tools = options.get("tools")
    schemas = tools_schema(tools) if tools is None or tools else None
    return ChatFormat(tokenizer, options.get("system_prompt", DEFAULT_SYSTEM_PROMPT), schemas)


def teacher_forced_tokens(trajectory: Trajectory, tokenizer, options: dict[str, Any]) -> TokenSequence | None:
    """The token sequence of ``trajectory``'s actions as the hf agent's completions (logprobs 0)."""
    if not trajectory.steps:
        return None
    fmt = chat_format(tokenizer, options)
    seq = TokenSequence()
    prompt = fmt.first_prompt(trajectory.header["observation"])
    for step in trajectory.steps:
        completion = fmt.action_ids(step["action"])
        seq.add_turn(prompt, completion, [0.0] * len(completion), 0)
        prompt = fmt.next_prompt(Completion(completion, [], "stop"), step["observation"])
    return seq


def load_sft_sequences(pattern: str, tokenizer, options: dict[str, Any]) -> list[TokenSequence]:
    """Token sequences of the resolved trajectories among the files matching ``pattern``."""
    out = []
    for path in sorted(glob.glob(pattern, recursive=True)):
        trajectory = read_trajectory(path)
        if trajectory.status == Status.RESOLVED:
            seq = teacher_forced_tokens(trajectory, tokenizer, options)
            if seq is not None:
                out.append(seq)
    return out
