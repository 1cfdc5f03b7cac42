from core.hardware import PRECISIONS, QUANTIZATIONS, detect


def test_cpu_is_always_present_and_fp32_works():
    hw = detect()
    cpu = hw.device("cpu")
    assert cpu.usable("fp32") and cpu.usable("none")
    assert set(cpu.precisions) == set(PRECISIONS) and set(cpu.quantizations) == set(QUANTIZATIONS)


def test_impossible_combinations_are_explained():
    hw = detect()
    if hw.has_cuda:
        return
    assert hw.problems("cpu", "fp16", "none") == ["fp16 needs a CUDA GPU; this machine has none"]
    (msg,) = hw.problems("cuda:0", "bf16", "none")
    assert "needs a CUDA GPU" in msg
    from core.cpu_precision import cpu_trains_faster_in_bf16

    # bf16 is warned about only where it was measured not clearly faster (core/cpu_precision.py)
    assert ("bf16" in hw.device("cpu").warnings) == (not cpu_trains_faster_in_bf16())


def test_bitsandbytes_availability_matches_the_quantization_options():
    hw = detect()
    cpu = hw.device("cpu")
    assert cpu.usable("4bit") == (hw.bitsandbytes is not None)
