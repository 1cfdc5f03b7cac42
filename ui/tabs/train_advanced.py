"""The Train tab's "Advanced" settings: LoRA, schedule, rows, cadences, processes and
preference tuning. Layout only; ``ui/tabs/train.py`` wires them."""

from __future__ import annotations

import gradio as gr

from finetune.config import COMPILE_SETTINGS, RunConfig
from ui.views import forms


def advanced_settings(d: RunConfig, adapter_choices: list[str]) -> dict:
    """The accordion's inputs, by their setting's name in ``forms.TRAIN_FIELDS``, showing ``d``."""
    c: dict = {}
    with gr.Accordion("Advanced: LoRA and training settings", open=False):
        c["compile"] = gr.Dropdown(
            list(COMPILE_SETTINGS),
            value=d.train.compile,
            label="Compile the decoder layers for the training step",
            info="auto: on a CUDA GPU (an unquantized base, without FSDP), where it "
            "runs steps faster after seconds of compiling; off on the CPU",
            elem_id="train-compile",
        )
        with gr.Row():
            c["r"] = gr.Number(d.lora.r, precision=0, label="LoRA rank r")
            c["alpha"] = gr.Number(d.lora.alpha, precision=0, label="LoRA alpha")
            c["dropout"] = gr.Number(d.lora.dropout, label="LoRA dropout")
            c["include_mlp"] = gr.Checkbox(d.lora.include_mlp, label="Adapt MLP layers too")
            c["top_layers"] = gr.Number(
                d.lora.top_layers,
                precision=0,
                elem_id="train-top-layers",
                label="Adapt only the last N blocks (0 = all; faster steps)",
            )
        with gr.Row():
            c["learning_rate"] = gr.Number(d.train.learning_rate, label="Learning rate")
            c["lr_schedule"] = gr.Dropdown(
                ["cosine", "linear", "constant"],
                value=d.train.lr_schedule,
                label="Schedule",
            )
            c["epochs"] = gr.Number(d.train.epochs, label="Epochs (time budget 0)")
            c["max_steps"] = gr.Number(
                d.train.max_steps,
                precision=0,
                label="Max steps (time budget 0; 0 = use epochs)",
                elem_id="train-steps",
            )
        with gr.Row():
            c["max_length"] = gr.Number(d.data.max_length, precision=0, label="Max length (tokens)")
            c["max_samples"] = gr.Number(
                d.data.max_samples,
                precision=0,
                label="Max rows (0 = all)",
                elem_id="train-samples",
            )
            c["val_fraction"] = gr.Number(d.data.val_fraction, label="Validation fraction")
            c["packing"] = gr.Checkbox(
                d.data.packing,
                label=("Pack rows (no padding; fastest on GPUs with the flash-attn package)"),
            )
        c["last_turn_only"] = gr.Checkbox(
            d.data.last_turn_only,
            label="Conversations: train the last answer only (default: every answer)",
        )
        c["system_prompt"] = gr.Textbox(label="System prompt (optional)")
        c["with_passages"] = gr.Dropdown(
            forms.PASSAGE_CHOICES,
            value=d.data.with_passages,
            label="Train with N past answers in each row's prompt (the row's own left "
            "out; rows run longer)",
            elem_id="train-with-passages",
        )
        c["passage_share"] = gr.Number(
            d.data.passage_share,
            label="Share of training rows shown them (1 = every row; the rest "
            "train on the question alone)",
            elem_id="train-passage-share",
        )
        with gr.Row():
            # Text boxes: a rendered Number box turns blank (auto) into 0 (off), so opening
            # this accordion switched validation, probes and checkpoints off.
            c["eval_every"] = gr.Textbox(
                _cadence(d.train.eval_every),
                placeholder="auto",
                label="Validate every N steps (blank = auto, 0 = at the end only)",
                elem_id="train-eval-every",
            )
            c["probe_every"] = gr.Textbox(
                _cadence(d.train.probe_every),
                placeholder="auto",
                label="Probe answers every N steps (blank = auto, 0 = at the end only)",
                elem_id="train-probe-every",
            )
            c["save_every"] = gr.Textbox(
                _cadence(d.train.save_every),
                placeholder="auto",
                label="Checkpoint every N steps (blank = auto, 0 = none)",
                elem_id="train-save-every",
            )
            c["seed"] = gr.Number(d.train.seed, precision=0, label="Seed")
        gr.Markdown(
            "Several processes or machines (torchrun). On several machines, start "
            "the same settings on each with its own node rank; node 0 hosts the "
            "rendezvous endpoint."
        )
        with gr.Row():
            c["nproc_per_node"] = gr.Number(
                d.run.nproc_per_node,
                precision=0,
                label="Processes per node",
                elem_id="train-nproc",
            )
            c["nnodes"] = gr.Number(
                d.run.nnodes, precision=0, label="Nodes", elem_id="train-nnodes"
            )
            c["node_rank"] = gr.Number(
                d.run.node_rank,
                precision=0,
                label="This node's rank",
                elem_id="train-node-rank",
            )
            c["rdzv_endpoint"] = gr.Textbox(
                d.run.rdzv_endpoint,
                label="Rendezvous endpoint (host:port of node 0)",
                elem_id="train-rdzv",
            )
            c["sharding"] = gr.Dropdown(
                forms.SHARDING_CHOICES,
                value=d.run.sharding,
                label="Sharding",
                elem_id="train-sharding",
            )
        gr.Markdown(
            "Preference tuning: the dataset holds pairs (prompt, chosen, rejected; "
            "the Review tab's export writes them) and the run continues an adapter "
            "from the shelf. Picking a method sets its measured learning rate, "
            "epochs and batch size; it trains them or until the time budget ends, "
            "whichever comes first."
        )
        with gr.Row():
            c["method"] = gr.Dropdown(
                forms.METHOD_CHOICES,
                value=d.train.method,
                label="Method",
                elem_id="train-method",
            )
            c["from_adapter"] = gr.Dropdown(
                [""] + adapter_choices,
                value="",
                allow_custom_value=True,
                label="Start from adapter (DPO / CPO / ORPO)",
                elem_id="train-from",
            )
            c["beta"] = gr.Number(
                d.train.beta,
                label=("Beta (DPO / CPO / ORPO; blank or 0: the method's measured default)"),
                elem_id="train-beta",
            )
    return c


def _cadence(value) -> str:
    """A cadence box's text: blank for auto (None), else the number of steps."""
    return "" if value is None else str(value)
