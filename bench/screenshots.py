"""`python -m bench screenshots`: the README's pictures, taken from the real app in Chromium.

Starts ``app.py`` on the default model in a fresh temporary home, trains a short run on the
demo data from the Train tab (a few steps, not the 10-minute default), then compares the new
adapter with the base model; the Train tab after the run and the Compare tab with its answers
are saved as PNGs (``docs/img/train.png``, ``docs/img/compare.png``). About 3-5 minutes on
2 cores, most of it the first start's model conversion and the training.

    python -m bench screenshots                          # into docs/img/
    python -m bench screenshots --models outputs          # reuse a home's converted model

Needs Playwright for Python and Debian's Chromium (``apt-get install chromium``). Exit status
0 when both pictures were written, 1 when the app or a step failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 860}


def parse(argv: list[str]) -> argparse.Namespace:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m bench screenshots", description=__doc__.splitlines()[0]
    )
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    p.add_argument(
        "--out", default=str(REPO / "docs" / "img"), help="folder for train.png and compare.png"
    )
    p.add_argument(
        "--steps", type=int, default=12, help="training steps of the short run (default 12)"
    )
    p.add_argument(
        "--models",
        default="",
        help="a TuneDesk home whose models/ holds the converted "
        "default model, linked in to skip the first-start conversion",
    )
    return p.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(home: Path, models: str) -> tuple[subprocess.Popen, str]:
    """``app.py`` on the default model in ``home``, listening; its URL."""
    if models:
        (home / "models").mkdir(parents=True, exist_ok=True)
        for folder in (Path(models) / "models").iterdir():
            if folder.is_dir() and not folder.name.startswith("."):
                (home / "models" / folder.name).symlink_to(folder.resolve())
    port = _free_port()
    env = {**os.environ, "TUNEDESK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(home / "app.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}/"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("the app did not start: " + (home / "app.log").read_text()[-1500:])


def wait_text(page, selector: str, words: tuple[str, ...], timeout: float) -> str:
    """The text of ``selector`` once it holds one of ``words``."""
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.inner_text(selector)
        if any(w in text for w in words):
            return text
        time.sleep(0.5)
    raise RuntimeError(f"{selector} never showed {' or '.join(words)}; it said: {text[:300]}")


def train_short_run(page, steps: int) -> str:
    """Train ``steps`` steps of 4 rows on the demo data from the Train tab; the result line."""
    page.wait_for_selector("#train-start")
    page.get_by_text("Advanced: LoRA and training settings").click()
    fields = (
        ("#train-budget", "0"),
        ("#train-samples", "64"),
        ("#train-steps", str(steps)),
        ("#train-eval-every", str(max(1, steps // 3))),
        ("#train-name", "demo-support"),
    )
    for field, value in fields:
        box = page.locator(f"{field} input, {field} textarea").first
        box.fill(value)
        box.press("Tab")
    page.get_by_label("Batch size", exact=True).fill("4")
    page.get_by_label("Batch size", exact=True).press("Tab")
    page.click("#train-start")
    wait_text(page, "#train-message", ("Started run",), 120)
    result = wait_text(page, "#train-result", ("is on the shelf", "failed"), 1200)
    if "is on the shelf" not in result:
        raise RuntimeError(f"the training run failed: {result[:300]}")
    page.get_by_text("Advanced: LoRA and training settings").click()  # fold it away for the picture
    page.wait_for_timeout(3000)  # the last poll draws the curve and the probe answers
    return result


def compare_with_base(page) -> str:
    """Open Compare from the Train tab's button and compare the demo prompt; the timing line."""
    page.click("#train-to-compare")
    page.wait_for_timeout(1500)
    page.click("#compare-go")
    timing = wait_text(page, "#compare-timing", ("answers decoded",), 600)
    page.wait_for_timeout(1000)
    return timing


def shoot(page, top: str | None, bottom: str, path: Path) -> None:
    """A picture of the page from the top of ``top`` (None: the page's top) down to the bottom
    of ``bottom``, in page coordinates (the page may be scrolled)."""
    scroll = page.evaluate("window.scrollY")
    y = page.locator(top).bounding_box()["y"] + scroll - 12 if top else 0
    box = page.locator(bottom).bounding_box()
    height = box["y"] + scroll + box["height"] + 12 - y
    page.screenshot(
        path=str(path),
        full_page=True,
        clip={"x": 0, "y": y, "width": VIEWPORT["width"], "height": height},
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.steps < 1:
        print("--steps must be at least 1", file=sys.stderr)
        return 2
    if args.models and not (Path(args.models) / "models").is_dir():
        print(
            f"--models {args.models} has no models/ folder (give a TuneDesk home)", file=sys.stderr
        )
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print(
            "Playwright for Python is not installed (it is in requirements.txt: make setup)",
            file=sys.stderr,
        )
        return 2
    if not Path(CHROMIUM).exists():
        print("Debian's Chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="tunedesk-screenshots-"))
    proc = None
    try:
        proc, url = start_app(home, args.models)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
            page.set_default_timeout(120_000)
            page.goto(url)
            print(train_short_run(page, args.steps).splitlines()[0])
            # the Train tab's run: its buttons, progress, loss curve, probe answers and result
            shoot(page, "#train-check", "#train-to-compare", out / "train.png")
            print(compare_with_base(page))
            shoot(page, None, "#compare-timing", out / "compare.png")
            browser.close()
    except RuntimeError as err:
        print(f"screenshots failed: {err}", file=sys.stderr)
        return 1
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
    for name in ("train.png", "compare.png"):
        print(f"{out / name}: {(out / name).stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
