"""Asking the model for a step's answer (SPEC §10.1): a tool call the token limit cut off is
never given back as if whole. Such an answer is asked for once more with `[model]
retry_max_tokens` when the owner set it; else, or when that one is cut off too, the step fails
with a `ModelError` naming the limit and the key to raise. The answer given back counts the
tokens of both tries. No I/O of its own: the model does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bxcore.config.file import ModelConfig
from services.loopd.anthropic import MAX_TOKENS
from services.loopd.model import Message, Model, ModelError, Offer, Reply


async def ask_model(
    model: Model,
    config: ModelConfig,
    system: str,
    messages: Sequence[Message],
    tools: Sequence[Offer],
) -> Reply:
    """The model's answer, never one whose tool calls the token limit cut off."""
    reply = await model.complete(system, messages, tools)
    if not (reply.cut_off and reply.tool_calls):
        return reply
    if not config.retry_max_tokens:
        raise ModelError(cut_off_message(config, retried=False))
    first = reply.usage
    reply = await model.complete(system, messages, tools, max_tokens=config.retry_max_tokens)
    if reply.cut_off and reply.tool_calls:
        raise ModelError(cut_off_message(config, retried=True))
    if first is None or reply.usage is None:  # both answers were paid for: both are counted
        return replace(reply, usage=reply.usage or first)
    return replace(reply, usage=first + reply.usage)


def cut_off_message(config: ModelConfig, *, retried: bool) -> str:
    """The owner's one line for a tool call cut off by the token limit: which limit, and what
    to raise."""
    said = "the model's answer was cut off by its token limit in the middle of a tool call"
    if retried:
        return (
            f"{said}, also on a second try with [model] retry_max_tokens = "
            f"{config.retry_max_tokens}, so the call was not run; raise retry_max_tokens in "
            "config.toml, or ask for smaller steps"
        )
    if config.max_tokens or config.provider == "anthropic":
        limit = config.max_tokens or MAX_TOKENS
        where = f"at {'' if config.max_tokens else 'the default '}[model] max_tokens = {limit}"
    else:
        where = "at the server's own limit ([model] max_tokens = 0 sends none)"
    return (
        f"{said}, {where}, so the call was not run; raise [model] max_tokens in config.toml, "
        "or set [model] retry_max_tokens to let the model try once more with a higher limit"
    )
