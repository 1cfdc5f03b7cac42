"""The Train tab's processes / nodes / rendezvous / sharding settings: form <-> RunConfig, and
Check and Start refusing bad ones with the CLI's sentences."""

from ui_handlers import handlers

from core.hardware import detect
from ui.views import forms
from ui.views import train_actions as train_handlers
from ui.views.train_actions import DATA_SOURCES

RUN_FIELDS = ("nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "sharding")
AT = [forms.TRAIN_FIELDS.index(("run", f)) for f in RUN_FIELDS]  # where they sit in the form


def _run_part(values: list) -> list:
    return [values[i] for i in AT]


def _values(model_dir, **run) -> list:
    cfg = forms.ui_defaults()
    cfg.model.name = str(model_dir)
    for k, v in run.items():
        setattr(cfg.run, k, v)
    return forms.form_values(cfg)


def test_the_form_round_trips_the_launch_settings(tiny_llama_dir):
    run = {
        "nproc_per_node": 4,
        "nnodes": 2,
        "node_rank": 1,
        "rdzv_endpoint": "10.0.0.5:29500",
        "sharding": "fsdp",
    }
    values = _values(tiny_llama_dir, **run)
    assert _run_part(values) == [run[f] for f in RUN_FIELDS]
    # Gradio's Number gives floats and the Textbox may carry spaces: they arrive as the CLI's.
    for i, value in zip(AT, [4.0, 2.0, 1.0, " 10.0.0.5:29500 ", "fsdp"], strict=True):
        values[i] = value
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert problems == [] and {f: getattr(cfg.run, f) for f in RUN_FIELDS} == run
    assert _run_part(forms.form_values(cfg)) == [run[f] for f in RUN_FIELDS]


def test_check_and_start_refuse_a_bad_endpoint_with_the_cli_sentence(tiny_llama_dir, home):
    hw = detect()
    values = _values(tiny_llama_dir, nnodes=2, rdzv_endpoint="nohost")
    text = train_handlers.checked_text(hw, lambda cfg: "fine", DATA_SOURCES[0], None, "", values)
    sentence = "with 2 nodes the rendezvous endpoint must be host:port of node 0 (got 'nohost')"
    assert text.startswith("**These settings cannot run:**") and sentence in text
    on_start = handlers(tiny_llama_dir)["on_start"]  # what the Start button runs (the tab is built)
    message, run_id = on_start(DATA_SOURCES[0], None, "", *values)
    assert run_id is None and message.startswith("**Not started") and sentence in message


def test_fsdp_on_one_process_is_refused_in_words(tiny_llama_dir):
    values = _values(tiny_llama_dir, sharding="fsdp")
    text = train_handlers.checked_text(
        detect(), lambda cfg: "fine", DATA_SOURCES[0], None, "", values
    )
    assert (
        "sharding fsdp splits the model across processes: set processes per node x nodes above 1"
        in text
    )
    ok = _values(tiny_llama_dir, sharding="fsdp", nproc_per_node=2)
    assert (
        train_handlers.checked_text(detect(), lambda cfg: "fine", DATA_SOURCES[0], None, "", ok)
        == "fine"
    )
