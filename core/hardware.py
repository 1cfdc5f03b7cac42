"""What this machine can run: devices, precisions and quantizations, as plain data.

The UI uses this to offer only what works (and say why an option is off); config
validation uses it to refuse impossible combinations before anything is loaded.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from core.user_text import quote

PRECISIONS = ("fp32", "fp16", "bf16")
QUANTIZATIONS = ("none", "8bit", "4bit")


@dataclass
class DeviceInfo:
    """One device and what it supports.

    ``precisions`` and ``quantizations`` map each option to ``None`` when it works, or to a
    sentence saying why it is off. ``warnings`` holds options that work but are ill-advised.
    """

    name: str  # "cpu", "cuda:0", ...
    label: str  # human-readable, e.g. "NVIDIA H100 80GB HBM3 (79.2 GiB)"
    memory_gib: float
    precisions: dict[str, str | None] = field(default_factory=dict)
    quantizations: dict[str, str | None] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)

    def usable(self, option: str) -> bool:
        table = self.precisions if option in PRECISIONS else self.quantizations
        return table.get(option, "unknown option") is None


@dataclass
class Hardware:
    """All devices on this machine plus optional-library availability."""

    devices: list[DeviceInfo]
    cpu_threads: int
    bitsandbytes: str | None  # version, or None when not installed

    @property
    def has_cuda(self) -> bool:
        return any(d.name.startswith("cuda") for d in self.devices)

    @property
    def default_device(self) -> str:
        return "cuda:0" if self.has_cuda else "cpu"

    def device(self, name: str) -> DeviceInfo:
        """Look up a device by name; ``auto`` and ``cuda`` map to the default / first GPU."""
        if name == "auto":
            name = self.default_device
        if name == "cuda":
            name = "cuda:0"
        for d in self.devices:
            if d.name == name:
                return d
        have = ", ".join(d.name for d in self.devices)
        if name.startswith("cuda") and not self.has_cuda:
            raise ValueError(
                f"device {quote(name)} needs a CUDA GPU; this machine has none ({have})"
            )
        raise ValueError(f"no device {quote(name)} on this machine; available: {have}")

    def problems(self, device: str, precision: str, quantization: str) -> list[str]:
        """Every reason the combination cannot run here (empty when it can)."""
        try:
            dev = self.device(device)
        except ValueError as err:
            return [str(err)]
        out = []
        for option, table in ((precision, dev.precisions), (quantization, dev.quantizations)):
            if option not in table:
                out.append(f"unknown option {option!r}")
            elif table[option] is not None:
                out.append(table[option])
        return out


def _cpu_bf16_native() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _cpu_info(bnb: str | None) -> DeviceInfo:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    no_bnb = "4/8-bit quantization needs bitsandbytes (pip install bitsandbytes)"
    dev = DeviceInfo(
        name="cpu",
        label=f"CPU ({os.cpu_count()} cores, {mem:.0f} GiB)",
        memory_gib=round(mem, 1),
        precisions={
            "fp32": None,
            "fp16": "fp16 needs a CUDA GPU; this machine has none",
            "bf16": None,
        },
        quantizations={
            "none": None,
            "8bit": None if bnb else no_bnb,
            "4bit": None if bnb else no_bnb,
        },
    )
    from core.cpu_precision import bf16_note, cpu_trains_faster_in_bf16

    if not cpu_trains_faster_in_bf16():
        native = "with" if _cpu_bf16_native() else "without"
        dev.warnings["bf16"] = f"{bf16_note()} ({native} native bf16 instructions)"
    if bnb:
        dev.warnings["4bit"] = dev.warnings["8bit"] = (
            "bitsandbytes runs quantized layers on the CPU, but slower than fp32; "
            "use it to save memory, not time"
        )
    return dev


def _cuda_info(index: int, bnb: str | None) -> DeviceInfo:
    import torch

    props = torch.cuda.get_device_properties(index)
    mem = props.total_memory / 2**30
    major = props.major
    bf16_ok = major >= 8
    no_bnb = "4/8-bit quantization needs bitsandbytes (pip install bitsandbytes)"
    return DeviceInfo(
        name=f"cuda:{index}",
        label=f"{props.name} ({mem:.1f} GiB, compute {props.major}.{props.minor})",
        memory_gib=round(mem, 1),
        precisions={
            "fp32": None,
            "fp16": None
            if major >= 6
            else f"fp16 needs compute capability 6.0+; {props.name} has {major}.{props.minor}",
            "bf16": None
            if bf16_ok
            else f"bf16 needs an Ampere or newer GPU (compute 8.0+); {props.name} has "
            f"{major}.{props.minor}",
        },
        quantizations={
            "none": None,
            "8bit": None if bnb else no_bnb,
            "4bit": None if bnb else no_bnb,
        },
    )


@functools.lru_cache(maxsize=1)
def detect() -> Hardware:
    """Inspect the machine once per process (torch is imported here, not at module load)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:  # the metadata, not an import: a process may keep it out (core/optional_imports.py)
        bnb = version("bitsandbytes")
    except PackageNotFoundError:
        bnb = None
    devices = [_cpu_info(bnb)]
    if torch.cuda.is_available():
        devices += [_cuda_info(i, bnb) for i in range(torch.cuda.device_count())]
    return Hardware(devices=devices, cpu_threads=torch.get_num_threads(), bitsandbytes=bnb)
