"""Reading requests: the JSON body, and each field of an embeddings or chat request checked into typed values.

Every refusal is an :class:`ApiError` naming the field at fault and what is accepted.
"""

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

from nosink.checks import printable
from nosink.models import texts as _texts
from nosink.serve.jobs import Sampling
from nosink.serve.limits import ApiError, Limits

# OpenAI's chat roles; "developer" is the newer name of "system".
_ROLES = ("system", "developer", "user", "assistant")

# OpenAI chat fields not implemented here, with the values that ask for nothing; any other value is refused.
_UNSUPPORTED_CHAT: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "parallel_tool_calls": (None, False, True),  # meaningless without tools
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "response_format": (None, {"type": "text"}),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
}


def field(data: dict, name: str, kinds: tuple[type, ...], what: str, default: Any = None) -> Any:
    """``data[name]`` if one of ``kinds`` (``default`` when absent or null); else a 400 saying it must be ``what``."""
    value = data.get(name, default)
    if value is None:
        return default
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ApiError(400, f"'{name}' must be {what}, got {type(value).__name__}", "invalid_type", name)
    return value


def _shown(value: Any) -> str:
    """A client's value as quoted in a message: its repr, escaped and cut (a JSON integer may have 4300 digits)."""
    text = printable(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _number(data: dict, name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    value = field(data, name, (int, float), "a number", default)
    # Compared before float(): a huge JSON integer is out of range, not an OverflowError (NaN fails every test).
    finite = not isinstance(value, float) or math.isfinite(value)
    if not (finite and low <= value <= high) or (low_open and value == low):
        bound = f"{'>' if low_open else '>='} {low:g} and <= {high:g}"
        raise ApiError(400, f"'{name}' must be {bound}, got {_shown(value)}", "invalid_value", name)
    return float(value)


def _unicode(text: str, where: str, param: str) -> str:
    """``text`` if it is valid Unicode (JSON's ``"\\ud800"`` is not); else a 400 naming ``where`` (``input[3]``)."""
    try:
        return _texts.check_unicode(text, where)
    except ValueError as err:
        raise ApiError(400, printable(str(err)), "invalid_input", param) from None


def texts_of(data: dict, most: int) -> list[str]:
    """The texts of an embeddings request's ``input`` (a string or a list of at most ``most`` non-empty strings)."""
    raw = data.get("input")
    if raw is None:
        raise ApiError(400, "'input' is required: a string or a list of strings", "missing_input", "input")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ApiError(
            400, f"'input' must be a string or a list of strings, got {type(raw).__name__}", "invalid_type", "input"
        )
    if not raw:
        raise ApiError(400, "'input' is an empty list: give at least one text", "empty_input", "input")
    for i, text in enumerate(raw):
        if isinstance(text, (int, list)) and not isinstance(text, bool):
            raise ApiError(
                400,
                "token-id input is not supported: send text. Ids from another tokenizer (tiktoken, as LangChain "
                "sends by default) would be read as this model's tokens and give silently wrong vectors",
                "unsupported_input",
                "input",
            )
        if not isinstance(text, str):
            raise ApiError(400, f"'input[{i}]' must be a string, got {type(text).__name__}", "invalid_type", "input")
        if not text:
            raise ApiError(400, f"'input[{i}]' is an empty string: it has nothing to embed", "empty_input", "input")
        _unicode(text, f"input[{i}]" if isinstance(data["input"], list) else "input", "input")
    if len(raw) > most:
        raise ApiError(
            413, f"{len(raw)} inputs in one request; this server takes at most {most}", "too_many_inputs", "input"
        )
    return raw


def embedding_options(data: dict, width: int, prompts: dict[str, str]) -> tuple[str, int, str | None]:
    """``(encoding_format, dimensions, instruction)`` of an embeddings request."""
    fmt = field(data, "encoding_format", (str,), "'float' or 'base64'", "float")
    if fmt not in ("float", "base64"):
        message = f"'encoding_format' must be 'float' or 'base64', got {printable(repr(fmt))[:80]}"
        raise ApiError(400, message, "invalid_value", "encoding_format")
    dims = field(data, "dimensions", (int,), "an integer", width)
    if not 1 <= dims <= width:
        message = f"'dimensions' must be from 1 to {width}, got {_shown(dims)}"
        raise ApiError(400, message, "invalid_value", "dimensions")
    prompt_name = field(data, "prompt_name", (str,), "a string", None)
    if prompt_name is None:
        return fmt, dims, None
    if prompt_name not in prompts:
        known = ", ".join(map(repr, sorted(prompts))) or "none"
        shown = printable(repr(prompt_name))[:80]
        raise ApiError(400, f"unknown prompt_name {shown}; this server has {known}", "unknown_prompt", "prompt_name")
    return fmt, dims, prompts[prompt_name]


def check_supported(data: dict) -> None:
    """Refuse (400 naming the field) what a chat request asks for that this server does not do."""
    for name, nothing in _UNSUPPORTED_CHAT.items():
        value = data.get(name)
        if value not in nothing:  # by ==: logprobs 0 and presence_penalty 0.0 ask for nothing too
            raise ApiError(
                400,
                f"'{name}' is not supported by this server (text chat only: no tools, function calls, logprobs, "
                f"logit_bias, penalties, response formats or audio); leave it out, got {_shown(value)}",
                "unsupported_parameter",
                name,
            )


def messages_of(data: dict) -> list[dict[str, str]]:
    """A chat request's ``messages`` as ``{role, content}`` strings (``developer`` read as ``system``)."""
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(
            400, "'messages' must be a non-empty list of {role, content} objects", "invalid_messages", "messages"
        )
    messages = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"'{where}' must be an object, got {type(message).__name__}", "invalid_type", where)
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            shown = printable(repr(role))[:80]
            raise ApiError(
                400, f"'{where}.role' must be one of {', '.join(_ROLES)}, got {shown}", "invalid_value", where
            )
        if isinstance(content, list):  # OpenAI's content parts: only text is understood here
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"'{where}.content' may hold only text parts", "unsupported_content", where)
                parts.append(_unicode(part["text"], f"{where}.content[{j}].text", where))
            content = "".join(parts)
        if not isinstance(content, str):
            raise ApiError(
                400, f"'{where}.content' must be a string, got {type(content).__name__}", "invalid_type", where
            )
        _unicode(content, f"{where}.content", where)
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    return messages


