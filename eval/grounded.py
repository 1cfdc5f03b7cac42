"""What grounding bought: the evaluated rows answered again with the knowledge shelf's best
passages in the prompt, scored beside the ungrounded answers in one report section.

Each adapter is grounded in the knowledge version its manifest names (``knowledge``: the one
it was trained beside, as an alias's ``auto`` serves it); the base model in the first
adapter's, so "the base model grounded, with no training" sits beside it. A chosen knowledge
version (``python -m eval --knowledge articles``) grounds every model instead, as an alias
grounded in it serves them. The grounded
conversation is built as serving builds it (:func:`knowledge.grounding.ground`: passages in
the system message). Both rows of every model are scored alike: right intent (the support
checks' classifier), invented spans (the passages the model was shown count as facts it may
state), BLEU and ROUGE-L, overall and per intent.

No leak: no evaluated row, and no row of the data file outside the adapter's training split
(the evaluation split), is ever shown: a passage asking such a row's question, or giving such a
row's answer, is kept out, unless it is a training row itself (its question and answer a pair
the adapter trained on: a team's canned answer to another customer's question is knowledge the
bot is shown when it serves, too). The next best passage takes its place; the number kept out
is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from core.templates import encode_chats
from eval.checks.attach import model_settings
from eval.checks.support import file_rows, support_checks
from eval.metrics import corpus_bleu, rouge_l
from finetune.data.format import ChatFormat
from knowledge.grounding import DEFAULT_K, ground
from knowledge.store import LATEST, KnowledgeShelf

MODES = ("off", "on", "both")
GROUNDED = " (grounded)"  # a model's grounded answers are checked under "<model> (grounded)"


def default_mode(manifests: dict, chosen: tuple[str, str] | None = None) -> str:
    """``both`` when a knowledge version was chosen or an adapter names the knowledge it was
    trained beside, else ``off``."""
    return "both" if chosen or any(_source(m) for m in manifests.values()) else "off"


def chosen_knowledge(value: str | None, mode: str | None, shelf: KnowledgeShelf | None = None):
    """``(name, "vN")`` of the knowledge version ``value`` (``NAME`` for its newest version, or
    ``NAME@vN``) every model is grounded in; None when ``value`` is empty.

    Raises:
        ValueError: a grounding mode of ``off`` beside it, or a knowledge base or version that
            is not on the shelf (named with what there is).
    """
    text = str(value or "").strip()
    if not text:
        return None
    if mode == "off":
        raise ValueError(
            f"grounding off answers without knowledge, so the knowledge {text!r} would not be "
            "used; leave grounding at its default (or on / both) to ground in it"
        )
    name, _, version = text.partition("@")
    found = (shelf or KnowledgeShelf()).get(name.strip(), version.strip() or LATEST)
    return found.name, found.version


def sources(models: list[str], manifests: dict, chosen: tuple[str, str] | None = None) -> dict:
    """Model -> ``(knowledge name, version)`` it is grounded in, or None (nothing to ground in).

    ``chosen``: every model's. Otherwise adapters: their manifest's ``knowledge``; the base
    model (``models[0]``): the first adapter's that has one.
    """
    if chosen:
        return dict.fromkeys(models, chosen)
    out = {name: _source(manifests.get(name) or {}) for name in models[1:]}
    out = {models[0]: next((s for s in out.values() if s), None), **out}
    return out


def leak_guard(
    prompts: list[str],
    references: list[str],
    data: str,
    mapping: dict | None,
    trained: set[tuple[str, str]] | None,
) -> Callable:
    """A test saying True for a passage an evaluation must not show: one asking an evaluated or
    evaluation-split row's question, or giving such a row's answer when the passage is not
    itself one of the training rows (``trained``).

    Args:
        prompts, references: the evaluated rows.
        data: the evaluated file; its rows outside ``trained`` are the evaluation split.
        mapping: the adapter's column mapping, to read ``data``.
        trained: ``(question, answer)`` of the rows the adapters trained on
            (:func:`eval.scoring_rows.training_pairs`); None: not known, so every row of the
            file counts as the evaluation split's.
    """
    rows, _ = file_rows(data, None, mapping)
    known = {(_norm(q), _norm(a)) for q, a in trained or ()}
    split = [
        (q, a)
        for q, a in zip(rows["prompt"], rows["response"], strict=True)
        if (_norm(q), _norm(a)) not in known
    ]
    questions = {_norm(q) for q in prompts} | {_norm(q) for q, _ in split}
    answers = {_norm(a) for a in references} | {_norm(a) for _, a in split}
    questions.discard("")
    answers.discard("")

    def excluded(passage) -> bool:
        question, text = _norm(passage.question), _norm(passage.text)
        return question in questions or (text in answers and (question, text) not in known)

    return excluded


def grounded_prompts(
    tokenizer,
    prompts: list[str],
    system_prompt: str | None,
    source: tuple[str, str],
    exclude: Callable,
    answer_tokens: int,
    shelf: KnowledgeShelf,
    k: int = DEFAULT_K,
) -> tuple[list[list[int]], list]:
    """Token ids of each row's grounded conversation, and each row's :class:`Grounding`."""
    fmt = ChatFormat(tokenizer, system_prompt)
    conversations, groundings = [], []
    for prompt in prompts:
        messages, grounding = ground(
            fmt.messages(prompt),
            *source,
            k=k,
            system_prompt=system_prompt or "",
            answer_tokens=answer_tokens,
            tokenizer=tokenizer,
            shelf=shelf,
            exclude=exclude,
        )
        conversations.append(messages)
        groundings.append(grounding)
    return encode_chats(tokenizer, conversations), groundings


def check_mode(mode: str | None) -> None:
    """Refuse, in one sentence, a grounding mode that is not off, on or both (None: default)."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"grounding must be one of {', '.join(MODES)}, got {mode!r}")


