"""Terminal progress for `python -m finetune train`: a tqdm bar plus eval and probe lines."""

from __future__ import annotations


class ConsoleProgress:
    """An ``on_event`` sink that draws a tqdm bar."""

    def __init__(self):
        self.bar = None

    def __call__(self, e: dict) -> None:
        from tqdm import tqdm

        kind = e.get("type")
        if kind == "start":
            self.bar = tqdm(
                total=e["total_steps"], initial=e["start_step"], unit="step", dynamic_ncols=True
            )
            what = (
                f"{e['method']} on {e['pairs']} pairs"
                if "pairs" in e
                else f"{e['train_rows']} rows ({e['val_rows']} validation)"
            )
            tqdm.write(
                f"training {what} on {e['device']}, "
                f"{e['trainable_params']:,} trainable parameters, targets {', '.join(e['targets'])}"
            )
        elif kind == "progress" and self.bar is not None:
            self.bar.total = e["total_steps"]  # a time budget sizes its plan as it goes
            self.bar.n = e["step"]
            self.bar.set_postfix(
                loss=f"{e['loss']:.3f}", lr=f"{e['lr']:.2e}", tok_s=f"{e['tokens_per_second']:.0f}"
            )
            self.bar.refresh()
        elif kind == "eval":
            tqdm.write(
                f"step {e['step']}: validation loss {e['val_loss']:.4f}, perplexity "
                f"{e['val_perplexity']:.2f}"
            )
        elif kind == "probe":
            for a in e["answers"]:
                tqdm.write(f"  probe> {a['prompt']}\n     <  {a['answer'][:160]}")
        elif kind in ("status", "saved"):
            tqdm.write(e.get("message") or f"saved adapter {e.get('adapter')} at {e.get('path')}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
