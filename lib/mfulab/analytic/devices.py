"""Dense peak FLOP/s, memory bandwidth and size per accelerator, read from ``devices.yaml``.

Every peak is the *dense* datasheet number (never the 2:4-sparsity one) and every entry names its
source, as torchtitan's ``get_peak_flops`` does.

How a device name finds its entry (:func:`device_spec`): the name is lower-cased and its whitespace
collapsed; it resolves when it *is* an entry's ``key`` (``h100-sxm``) or one of the exact device
names an entry lists (``nvidia h100 80gb hbm3``, what ``torch.cuda.get_device_name()`` reports).
There is no substring or prefix matching, so an ``NVIDIA H100 NVL`` can never land on the SXM
entry, nor a ``GH200`` on the H200's. Names listed as ambiguous in the table (``AMD Instinct
MI250X / MI250``) and unknown names are refused with :class:`ParameterError`, not guessed: pass
the key of the product you have, add an entry with its source, or use the measured matmul ceiling
(``timing.matmul_ceiling``), which is what the CPU profiles do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfulab.errors import ParameterError
from mfulab.units import GB, GIB, TERA

DEVICES_YAML = Path(__file__).with_name("devices.yaml")
# The dtypes a table entry may give a dense peak for. A key outside them (``fp8_sparse``, a
# 2:4-sparsity figure under any name) stops the table from loading: sparse peaks are refused.
DENSE_DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8", "fp6", "fp4")
# Block-scaled formats run on the tensor cores' FP8 and FP4 instructions: the datasheets list one
# FP8 rate and one FP4 rate (NVIDIA's Blackwell pages give "FP8/FP6" and "FP4"; the Blackwell Ultra
# technical blog calls its FP4 figure "dense NVFP4"), so MXFP8 reads the FP8 peak and NVFP4 and
# MXFP4 the FP4 peak.
DTYPE_ALIASES = {"mxfp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4", "mxfp6": "fp6"}


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    names: tuple[str, ...]  # exact device names (lower-cased) that resolve to this entry
    flops_per_s: dict  # dtype -> dense peak FLOP/s
    mem_bytes_per_s: float | None  # None where no figure is published
    memory_bytes: float | None
    source: str
    note: str = ""
    approximate: bool = False  # no vendor datasheet for this product (the note says what it rests on)
    # per-direction bytes/s inside a node and to other nodes, with their source (None: no figure)
    intra_node_bytes_per_s: float | None = None
    inter_node_bytes_per_s: float | None = None
    interconnect_source: str = ""
    # the best single dense GEMM measured on the device, FLOP/s per dtype (stas00's MAMF finder)
    mamf_flops_per_s: dict | None = None
    mamf_source: str = ""
    # FlashAttention-2's forward + backward FLOP/s over the dense bf16 peak, with its source (None: no figure)
    flash_attention_share_of_peak: float | None = None
    flash_attention_source: str = ""


def normalize_name(name: str) -> str:
    """The form names are compared in: lower-cased, runs of whitespace collapsed to one space."""
    return " ".join(name.split()).lower()


def _interconnect(entry: dict) -> dict:
    """The optional ``interconnect`` and ``mamf_tflops`` fields of one entry, in SI units."""
    net = entry.get("interconnect") or {}
    mamf = entry.get("mamf_tflops")
    return {
        "intra_node_bytes_per_s": net["intra_node_gb_per_s"] * GB if "intra_node_gb_per_s" in net else None,
        "inter_node_bytes_per_s": net["inter_node_gb_per_s"] * GB if "inter_node_gb_per_s" in net else None,
        "interconnect_source": net.get("source", ""),
        "mamf_flops_per_s": {d: v * TERA for d, v in mamf.items()} if mamf else None,
        "mamf_source": entry.get("mamf_source", ""),
        "flash_attention_share_of_peak": entry.get("flash_attention_share_of_peak"),
        "flash_attention_source": entry.get("flash_attention_source", ""),
    }


def _load_devices(path: Path = DEVICES_YAML) -> tuple[tuple[DeviceSpec, ...], dict[str, tuple[str, ...]]]:
    """The table in ``devices.yaml``: one :class:`DeviceSpec` per entry, and the ambiguous names
    (name -> candidate keys). Refuses a table in which a key or a name occurs twice, a name is
    not in normal form, or an ambiguous name points at an unknown key."""
    import yaml

    table = yaml.safe_load(path.read_text())
    specs = []
    for e in table["devices"]:
        unknown = set(e["tflops"]) - set(DENSE_DTYPES)
        if unknown:
            raise ValueError(
                f"{path.name}: {e['key']} gives peaks for {sorted(unknown)}; only dense peaks of "
                f"{', '.join(DENSE_DTYPES)} are allowed (a sparse figure is halved, not listed)"
            )
        mem_gb_per_s, memory_gib = e.get("mem_gb_per_s"), e.get("memory_gib")
        specs.append(
            DeviceSpec(
                key=e["key"],
                names=tuple(e.get("names") or ()),
                flops_per_s={dtype: tflops * TERA for dtype, tflops in e["tflops"].items()},
                mem_bytes_per_s=None if mem_gb_per_s is None else mem_gb_per_s * GB,
                memory_bytes=None if memory_gib is None else memory_gib * GIB,
                source=e["source"],
                note=e.get("note", ""),
                approximate=bool(e.get("approximate", False)),
                **_interconnect(e),
            )
        )
    ambiguous = {name: tuple(keys) for name, keys in (table.get("ambiguous") or {}).items()}
    seen: dict[str, str] = {}  # a name may repeat its own entry's key (gaudi2), nothing else
    for owner, names in [(s.key, dict.fromkeys((s.key, *s.names))) for s in specs] + [
        ("ambiguous", (n,)) for n in ambiguous
    ]:
        for name in names:
            if name != normalize_name(name):
                raise ValueError(f"{path.name}: {name!r} ({owner}) is not lower-cased with single spaces")
            if name in seen:
                raise ValueError(f"{path.name}: {name!r} occurs twice ({seen[name]} and {owner})")
            seen[name] = owner
    keys = {s.key for s in specs}
    for name, candidates in ambiguous.items():
        if not set(candidates) <= keys:
            raise ValueError(f"{path.name}: ambiguous {name!r} names unknown keys {set(candidates) - keys}")
    return tuple(specs), ambiguous


DEVICES, AMBIGUOUS = _load_devices()


_BY_NAME: dict[str, DeviceSpec] = {n: s for s in DEVICES for n in (s.key, *s.names)}


def known_devices() -> list[str]:
    return [d.key for d in DEVICES]


def _refusal(name: str, why: str) -> ParameterError:
    return ParameterError(
        f"no datasheet entry for device {name!r}: {why}. Known devices: {', '.join(known_devices())}. "
        "Names match exactly (lower-cased), nothing is guessed: pass the key of the product you have "
        "(e.g. device_spec('h100-sxm')), add an entry with its datasheet source to "
        "lib/mfulab/analytic/devices.yaml, "
        "or use the measured matmul ceiling (timing.matmul_ceiling)."
    )


def device_spec(name: str) -> DeviceSpec:
    """The table entry for a canonical key (``h200``) or an exact vendor device name
    (``NVIDIA H100 80GB HBM3``), by the rule in the module docstring. Ambiguous and unknown
    names raise :class:`ParameterError`."""
    normal = normalize_name(name)
    if normal in _BY_NAME:
        return _BY_NAME[normal]
    if normal in AMBIGUOUS:
        raise _refusal(name, f"the name fits more than one product ({', '.join(AMBIGUOUS[normal])})")
    raise _refusal(name, "it is neither a key nor a device name listed in devices.yaml")


def peak_flops_per_s(device: str, dtype: str = "bf16") -> float:
    """Dense datasheet peak FLOP/s of one ``device`` for ``dtype`` (:data:`DENSE_DTYPES`, or a
    block-scaled format of :data:`DTYPE_ALIASES`). A sparse figure is refused."""
    if "sparse" in dtype.lower():
        raise ParameterError(
            f"{dtype!r}: sparse peaks are refused; MFU's denominator is the dense peak (ask for "
            f"{dtype.lower().replace('_sparse', '').replace('sparse', '').strip('_-') or 'bf16'!r})"
        )
    spec = device_spec(device)
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype not in spec.flops_per_s:
        raise ParameterError(
            f"{spec.key} has no published dense {dtype} peak; known: {', '.join(spec.flops_per_s)}"
        )
    return spec.flops_per_s[dtype]


# ---------------------------------------------------------------------------- CPUs: a peak from the ISA
# No CPU datasheet in devices.yaml prints a FLOP/s figure; the peak is built from the core's
# floating-point units instead. The x86 server cores this course runs on have two FMA pipes per
# core: Intel since Haswell (Intel 64 and IA-32 Architectures Optimization Reference Manual, the
# Haswell and Skylake server chapters: FMA on ports 0 and 1; 512-bit on Xeon Platinum and Gold
# 6000 through the fused port 0+1 and port 5) and AMD since Zen 2 (Software Optimization Guides
# for AMD Family 17h Models 30h+ and Family 19h, pub. 56305 / 56665: FP pipes 0 and 1 do FMA,
# 256 bits wide). Zen and Zen+ (family 17h, models below 30h) have 128-bit pipes; Zen 4 runs
# AVX-512 on its 256-bit pipes (two halves per instruction); Zen 5 (family 1Ah) on desktop and
# server parts has full 512-bit pipes. The flags cannot tell Intel's one-512-bit-unit parts
# (client Ice / Tiger / Rocket Lake, Xeon Bronze and Silver, most Gold 5000) from the two-unit
# ones: there the two-unit peak is twice the true one. The assumption is named, and notebook 01
# shows the peak with one unit as well.
CPU_FMA_UNITS_PER_CORE = 2
CPU_FMA_SOURCE = (
    "2 FMA pipes per core: Intel Optimization Reference Manual (Haswell+, Skylake-SP Gold 6000 / "
    "Platinum), AMD Software Optimization Guides for Family 17h (Zen 2) and 19h"
)
FLOPS_PER_FMA = 2  # a fused multiply-add is a multiply and an add


def cpu_fma_width_bits(
    flags, *, vendor: str | None, cpu_family: int | None, cpu_model: int | None = None
) -> int:
    """The width of one FMA pipe in bits, from the ISA flags ``/proc/cpuinfo`` lists and the
    vendor's family and model numbers: Intel with AVX-512, 512; AMD Zen 5 (family 1Ah) with
    AVX-512, 512; AMD Zen / Zen+ (family 17h, models below 30h), 128; otherwise 256 with FMA
    (Zen 2 to Zen 4, Intel AVX2 cores); 128 without FMA (SSE: a separate multiply and add,
    counted as one FMA-width lane pair for a bound)."""
    flags = set(flags)
    amd = vendor == "AuthenticAMD"
    if "avx512f" in flags and (vendor == "GenuineIntel" or (amd and cpu_family == 0x1A)):
        return 512
    if amd and cpu_family == 0x17 and cpu_model is not None and cpu_model < 0x30:
        return 128  # Zen / Zen+: 256-bit instructions split over 128-bit pipes
    if "fma" in flags:
        return 256
    return 128


# The fastest boost clock of any AMD family-17h part with a model number below 30h (Zen, Zen+):
# Ryzen Threadripper 2950X, 4.4 GHz max boost (AMD's product specifications). A matmul ceiling
# that would need a faster clock on 128-bit pipes is not a Zen / Zen+ core.
ZEN_PLUS_MAX_BOOST_CLOCK_HZ = 4.4e9


def cpu_fma_width_checked(
    flags,
    *,
    vendor: str | None,
    cpu_family: int | None,
    cpu_model: int | None,
    cores: int,
    measured_flops_per_s: float | None,
    fma_units_per_core: int = CPU_FMA_UNITS_PER_CORE,
) -> tuple[int, str | None]:
    """:func:`cpu_fma_width_bits`, checked against the measured matmul ceiling: a hypervisor often
    reports a generic "AMD EPYC" with family 17h and model 1 (Zen 1, 128-bit pipes) for a newer
    core. No kernel beats the true peak, so when the ceiling would need a clock above any Zen /
    Zen+ part's boost (``ZEN_PLUS_MAX_BOOST_CLOCK_HZ``) at 128 bits, the model number is not the
    core's and the width is the family's other one, 256 (Zen 2). Returns the width and, when the
    check changed it, why."""
    width = cpu_fma_width_bits(flags, vendor=vendor, cpu_family=cpu_family, cpu_model=cpu_model)
    zen_plus_rule = vendor == "AuthenticAMD" and cpu_family == 0x17 and width == 128 and "fma" in set(flags)
    if not zen_plus_rule or not measured_flops_per_s:
        return width, None
    flops_per_cycle_all_cores = cpu_peak_flops_per_s(
        cores=cores, clock_hz=1.0, fma_width_bits=width, fma_units_per_core=fma_units_per_core
    )
    implied_clock_hz = measured_flops_per_s / flops_per_cycle_all_cores
    if implied_clock_hz <= ZEN_PLUS_MAX_BOOST_CLOCK_HZ:
        return width, None
    why = (
        f"the reported model {cpu_model:#x} (family 17h) reads as Zen / Zen+ with 128-bit pipes, but the "
        f"measured ceiling would then need {implied_clock_hz / 1e9:.1f} GHz, above the fastest such part's "
        f"boost ({ZEN_PLUS_MAX_BOOST_CLOCK_HZ / 1e9:.1f} GHz, Threadripper 2950X): the model number is a "
        "hypervisor's generic one, and the family's 256-bit pipes (Zen 2) are assumed"
    )
    return 256, why


def cpu_peak_flops_per_s(
    *,
    cores: int,
    clock_hz: float,
    fma_width_bits: int,
    fma_units_per_core: int = CPU_FMA_UNITS_PER_CORE,
    element_bytes: int = 4,
) -> float:
    """A CPU's theoretical dense peak, the figure a GPU datasheet prints and a CPU's does not:

        peak = cores × clock × FMA units per core × lanes × 2,   lanes = FMA width / (8 · element bytes)

    (fp32: 8 lanes per 256-bit FMA; an FMA is 2 FLOPs). ``clock_hz`` is the clock the kernel
    reports; cores that turbo higher under load can beat the peak computed with it, so a
    measured ceiling above this "peak" says the sustained clock is higher, not that the count
    is wrong."""
    if min(cores, clock_hz, fma_width_bits, fma_units_per_core, element_bytes) <= 0:
        raise ParameterError("cores, clock, FMA width, FMA units and element size must be positive")
    lanes_per_fma = fma_width_bits / (8 * element_bytes)
    flops_per_cycle_per_core = fma_units_per_core * lanes_per_fma * FLOPS_PER_FMA
    return cores * clock_hz * flops_per_cycle_per_core