def section(
    report,
    rows,
    tokenizer,
    answer: Callable,
    data: str,
    shelf,
    manifests: dict,
    settings,
    mode: str,
    trained: set | None,
    knowledge: KnowledgeShelf | None = None,
    k: int | None = None,
    chosen: tuple[str, str] | None = None,
) -> dict:
    """The report's ``grounding`` part: each model's rows with and without grounding.

    Args:
        report: the built report (its ungrounded answers in ``samples``).
        rows: the ``eval.scoring_rows.EvalRows`` it scored.
        tokenizer: the base model's tokenizer (the grounded prompts are rendered with it).
        answer: ``answer(prompt_ids, adapters) -> {label: [Generated]}``, the run's generator.
        data: the evaluated file; shelf: the adapter shelf; manifests: adapter -> manifest.
        settings: the generation settings (their answer length caps the passages' room).
        mode: ``on`` (grounded rows only) or ``both``.
        trained: the rows the adapters trained on (the rest of ``data`` is never shown).
        k: passages shown at most in each prompt (None: serving's ``DEFAULT_K``).
        chosen: ``(name, version)`` every model is grounded in (None: each adapter's own).
    """
    knowledge = knowledge or KnowledgeShelf()
    models = report.models
    grounded_in = sources(models, manifests, chosen)
    mapping = rows.mapping  # the columns the rows were read from
    k = DEFAULT_K if k is None else k
    out = {
        "mode": mode,
        "k": k,
        "chosen": f"{chosen[0]} {chosen[1]}" if chosen else None,
        "knowledge": {},
        "notes": [],
        "rows": [],
        "per_intent": {},
        "shown": {},
    }
    grounded_texts, facts = {}, {}
    groups: dict[tuple, list[str]] = {}
    for model, source in grounded_in.items():
        if source is None:
            out["notes"].append(f"{model}: no knowledge to ground in (trained beside none)")
        else:
            groups.setdefault(source, []).append(model)
    guard = leak_guard(rows.prompts, rows.references, data, mapping, trained)
    for source, members in groups.items():
        try:
            ids, groundings = grounded_prompts(
                tokenizer,
                rows.prompts,
                rows.system_prompt,
                source,
                guard,
                settings.max_new_tokens,
                knowledge,
                k,
            )
        except ValueError as err:
            out["notes"].append(f"{', '.join(members)}: not grounded: {err}")
            continue
        adapters = [m for m in members if m != models[0]]
        answers = answer(ids, adapters)
        label = f"{groundings[0].knowledge} {groundings[0].version}"
        for i, g in enumerate(groundings):  # each row: what it was shown, what each model said
            kept = report.samples[i].setdefault("grounded", {"answers": {}, "passages": {}})
            kept["passages"][label] = [pid for pid, _ in g.shown]
        for model in members:
            grounded_texts[model] = [g.text for g in answers[model]]
            for i, text in enumerate(grounded_texts[model]):
                report.samples[i]["grounded"]["answers"][model] = text
            facts[model] = "\n".join(p.text for g in groundings for _, p in g.shown)
            out["knowledge"][model] = label
        out["shown"][label] = {
            "passage_ids": [[i for i, _ in g.shown] for g in groundings],
            "excluded": sum(len(g.excluded or []) for g in groundings),
        }
    _score(out, report, rows, data, shelf, manifests, grounded_texts, facts, mapping)
    return out


