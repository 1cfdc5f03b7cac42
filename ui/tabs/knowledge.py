"""Knowledge tab: what the bot may answer from. Import files as a new version, browse a
version's passages, try a search (layout and wiring only; ui/views/knowledge.py does the work)."""

from __future__ import annotations

import gradio as gr

from knowledge.actions import DEFAULT_NAME
from ui.views import knowledge as view
from ui.views import knowledge_warm as warm_view
from ui.views.state import AppState
from ui.views.wording import as_markdown

HELP = (
    "Past answers, articles and macros the bot may answer from. Each import makes a new version "
    "(the old ones stay as they were); training puts its training rows' answers here by itself. "
    "Markdown (one passage per heading), HTML, plain text, CSV (question/answer or title/body) "
    "and JSONL files. When a policy changes, label its article with the intent it answers "
    "(`<!-- intent: NAME -->` in its Markdown section, or an `intent` column): it is then shown "
    "before that intent's past answers, which still say the old policy."
)

WARM_HELP = (
    "A grounded answer reads its passages first; one already in llama-server's prompt cache is "
    "restored instead, so the first word comes sooner. A kept warm-up reads a model's knowledge "
    "into the cache now and again each time a server starts (a restart, a new adapter). It "
    "uses idle moments only; the table says what the last reading did."
)


