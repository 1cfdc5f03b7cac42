"""An OpenAI chat-completions request body, checked: every problem named, or one clean request.

Only what TuneDesk can honour is accepted: ``n`` other than 1, logprobs, penalties other than 0
and the like are refused in a sentence naming the field, never silently ignored or loosely
read (``n: true`` is not 1). ``response_format`` (JSON object or JSON schema) and ``tools``
are checked here and honoured by the llama.cpp engine. Every text must be valid Unicode.
Fields a client sends for its own bookkeeping (``user``, ``metadata``, ``store`` ...) are
ignored once their type is right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.user_text import check_unicode, unicode_problem
from feedback.store import check_intent, check_rating
from inference.generate import MAX_NEW_TOKENS, GenerationSettings

ROLES = ("system", "user", "assistant", "developer", "tool")
MAX_STOPS = 4  # as OpenAI
UNSUPPORTED = (
    "functions",
    "function_call",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "parallel_tool_calls",
)
ZERO_ONLY = ("frequency_penalty", "presence_penalty")  # numbers from -2 to 2; only 0 is honoured
DEFAULT_MAX_TOKENS = 256
# What a relayed request may carry to llama-server: the fields parse_chat checked, no others.
RELAYED = (
    "model",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "response_format",
    "min_tokens",
    "n",
    "frequency_penalty",
    "presence_penalty",
)


class RequestError(ValueError):
    """A bad request; ``param`` names the field (OpenAI's error shape carries it)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass
class ChatRequest:
    """A checked request: who answers, the conversation, and how."""

    model: str
    messages: list[dict]
    settings: GenerationSettings
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the counts
    json_schema: dict | None = None  # response_format: the answer must be JSON of this schema
    tools: list | None = None  # tools offered to the model (with tool_choice); llama.cpp only
    tool_choice: object = None
    body: dict = field(default_factory=dict)  # the request as sent
    grounding: dict | None = None  # what the answer was shown (serve.grounding), once grounded
    # every message normalised with what a tools chat renders too (name, tool calls, tool ids)
    relayed: list[dict] = field(default_factory=list)
    asked_by: str | None = None  # the API key's name it came with (who may rate its answer)


def message_texts(chat: ChatRequest) -> list[tuple[str, str]]:
    """Every text of a checked request that reaches the model's prompt, with where it is
    (``messages[0].content``, ``messages[2].tool_calls[0].function.arguments``, ``tools[1]``):
    what the control-token check reads, whatever form the client sent it in."""
    return _every_text(chat.relayed, chat.tools)


def _every_text(relayed: list[dict], tools: list | None) -> list[tuple[str, str]]:
    import json

    texts = []
    for i, message in enumerate(relayed):
        texts += [
            (f"messages[{i}].{key}", message[key])
            for key in ("content", "name", "tool_call_id")
            if isinstance(message.get(key), str)
        ]
        for j, call in enumerate(message.get("tool_calls") or []):
            texts += [
                (f"messages[{i}].tool_calls[{j}].function.{key}", call["function"][key])
                for key in ("name", "arguments")
            ]
    texts += [
        (f"tools[{k}]", json.dumps(tool, ensure_ascii=False)) for k, tool in enumerate(tools or [])
    ]
    return texts


def check_token_path(chat: ChatRequest) -> None:
    """Refuse what TuneDesk's own prompt (the chat template, rendered to token ids for either
    engine) cannot hold: a tool's result, and a last message that is not the user's.

    Raises:
        RequestError: naming the message (a request relayed to llama-server with its tools is
            not checked here: its template reads both).
    """
    for i, message in enumerate(chat.messages):
        if message["role"] == "tool":
            raise RequestError(
                f"messages[{i}] is a tool's result (role 'tool'), which only a chat offering "
                "'tools' and answered by llama.cpp reads; answer without it, or offer the tools "
                "where llama.cpp serves",
                f"messages[{i}].role",
            )
    if chat.messages[-1]["role"] == "system":  # the assistant's was refused by parse_chat
        raise RequestError(
            "the last message must be the user's, not a system message: the model answers the "
            "user, so send the question after it",
            "messages",
        )


def relay_body(chat: ChatRequest) -> dict:
    """The body relayed to llama-server: the checked fields and the normalised messages only."""
    return {**{k: chat.body[k] for k in RELAYED if k in chat.body}, "messages": chat.relayed}


def parse_chat(body) -> ChatRequest:
    """Check a decoded JSON body.

    Raises:
        RequestError: naming every problem at once (``param``: the first bad field).
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    problems: list[tuple[str, str]] = []
    model = body.get("model")
    if not isinstance(model, str) or not model or unicode_problem(model) is not None:
        problems.append(("model", "'model' must be the name of a model from GET /v1/models"))
    relayed: list[dict] = []
    messages = _messages(body.get("messages"), problems, relayed)
    settings = _settings(body, problems)
    stop = _stop(body.get("stop"), problems)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        problems.append(("stream", f"'stream' must be true or false, got {stream!r}"))
    include_usage = _stream_options(body.get("stream_options"), problems)
    n = body.get("n", 1)
    if n is not None and (type(n) is not int or n != 1):
        problems.append(("n", f"only n=1 is supported, got {n!r}"))
    for name in ZERO_ONLY:
        value = body.get(name)
        if value is not None and (not _is_number(value) or not -2 <= value <= 2):
            problems.append((name, f"'{name}' must be a number from -2 to 2, got {value!r}"))
        elif value:
            problems.append((name, f"'{name}' other than 0 is not supported by this server"))
    for name in UNSUPPORTED:
        if body.get(name) not in (None, False, [], {}):
            problems.append((name, f"'{name}' is not supported by this server"))
    json_schema = _response_format(body.get("response_format"), problems)
    tools = _tools(body.get("tools"), body.get("tool_choice"), problems)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        problems.append(("user", "'user' must be a string"))
    elif user is not None and unicode_problem(user) is not None:  # an alias's conversation key
        try:
            check_unicode(user, "user")
        except ValueError as err:
            problems.append(("user", str(err)))
    if not problems:  # the contents were checked with the messages; the other texts here
        problems += [
            (where, f"{where} contains a character that is not valid Unicode (a lone surrogate)")
            for where, text in _every_text(relayed, tools)
            if not where.endswith(".content") and unicode_problem(text) is not None
        ]
    if problems:
        raise RequestError("; ".join(m for _, m in problems), problems[0][0])
    return ChatRequest(
        model,
        messages,
        settings,
        stop,
        stream,
        include_usage,
        json_schema,
        tools,
        body.get("tool_choice"),
        body,
        relayed=relayed,
    )


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _stream_options(options, problems: list) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        problems.append(("stream_options", "'stream_options' must be an object"))
        return False
    usage = options.get("include_usage", False)
    if not isinstance(usage, bool):
        problems.append(
            (
                "stream_options.include_usage",
                f"'stream_options.include_usage' must be true or false, got {usage!r}",
            )
        )
        return False
    return usage


def _response_format(raw, problems: list) -> dict | None:
    """The JSON schema an answer must follow (``{}``: any JSON object), or None for text."""
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    schema = (
        (raw.get("json_schema") or {}).get("schema")
        if kind == "json_schema" and isinstance(raw.get("json_schema"), dict)
        else None
    )
    if kind == "json_schema" and isinstance(schema, dict):
        return schema
    problems.append(
        (
            "response_format",
            '\'response_format\' must be {"type": "text"}, {"type": '
            '"json_object"} or {"type": "json_schema", "json_schema": {"name": ..., '
            '"schema": {...}}}',
        )
    )
    return None


def _tools(tools, choice, problems: list) -> list | None:
    if tools in (None, []):
        if choice == "required" or isinstance(choice, dict):  # "auto" / "none": a text answer
            problems.append(
                (
                    "tool_choice",
                    "'tool_choice' asks for a tool call, but the request offers no 'tools': "
                    "send the tools, or leave tool_choice out",
                )
            )
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        problems.append(
            (
                "tools",
                '\'tools\' must be a list of {"type": "function", "function": '
                '{"name": ..., "parameters": {...}}}',
            )
        )
        return None
    if (
        choice is not None
        and choice not in ("none", "auto", "required")
        and not (isinstance(choice, dict) and choice.get("type") == "function")
    ):
        problems.append(
            (
                "tool_choice",
                '\'tool_choice\' must be "none", "auto", "required" or '
                '{"type": "function", "function": {"name": ...}}',
            )
        )
    return tools


def _messages(raw, problems: list, relayed: list) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        problems.append(
            ("messages", "'messages' must be a non-empty list of {role, content} objects")
        )
        return []
    out = []
    for i, message in enumerate(raw):
        role = message.get("role") if isinstance(message, dict) else None
        text = _text(message.get("content")) if isinstance(message, dict) else None
        if (
            text is None
            and role == "assistant"
            and message.get("content") is None
            and message.get("tool_calls")
        ):
            text = ""  # an assistant turn that only called tools
        if role not in ROLES:
            problems.append(
                (f"messages[{i}].role", f"messages[{i}].role must be one of {', '.join(ROLES)}")
            )
        elif text is None:
            problems.append(
                (
                    f"messages[{i}].content",
                    f"messages[{i}].content must be text or a list of text parts",
                )
            )
        elif unicode_problem(text) is not None:
            problems.append(
                (
                    f"messages[{i}].content",
                    f"messages[{i}].content contains a character that "
                    "is not valid Unicode (a lone surrogate); remove it",
                )
            )
        else:  # OpenAI's "developer" is the system message of newer clients
            out.append({"role": "system" if role == "developer" else role, "content": text})
            relayed.append(_relayed(message, out[-1], i, problems))
    if out and out[-1]["role"] == "assistant":
        problems.append(
            ("messages", "the last message must not be the assistant's: there is nothing to answer")
        )
    return out


def _relayed(message: dict, plain: dict, i: int, problems: list) -> dict:
    """``message`` as a tools chat relays it: text content, and its name, tool calls and tool
    call id when they are of the right types (refused in ``problems`` otherwise)."""
    out = {**plain, "content": None if message.get("content") is None else plain["content"]}
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None:
            if isinstance(message[key], str):
                out[key] = message[key]
            else:
                problems.append((f"messages[{i}].{key}", f"messages[{i}].{key} must be a string"))
    calls = message.get("tool_calls")
    if calls is not None:
        if isinstance(calls, list) and all(_is_call(c) for c in calls):
            out["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": c["function"]["arguments"],
                    },
                }
                for c in calls
            ]
        else:
            problems.append(
                (
                    f"messages[{i}].tool_calls",
                    f"messages[{i}].tool_calls must be a list of "
                    '{"type": "function", "function": {"name": ..., "arguments": "..."}}',
                )
            )
    return out


def _is_call(call) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (
        isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(function.get("arguments"), str)
        and isinstance(call.get("id", ""), str)
    )


def _text(content) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    return None


def _settings(body: dict, problems: list) -> GenerationSettings:
    max_tokens = _or(body.get("max_completion_tokens"), body.get("max_tokens"))
    settings = GenerationSettings(
        max_new_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        temperature=_or(body.get("temperature"), 1.0),
        top_p=_or(body.get("top_p"), 1.0),
        top_k=0,
        seed=_or(body.get("seed"), 0),
        # vLLM's extension: never end before this many tokens (benchmarks ask equal lengths)
        min_new_tokens=_or(body.get("min_tokens"), 0),
    )
    names = {
        "max_new_tokens": "max_tokens",
        "min_new_tokens": "min_tokens",
        "temperature": "temperature",
        "top_p": "top_p",
        "seed": "seed",
    }
    for message in settings.validate():
        key = message.split()[0]
        param = names.get(key, key)
        text = message.replace(key, param, 1).replace("max_new_tokens", "max_tokens")
        if param == "max_tokens":
            text = (
                f"max_tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {max_tokens!r}"
            )
        problems.append((param, text))
    return settings


def _or(value, default):
    return default if value is None else value


def _stop(raw, problems: list) -> list[str]:
    stops = [raw] if isinstance(raw, str) else raw if raw is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        problems.append(("stop", "'stop' must be a string or a list of strings"))
        return []
    if any(unicode_problem(s) is not None for s in stops):
        problems.append(("stop", "'stop' contains a character that is not valid Unicode"))
        return []
    if len(stops) > MAX_STOPS:
        problems.append(("stop", f"'stop' takes at most {MAX_STOPS} strings, got {len(stops)}"))
    return [s for s in stops if s]


def parse_feedback(body) -> tuple[str, str, str | None, str | None]:
    """A ``/v1/feedback`` body checked: (answer id, rating, correction or None, intent or None).

    Raises:
        RequestError: naming the first bad field.
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    unknown = sorted(set(body) - {"id", "rating", "correction", "intent"})
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r}; /v1/feedback takes id, rating, correction and intent",
            unknown[0],
        )
    answer_id = body.get("id")
    if not isinstance(answer_id, str) or not answer_id.strip():
        raise RequestError("id must be the id of a chat completion this server returned", "id")
    if unicode_problem(answer_id) is not None:  # no answer has one; the store cannot look it up
        raise RequestError(
            "id contains a character that is not valid Unicode (a lone surrogate); no answer "
            "id holds one",
            "id",
        )
    try:
        check_rating(body.get("rating"), body.get("correction"))
    except ValueError as err:
        raise RequestError(
            str(err), "rating" if str(err).startswith("rating") else "correction"
        ) from None
    try:
        intent = check_intent(body.get("intent"))
    except ValueError as err:
        raise RequestError(str(err), "intent") from None
    return answer_id.strip(), body["rating"], body.get("correction"), intent