def _score(out, report, rows, data, shelf, manifests, grounded_texts, facts, mapping) -> None:
    """Both rows of every model, checked alike in one support-checks call."""
    models = report.models
    texts = {m: [s["answers"][m] for s in report.samples] for m in models}
    settings = model_settings(report, shelf)
    for model, answers in grounded_texts.items():
        texts[model + GROUNDED] = answers
        own = settings[model]
        shown = "\n".join(x for x in (own.facts, facts[model]) if x)
        settings[model + GROUNDED] = replace(own, facts=shown)
    checked = support_checks(
        rows.prompts, rows.references, texts, data, settings, column=rows.slice_by, mapping=mapping
    )
    per_row = checked.pop("per_row")
    # what the gate's floors read when the adapter is served grounded (eval.gate.served_support)
    out["support"] = {m: checked["models"][m + GROUNDED] for m in grounded_texts}
    for model in grounded_texts:
        for i, row_checks in enumerate(per_row[model + GROUNDED]):
            report.samples[i]["grounded"].setdefault("checks", {})[model] = row_checks
    asked = [r["asked"] for r in next(iter(per_row.values()))]
    intents = sorted({str(a) for a in asked if a is not None})
    for model in models:
        keys = [(model, "off")] if out["mode"] == "both" or model not in grounded_texts else []
        if model in grounded_texts:
            keys.append((model + GROUNDED, out["knowledge"][model]))
        for key, grounding in keys:
            every = list(range(len(rows.prompts)))
            out["rows"].append(
                _row(model, grounding, texts[key], per_row[key], rows.references, every)
            )
            for intent in intents:
                picked = [i for i, a in enumerate(asked) if str(a) == intent]
                out["per_intent"].setdefault(intent, []).append(
                    _row(model, grounding, texts[key], per_row[key], rows.references, picked)
                )
    out["skipped"] = checked.get("skipped", {})


COLUMNS = ("model", "grounding", "rows", "right_intent", "invented_spans", "bleu", "rouge_l")


def table(part: dict, intent: str | None = None) -> list[list]:
    """The section's rows (of one intent when given) as table rows, in :data:`COLUMNS` order."""
    chosen = part.get("rows", []) if intent is None else part.get("per_intent", {}).get(intent, [])
    return [[_cell(r[c]) for c in COLUMNS] for r in chosen]


def lines(part: dict) -> list[str]:
    """The section as text: one line per model and grounding, then the notes."""
    out = [
        "with and without grounding (right intent by the support checks' classifier; "
        "passages shown count as facts):",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in table(part)]
    kept_out = sum(s.get("excluded", 0) for s in part.get("shown", {}).values())
    if part.get("chosen"):
        out.append(f"every model grounded in {part['chosen']} (chosen, not each adapter's own)")
    out.append(f"passages shown at most per answer: {part.get('k', DEFAULT_K)}")
    out.append(f"passages kept out because they are evaluation rows: {kept_out}")
    return out + [f"note: {n}" for n in part.get("notes", [])]


def _cell(value):
    return round(value, 3) if isinstance(value, float) else ("" if value is None else value)


def _row(model, grounding, texts, checks, references, picked) -> dict:
    """One model's scores on the rows ``picked``."""
    said = [texts[i] for i in picked]
    refs = [references[i] for i in picked]
    labelled = [checks[i]["right"] for i in picked if checks[i]["right"] is not None]
    invented = [checks[i]["invented"] for i in picked]
    return {
        "model": model,
        "grounding": grounding,
        "rows": len(picked),
        "right_intent": sum(labelled) / len(labelled) if labelled else None,
        "invented_spans": sum(len(x) for x in invented),
        "answers_with_invented": sum(bool(x) for x in invented),
        "bleu": corpus_bleu(said, refs) if said else None,
        "rouge_l": rouge_l(said, refs) if said else None,
    }


def _source(manifest: dict) -> tuple[str, str] | None:
    entry = manifest.get("knowledge") or {}
    if not isinstance(entry, dict) or not entry.get("name"):
        return None
    return entry["name"], entry.get("version") or "latest"


def _norm(text) -> str:
    return " ".join(str(text or "").lower().split())
