"""An OpenAI chat-completions request body, checked: every problem named, or one clean request.

Only what TuneDesk can honour is accepted: ``n`` other than 1, tools, logprobs or a
``response_format`` are refused in a sentence rather than silently ignored. Fields a client
sends for its own bookkeeping (``user``, ``metadata``, ``store`` ...) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.generate import MAX_NEW_TOKENS, GenerationSettings

ROLES = ("system", "user", "assistant", "developer")
MAX_STOPS = 4  # as OpenAI
UNSUPPORTED = ("tools", "functions", "tool_choice", "logprobs", "top_logprobs", "response_format",
               "logit_bias", "audio", "modalities", "prediction")
DEFAULT_MAX_TOKENS = 256


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


def parse_chat(body) -> ChatRequest:
    """Check a decoded JSON body.

    Raises:
        RequestError: naming every problem at once (``param``: the first bad field).
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    problems: list[tuple[str, str]] = []
    model = body.get("model")
    if not isinstance(model, str) or not model:
        problems.append(("model", "'model' must be the name of a model from GET /v1/models"))
    messages = _messages(body.get("messages"), problems)
    settings = _settings(body, problems)
    stop = _stop(body.get("stop"), problems)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        problems.append(("stream", f"'stream' must be true or false, got {stream!r}"))
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        problems.append(("stream_options", "'stream_options' must be an object"))
        options = {}
    if body.get("n", 1) != 1:
        problems.append(("n", f"only n=1 is supported, got {body.get('n')!r}"))
    for name in UNSUPPORTED:
        if body.get(name) not in (None, False, [], {}) and not (name == "response_format" and
                                                               body[name] == {"type": "text"}):
            problems.append((name, f"'{name}' is not supported by this server"))
    if problems:
        raise RequestError("; ".join(m for _, m in problems), problems[0][0])
    return ChatRequest(model, messages, settings, stop, stream, bool(options.get("include_usage")))


def _messages(raw, problems: list) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        problems.append(("messages", "'messages' must be a non-empty list of {role, content} objects"))
        return []
    out = []
    for i, message in enumerate(raw):
        role = message.get("role") if isinstance(message, dict) else None
        text = _text(message.get("content")) if isinstance(message, dict) else None
        if role not in ROLES:
            problems.append((f"messages[{i}].role", f"messages[{i}].role must be one of {', '.join(ROLES)}"))
        elif text is None:
            problems.append((f"messages[{i}].content", f"messages[{i}].content must be text or a list of text parts"))
        else:  # OpenAI's "developer" is the system message of newer clients
            out.append({"role": "system" if role == "developer" else role, "content": text})
    if out and out[-1]["role"] == "assistant":
        problems.append(("messages", "the last message must not be the assistant's: there is nothing to answer"))
    return out


def _text(content) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return None


def _settings(body: dict, problems: list) -> GenerationSettings:
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    settings = GenerationSettings(
        max_new_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        temperature=_or(body.get("temperature"), 1.0), top_p=_or(body.get("top_p"), 1.0),
        top_k=0, seed=_or(body.get("seed"), 0),
        # vLLM's extension: never end before this many tokens (benchmarks ask equal lengths)
        min_new_tokens=_or(body.get("min_tokens"), 0))
    names = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "temperature": "temperature",
             "top_p": "top_p", "seed": "seed"}
    for message in settings.validate():
        key = message.split()[0]
        param = names.get(key, key)
        text = message.replace(key, param, 1)
        if param == "max_tokens":
            text = f"max_tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {max_tokens!r}"
        problems.append((param, text))
    return settings


def _or(value, default):
    return default if value is None else value


def _stop(raw, problems: list) -> list[str]:
    stops = [raw] if isinstance(raw, str) else raw if raw is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        problems.append(("stop", "'stop' must be a string or a list of strings"))
        return []
    if len(stops) > MAX_STOPS:
        problems.append(("stop", f"'stop' takes at most {MAX_STOPS} strings, got {len(stops)}"))
    return [s for s in stops if s]
