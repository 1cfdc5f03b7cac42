"""The CUDA-path fixes that a CPU can check: 8-bit log noise, checkpointing kind, GPU count,
free memory, resume with map_location, out-of-memory outside the forward pass, the dry-run child."""

import logging

import pytest
import torch
from run_helpers import tiny_run_config

import finetune  # noqa: F401  (installs the bitsandbytes log filter)
import finetune.train.loop as loop_mod
from core import hardware
from finetune.config import LoraArgs, validate
from finetune.train import oom, train
from finetune.train.dryrun_process import dry_run_in_child, parse_report

GIB = 2**30


def _fake_gpu_hardware(gpus: int, memory_gib: float = 80.0) -> hardware.Hardware:
    cuda = [
        hardware.DeviceInfo(
            f"cuda:{i}",
            f"NVIDIA H100 ({memory_gib} GiB)",
            memory_gib,
            {"fp32": None, "fp16": None, "bf16": None},
            {"none": None, "8bit": None, "4bit": None},
        )
        for i in range(gpus)
    ]
    return hardware.Hardware(
        devices=[hardware._cpu_info(None), *cuda], cpu_threads=2, bitsandbytes="0.50.2"
    )


def test_the_int8_cast_notice_is_dropped_and_other_bitsandbytes_warnings_kept(caplog):
    log = logging.getLogger("bitsandbytes.autograd._functions")
    with caplog.at_level(logging.WARNING, logger=log.name):
        log.warning(
            "MatMul8bitLt: inputs will be cast from %s to float16 during quantization",
            torch.bfloat16,
        )
        log.warning("something else went wrong")
    assert [r.getMessage() for r in caplog.records] == ["something else went wrong"]


def test_quantized_runs_checkpoint_without_reentrancy(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    from finetune.train.model_loading import apply_lora

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model.is_loaded_in_8bit = (
        True  # what bitsandbytes loading marks; peft's k-bit preparation reads it
    )
    model = apply_lora(
        model, "llama", LoraArgs(r=4, alpha=8), quantization="8bit", gradient_checkpointing=True
    )
    funcs = [
        m._gradient_checkpointing_func
        for m in model.modules()
        if getattr(m, "gradient_checkpointing", False)
    ]
    assert funcs and all(f.keywords.get("use_reentrant") is False for f in funcs)


def test_more_processes_than_gpus_is_refused_before_loading(tiny_llama_dir):
    cfg = tiny_run_config(tiny_llama_dir, device="cuda")
    cfg.run.nproc_per_node = 2
    assert any(
        "2 processes per node need 2 GPUs; this machine has 1" in p
        for p in validate(cfg, _fake_gpu_hardware(1))
    )
    assert not any("GPUs" in p for p in validate(cfg, _fake_gpu_hardware(2)))
    cfg.run.nproc_per_node = 1  # no GPU at all: the device check names it, not "0 or fewer"
    none = validate(cfg, _fake_gpu_hardware(0))
    assert any("needs a CUDA GPU" in p for p in none) and not any("or fewer" in p for p in none)
    cfg.run.nproc_per_node = 2
    cfg.train.device = "cpu"  # CPU ranks share the cores: no GPU count applies
    assert not any("GPUs" in p for p in validate(cfg, _fake_gpu_hardware(0)))


def test_the_estimate_compares_with_free_not_total_gpu_memory(tiny_llama_dir, monkeypatch):
    from core import gpu
    from core.models import resolve
    from finetune.train.dryrun import estimate_memory

    monkeypatch.setattr(hardware, "detect", lambda: _fake_gpu_hardware(1))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: 0)
    cfg = tiny_run_config(tiny_llama_dir, device="cuda")
    monkeypatch.setattr(gpu, "free_memory_gib", lambda d: 79.0)
    assert estimate_memory(cfg, resolve(str(tiny_llama_dir)))["fits"]
    monkeypatch.setattr(
        gpu, "free_memory_gib", lambda d: 0.5
    )  # the chat model or another job holds the rest
    est = estimate_memory(cfg, resolve(str(tiny_llama_dir)))
    assert not est["fits"] and est["free_gib"] == 0.5 and "0.5 GiB free" in est["warning"]


