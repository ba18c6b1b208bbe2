"""Units, defined once: decimal (GB = 1e9, as datasheets and link speeds are quoted) and binary
(GiB = 2**30, as memory is allocated), and :func:`si` to print a quantity with an SI prefix."""

from __future__ import annotations

TERA = 1e12
GB = 1e9
MB = 1e6
GIB = 2**30
MIB = 2**20
KIB = 2**10


SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si_scale(value: float) -> tuple[float, str]:
    """The largest power of 1000 (and its prefix) not above ``|value|``: ``(1.0, "")`` below 1000."""
    return next(((f, p) for f, p in SI_PREFIXES if abs(value) >= f), (1.0, ""))


def si(value: float, unit: str, digits: int = 3) -> str:
    """``si(3.1e14, 'FLOP/s')`` → ``'310 TFLOP/s'``."""
    factor, prefix = si_scale(value)
    return f"{value / factor:.{digits}g} {prefix}{unit}"