def sampling_of(data: dict, limits: Limits, prompt_tokens: int, positions: int | None) -> Sampling:
    """A chat request's sampling fields, checked against ``limits`` and the model's ``positions``."""
    max_tokens = field(data, "max_completion_tokens", (int,), "an integer", None)
    max_tokens = field(data, "max_tokens", (int,), "an integer", max_tokens)
    if max_tokens is None:
        max_tokens = limits.default_max_tokens
    if not 1 <= max_tokens <= limits.max_new_tokens:
        raise ApiError(
            400,
            f"'max_tokens' must be from 1 to {limits.max_new_tokens}, got {_shown(max_tokens)}",
            "invalid_value",
            "max_tokens",
        )
    if positions is not None and prompt_tokens + max_tokens > positions:
        raise ApiError(
            400,
            f"the prompt ({prompt_tokens} tokens) and max_tokens ({max_tokens}) exceed the model's "
            f"{positions} positions",
            "context_length_exceeded",
            "messages",
        )
    stop = data.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, "'stop' must be a non-empty string or a list of at most 4 of them", "invalid_value", "stop")
    for i, text in enumerate(stops):
        _unicode(text, f"stop[{i}]" if isinstance(stop, list) else "stop", "stop")
    seed = field(data, "seed", (int,), "an integer", None)
    if seed is not None and not 0 <= seed < 2**63:
        raise ApiError(400, f"'seed' must be from 0 to 2**63 - 1, got {_shown(seed)}", "invalid_value", "seed")
    n = field(data, "n", (int,), "an integer", 1)
    if n != 1:
        raise ApiError(400, f"'n' must be 1 (one answer per request), got {_shown(n)}", "unsupported_value", "n")
    return Sampling(
        max_tokens=max_tokens,
        temperature=_number(data, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(data, "top_p", 1.0, 0.0, 1.0, low_open=True),
        stop=tuple(stops),
        seed=seed,
    )


async def json_body(request: Any, limit: int) -> dict:
    """The request's body read (at most ``limit`` bytes) and parsed as a JSON object."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ApiError(
            413, f"the request body ({length} bytes) is over this server's {limit} bytes", "request_too_large"
        )
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the request body is over this server's {limit} bytes", "request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(499, "the client closed the request", "client_closed_request") from None
    try:
        data = json.loads(b"".join(chunks))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ApiError(
            400, f"the request body is not valid JSON ({printable(str(err))[:200]})", "invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}", "invalid_json")
    return data


async def until_done(request: Any, future: asyncio.Future, on_gone: Callable[[], None]) -> Any:
    """``future``'s result; if the client disconnects first, ``on_gone()`` and a 499 error."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({future, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if future in done:
        return future.result()
    on_gone()
    future.cancel()
    raise ApiError(499, "the client closed the request", "client_closed_request")