def test_resume_loads_onto_the_cpu_first_and_restores_scaler_and_rng(
    tiny_llama_dir, tmp_path, monkeypatch
):
    from transformers import AutoModelForCausalLM

    from finetune.train.model_loading import apply_lora
    from finetune.train.saving import load_checkpoint, save_checkpoint

    def fresh():
        torch.manual_seed(0)
        model = apply_lora(
            AutoModelForCausalLM.from_pretrained(tiny_llama_dir), "llama", LoraArgs(r=4, alpha=8)
        )
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    model, opt, sched = fresh()
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**7)
    torch.manual_seed(123)
    ckpt = save_checkpoint(tmp_path, 1, model, opt, sched, scaler=scaler)
    expected_draw = torch.rand(3)
    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(k) or real_load(*a, **k))
    model2, opt2, sched2 = fresh()
    scaler2 = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    assert load_checkpoint(ckpt, model2, opt2, sched2, scaler2) == 1
    assert loads[0]["map_location"] == "cpu"  # not cuda:0 in every DDP rank
    assert scaler2.get_scale() == 2.0**7 and torch.equal(torch.rand(3), expected_draw)
    state = opt2.state_dict()["state"]
    assert state and all(v["exp_avg"].device.type == "cpu" for v in state.values())


def test_oom_helpers_skip_retry_and_reraise(monkeypatch):
    events, released = [], []
    monkeypatch.setattr(oom, "release_memory", released.append)
    emit = lambda kind, **d: events.append((kind, d["message"]))  # noqa: E731

    def boom():
        raise RuntimeError(
            "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
        )

    assert oom.skip_on_oom(boom, "validation", "cuda:0", emit) is None
    assert events[0][0] == "warning" and "validation ran out of GPU memory" in events[0][1]
    with pytest.raises(RuntimeError, match="shapes"):
        oom.skip_on_oom(
            lambda: (_ for _ in ()).throw(RuntimeError("shapes differ")), "probes", "cuda:0", emit
        )
    tries = []

    def step_once_short_of_memory():
        tries.append(1)
        if len(tries) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return "stepped"

    assert (
        oom.optimizer_step_with_retry(step_once_short_of_memory, "cuda:0") == "stepped"
        and len(tries) == 2
    )
    with pytest.raises(torch.OutOfMemoryError, match="optimizer step even after"):
        oom.optimizer_step_with_retry(boom, "cuda:0")
    assert released == ["cuda:0"] * 3


def test_probes_that_run_out_of_memory_do_not_end_the_run(tiny_llama_dir, home, monkeypatch):
    import finetune.train.probes as probes_mod

    def no_memory(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(probes_mod, "answer_probes", no_memory)
    events = []
    result = train(
        tiny_run_config(tiny_llama_dir, max_steps=2, probe_every=1), on_event=events.append
    )
    assert result.status == "done" and result.adapter_dir is not None
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert len(warnings) == 2 and all("probes ran out of GPU memory" in w for w in warnings)


def test_dry_run_report_parsing():
    report = parse_report(0, 'loading...\n{\n  "seconds_per_step": 1.5\n}\n', "")
    assert report == {"seconds_per_step": 1.5}
    with pytest.raises(ValueError, match="batch size must be"):
        parse_report(
            2,
            "",
            "error: the training settings cannot run here:\n  - batch size must be 1 to 4096\n",
        )
    with pytest.raises(RuntimeError, match="the dry run failed: KeyError: 'x'"):
        parse_report(1, "", "Traceback (most recent call last):\nKeyError: 'x'\n")


def test_the_dry_run_runs_in_a_child_and_waits_for_no_training_run(
    tiny_llama_dir, home, monkeypatch
):
    from finetune.train import runner

    cfg = tiny_run_config(tiny_llama_dir)
    monkeypatch.setattr(runner, "any_running", lambda: True)
    with pytest.raises(RuntimeError, match="a training run is active"):
        dry_run_in_child(cfg)
    monkeypatch.setattr(runner, "any_running", lambda: False)
    report = dry_run_in_child(cfg)
    assert (
        report["seconds_per_step"] > 0
        and report["peak_memory_gib"] > 0
        and report["total_steps"] == 3
    )
    assert report["device"] == "cpu" and report["estimate"]["free_gib"] > 0
    assert not (home / "adapters").exists() or not any((home / "adapters").iterdir())


def test_loop_keeps_the_fp16_scaler_in_checkpoints(tiny_llama_dir, home, monkeypatch):
    scalers = []
    real = loop_mod.make_scaler

    def cpu_scaler(device, precision):
        s = torch.amp.GradScaler("cpu", init_scale=2.0**5)
        scalers.append(s)
        return s if real(device, precision) is None else real(device, precision)

    monkeypatch.setattr(loop_mod, "make_scaler", cpu_scaler)
    cfg = tiny_run_config(tiny_llama_dir, max_steps=2, save_every=1)
    cfg.run.run_dir = str(home / "runs" / "scaled")
    assert train(cfg).status == "done"
    state = torch.load(
        next((home / "runs" / "scaled" / "checkpoints").iterdir()) / "trainer_state.pt",
        weights_only=False,
    )
    assert state["scaler"]["scale"] == scalers[0].get_scale() and state["cuda_rng"] is None
