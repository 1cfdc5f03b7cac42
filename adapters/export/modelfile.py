"""An Ollama ``Modelfile`` for an exported GGUF: its TEMPLATE derived from the chat template.

Ollama renders prompts with Go's ``text/template`` over ``.Messages``, not with Jinja, so the
model's chat template is translated. The translation is learnt, not hand-written per family:
the template is rendered on marker conversations, which yields each role's text before and
after its content, the generation prompt, and any default system block the template adds
when the conversation has none (SmolLM2, Qwen2.5). The result is then checked against the
chat template on conversations of 1-3 turns with and without a system message; a template
that is not "one block per message" (dates, tool calls, per-position logic) is refused in
words rather than approximated. Models without a chat template (GPT-2) get TuneDesk's
fallback instruction format (:mod:`core.templates`), which they were tuned on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from core import templates

_MARK = {"system": "Xsysmark9", "user": "Xusermark9", "assistant": "Xasstmark9"}


class TemplateNotExpressible(ValueError):
    """The chat template cannot be written as an Ollama Go TEMPLATE; the message says why."""


@dataclass(frozen=True)
class ChatPieces:
    """The text around each role's content, learnt from the chat template."""

    around: dict  # role -> (text before the content, text after it)
    generation: str  # what opens the assistant's answer
    default_system: str = ""  # emitted when the first message is not a system message

    def render(self, messages: list[dict]) -> str:
        """The prompt these pieces give for ``messages`` (ending with the generation prompt)."""
        head = self.default_system if messages[0]["role"] != "system" else ""
        body = "".join(
            self.around[m["role"]][0] + m["content"] + self.around[m["role"]][1] for m in messages
        )
        return head + body + self.generation


def chat_pieces(tokenizer) -> ChatPieces:
    """Learn the per-role pieces of ``tokenizer``'s chat template and check them.

    Raises:
        TemplateNotExpressible: the template is not a plain concatenation of message blocks.
    """
    if not templates.has_chat_template(tokenizer):
        sep = "\n\n"  # core.templates' fallback format
        pieces = ChatPieces(
            {
                "system": ("", sep),
                "user": ("### Instruction:\n", sep),
                "assistant": ("### Response:\n", sep),
            },
            "### Response:\n",
        )
    else:
        try:
            pieces = _learn(tokenizer)
        except TemplateNotExpressible:
            raise
        except Exception as err:  # jinja errors: a template refusing a system message, ...
            raise TemplateNotExpressible(
                f"the chat template fails on a plain conversation ({err})"
            ) from None
    for conv in probe_conversations():
        want = templates.render_prompt(tokenizer, conv)
        if pieces.render(conv) != want:
            raise TemplateNotExpressible(
                f"the chat template is not one block per message (it renders {want[:80]!r} for a "
                f"{len(conv)}-message conversation), so no Ollama TEMPLATE is written"
            )
    return pieces


def go_template(pieces: ChatPieces) -> str:
    """Ollama's Go ``text/template`` source for ``pieces`` (over ``.Messages``)."""
    branches = "".join(
        f'{{{{ {"if" if i == 0 else "else if"} eq .Role "{role}" }}}}'
        f"{_literal(before)}{{{{ .Content }}}}{_literal(after)}"
        for i, (role, (before, after)) in enumerate(pieces.around.items())
    )
    # No "{{-" trim markers: they would eat the newlines that are part of the chat format.
    head = ""
    if pieces.default_system:
        head = (
            '{{ if .Messages }}{{ if ne (index .Messages 0).Role "system" }}'
            f"{_literal(pieces.default_system)}{{{{ end }}}}{{{{ end }}}}"
        )
    return (
        f"{head}{{{{ range .Messages }}}}{branches}{{{{ end }}}}{{{{ end "
        f"}}}}{_literal(pieces.generation)}"
    )


def stop_tokens(tokenizer) -> list[str]:
    """The end-of-turn tokens as text (for ``PARAMETER stop``)."""
    return [t for t in tokenizer.convert_ids_to_tokens(templates.end_of_turn_ids(tokenizer)) if t]


ADAPTER_NOTE = (
    "ADAPTER needs an Ollama older than 0.34.1: 0.34.1 and later refuse Modelfiles that hold it "
    "(ollama/ollama#14969). With those, use the merged export's Modelfile."
)


def modelfile(
    model_file: str,
    *,
    adapter_file: str | None = None,
    template: str | None,
    stops: list[str],
    system: str | None = None,
) -> str:
    """The text of an Ollama Modelfile (paths relative to the Modelfile's folder). One with
    an ``adapter_file`` says which Ollama versions accept it."""
    lines = (
        [f"# {ADAPTER_NOTE}", f"FROM ./{model_file}"] if adapter_file else [f"FROM ./{model_file}"]
    )
    if adapter_file:
        lines.append(f"ADAPTER ./{adapter_file}")
    if template is not None:
        lines.append(f'TEMPLATE """{_triple(template)}"""')
    if system:
        lines.append(f'SYSTEM """{_triple(system)}"""')
    lines += [f"PARAMETER stop {json.dumps(s, ensure_ascii=False)}" for s in stops]
    lines.append("PARAMETER temperature 0")  # support answers: the tuned, repeatable reply
    return "\n".join(lines) + "\n"


def probe_conversations() -> list[list[dict]]:
    """Conversations of 1-3 user turns, with and without a system message (used to check)."""
    turns = [
        ("Where is my order?", "It ships today."),
        ("Can I change the address?\nIt moved.", "Yes."),
    ]
    out = []
    for n in (1, 2, 3):
        history = []
        for q, a in turns[: n - 1]:
            history += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        conv = history + [{"role": "user", "content": "I want a refund, please."}]
        out += [conv, [{"role": "system", "content": "You are a support agent."}] + conv]
    return out


def _learn(tokenizer) -> ChatPieces:
    def render(msgs, gen=False):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)

    sys_, user, asst = ({"role": role, "content": mark} for role, mark in _MARK.items())
    p_s, p_su = render([sys_]), render([sys_, user])
    blocks = [p_s, _after(p_s, p_su), _after(p_su, render([sys_, user, asst]))]
    around = {role: _split(block, _MARK[role]) for role, block in zip(_MARK, blocks, strict=True)}
    generation = _after(p_su, render([sys_, user], gen=True))
    only_user = render([user])
    if not only_user.endswith(blocks[1]):
        raise TemplateNotExpressible(
            "the chat template renders a user message differently when it comes first"
        )
    return ChatPieces(around, generation, only_user[: -len(blocks[1])])


def _after(prefix: str, text: str) -> str:
    if not text.startswith(prefix):
        raise TemplateNotExpressible(
            "the chat template rewrites earlier messages when one is added"
        )
    return text[len(prefix) :]


def _split(block: str, mark: str) -> tuple[str, str]:
    if block.count(mark) != 1:
        raise TemplateNotExpressible(
            "the chat template does not show each message's text exactly once"
        )
    before, after = block.split(mark)
    return before, after


def _literal(text: str) -> str:
    """Template text for a literal string; quoted as a Go string when it holds braces."""
    if "{{" in text or "}}" in text:
        return "{{ " + json.dumps(text, ensure_ascii=False) + " }}"
    return text


def _triple(text: str) -> str:
    if '"""' in text:
        raise TemplateNotExpressible(
            'a Modelfile block cannot hold three double quotes (""") in a row'
        )
    return text