def build_knowledge_tab(state: AppState) -> dict:
    with gr.Tab("Knowledge", id="knowledge") as tab:
        gr.Markdown(HELP)
        with gr.Row():
            files = gr.File(
                label="Files to import", file_count="multiple", elem_id="knowledge-files"
            )
            with gr.Column():
                name = gr.Textbox(
                    value=DEFAULT_NAME,
                    label="Import into (knowledge base name)",
                    elem_id="knowledge-import-name",
                )
                kind = gr.Dropdown(list(view.KINDS), value="auto", label="Passage kind")
                replace = gr.Checkbox(label="Replace: the new version holds these files only")
                do_import = gr.Button("Import", variant="primary", elem_id="knowledge-import")
        said = gr.Markdown(elem_id="knowledge-said")
        with gr.Row():
            base = gr.Dropdown([], label="Knowledge base", elem_id="knowledge-name")
            version = gr.Dropdown([], label="Version", elem_id="knowledge-version")
            refresh = gr.Button("↻ Refresh", elem_id="knowledge-refresh")
        about = gr.Markdown(elem_id="knowledge-about")
        with gr.Row():
            query = gr.Textbox(
                label="Try a search: what a customer asks", scale=4, elem_id="knowledge-query"
            )
            k = gr.Slider(1, 10, value=3, step=1, label="Passages")
            search = gr.Button("Search", elem_id="knowledge-search")
        searched = gr.Markdown(elem_id="knowledge-searched")  # nothing matched, or a refusal
        hits = gr.Dataframe(
            headers=view.HIT_COLUMNS,
            label="Search hits, best first",
            interactive=False,
            wrap=True,
            elem_id="knowledge-hits",
        )
        passages = gr.Dataframe(
            headers=view.PASSAGE_COLUMNS,
            label="Passages of the version picked",
            interactive=False,
            wrap=True,
            elem_id="knowledge-passages",
        )
        with gr.Row():
            confirm = gr.Checkbox(label="Delete the chosen version for good")
            delete = gr.Button("Delete version", variant="stop", elem_id="knowledge-delete")
        with gr.Accordion("Kept warm-ups: knowledge read ahead into llama-server", open=False):
            gr.Markdown(WARM_HELP)
            with gr.Row():
                warm_model = gr.Textbox(label="Model or alias", elem_id="knowledge-warm-model")
                warm_knowledge = gr.Textbox(
                    value="auto",
                    label="Knowledge (auto: what it answers from)",
                    elem_id="knowledge-warm-knowledge",
                )
                # no minimum: the page sends an empty box as 0, which means all
                warm_most = gr.Number(
                    None,
                    precision=0,
                    label="Passages at most (0 or blank: all)",
                    elem_id="knowledge-warm-most",
                )
            with gr.Row():
                keep = gr.Button("Keep warm", elem_id="knowledge-warm-keep")
                forget = gr.Button("Forget", elem_id="knowledge-warm-forget")
                warm_refresh = gr.Button("↻ Refresh", elem_id="knowledge-warm-refresh")
            kept = gr.Dataframe(
                headers=warm_view.WARM_COLUMNS,
                interactive=False,
                wrap=True,
                elem_id="knowledge-warm-kept",
            )

        def knowledge_refresh(chosen=None):
            names = view.names()
            chosen = chosen if chosen in names else (names[0] if names else None)
            return gr.update(choices=names, value=chosen), *knowledge_pick(chosen)

        def knowledge_pick(chosen):
            versions = view.versions(chosen)
            first = versions[0] if versions else None
            return gr.update(choices=versions, value=first), *knowledge_show(chosen, first)

        def knowledge_show(chosen, which):
            return view.about(chosen, which), view.passage_table(chosen, which)

        # A refusal replaces the line above the shelf: the last success left there read as
        # this action's outcome.
        def knowledge_import(uploaded, into, chosen_kind, only_these):
            try:
                message = view.import_upload(uploaded, into, chosen_kind, only_these)
            except ValueError as err:
                gr.Warning(str(err))
                said = f"⚠️ Nothing imported: {as_markdown(str(err))}"
                return said, gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return message, *knowledge_refresh(into.strip())

        def knowledge_search(asked, chosen, which, count):
            try:
                return view.search_results(asked, chosen, which, count)
            except ValueError as err:  # the last search's rows go: they answered another query
                gr.Warning(str(err))
                return [], f"⚠️ {as_markdown(str(err))}"

        def knowledge_delete(chosen, which, confirmed):
            try:
                message = view.delete_version(chosen, which, confirmed)
            except ValueError as err:
                gr.Warning(str(err))
                said = f"⚠️ Nothing deleted: {as_markdown(str(err))}"
                return said, gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return message, *knowledge_refresh(chosen)

        def warm_do(act, *args):
            try:
                message = act(state.warm_keeper, *args)
            except ValueError as err:
                gr.Warning(str(err))
                return f"⚠️ {as_markdown(str(err))}", warm_view.kept_table(state.warm_keeper)
            return message, warm_view.kept_table(state.warm_keeper)

        def warm_keep(model, knowledge, most):
            return warm_do(warm_view.keep_warm, model, knowledge, most)

        def warm_forget(model):
            return warm_do(warm_view.forget_warm, model)

        def warm_list():
            return warm_view.kept_table(state.warm_keeper)

        def knowledge_hits(asked, chosen, which, count):
            return view.search_again(asked, chosen, which, count)

        # Whatever changes the knowledge base or version picked searches again there: the hits
        # shown belonged to the one picked before.
        searching = ([query, base, version, k], [hits, searched])
        shown = [base, version, about, passages]
        for trigger in (tab.select, refresh.click):
            trigger(knowledge_refresh, base, shown).then(knowledge_hits, *searching)
        base.input(knowledge_pick, base, [version, about, passages]).then(
            knowledge_hits, *searching
        )
        version.input(knowledge_show, [base, version], [about, passages]).then(
            knowledge_hits, *searching
        )
        do_import.click(knowledge_import, [files, name, kind, replace], [said, *shown]).then(
            knowledge_hits, *searching
        )
        search.click(knowledge_search, *searching)
        query.submit(knowledge_search, *searching)
        delete.click(knowledge_delete, [base, version, confirm], [said, *shown]).then(
            knowledge_hits, *searching
        )
        keep.click(warm_keep, [warm_model, warm_knowledge, warm_most], [said, kept])
        forget.click(warm_forget, warm_model, [said, kept])
        for trigger in (tab.select, warm_refresh.click):
            trigger(warm_list, None, kept)
    return {"tab": tab}
