"""Typed study parameters: one frozen dataclass per study, every parameter declared once.

A study's parameters are a subclass of :class:`StudyParams` whose fields are declared with
:func:`param` — the default, the unit and the meaning in one place::

    @dataclass(frozen=True)
    class Params(StudyParams):
        seq_len: int = param(256, "tokens per sequence", unit="tokens")

        def check(self):
            self.require_positive("seq_len")

Constructing an instance validates it: the declared type of every field is checked first
(``int`` refuses ``True`` and ``2.5``; ``tuple[int, ...]`` takes a YAML list), then the
class's own :meth:`check`. Errors are :class:`ParameterError` and name the parameter, the
value and what is valid. The defaults are the laptop (``cpu``) profile, so a notebook
opened by hand runs with them and ``studies/<id>/cpu.yaml`` holds only what differs.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field

from mfulab.errors import ParameterError

RUNNER_PARAMS = ("from_dir", "out_dir")  # injected by the runner next to the study parameters
DTYPES = ("fp32", "bf16", "fp16")  # a training step's precision (bf16, fp16: autocast, timing.autocast)


def param(
    default,
    help: str,
    *,
    unit: str = "",
    positive: bool = False,
    non_negative: bool = False,
    choices: tuple | None = None,
):
    """A study parameter: its default (lists become tuples), meaning and unit; ``positive`` or
    ``non_negative`` ask for that check of the value (of every item of a list, which must
    then be non-empty), ``choices`` for membership."""
    if isinstance(default, list):
        default = tuple(default)
    bound = "positive" if positive else "non_negative" if non_negative else None
    return field(default=default, metadata={"help": help, "unit": unit, "bound": bound, "choices": choices})


def calibration_param():
    """The ``calibration`` parameter of every study that reads this machine's calibration."""
    from mfulab.measure.calibration import CHOICES

    return param(
        "auto",
        "this machine's calibration setting: auto (cpu, or gpu on CUDA), cpu, gpu or smoke",
        choices=CHOICES,
    )


def _type_ok(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple:
        (item, *_rest) = typing.get_args(hint)
        return isinstance(value, tuple) and all(_type_ok(v, item) for v in value)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    return True


def _type_name(hint) -> str:
    if typing.get_origin(hint) is tuple:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    return {int: "integer", float: "number", str: "string", bool: "true/false"}.get(hint, str(hint))


@dataclass(frozen=True)
class StudyParams:
    """Base of every study's parameters (see the module docstring)."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                value = tuple(value)
                object.__setattr__(self, f.name, value)
            if not _type_ok(value, hints[f.name]):
                raise ParameterError(f"{f.name} must be a {_type_name(hints[f.name])}, got {value!r}")
            if f.metadata.get("choices"):
                self.require_choice(f.name, f.metadata["choices"])
            if f.metadata.get("bound") == "positive":
                self.require_positive(f.name)
            elif f.metadata.get("bound") == "non_negative":
                self.require_non_negative(f.name)
        self.check()

    def check(self) -> None:
        """Range and consistency checks of one study (override); pure: no torch, no device."""

    def prepare(self) -> None:
        """Checks that depend on this machine, such as resolving ``device: auto`` (override).
        Run before measuring, never when analysing measurements taken elsewhere."""

    def predicted_peak_bytes(self) -> float | None:
        """Upper estimate of the device memory this profile's measurement needs at its largest
        point (override where a study can run out of a card's memory); ``None``: not modelled.
        ``make check-gpu`` refuses a profile whose estimate passes 90% of the card."""
        return None

    def prepared(self):
        """A copy on which :meth:`prepare` ran (``device`` resolved, machine limits checked)."""
        copy = dataclasses.replace(self)
        copy.prepare()
        return copy

    # ------------------------------------------------------------------ construction
    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict | None = None):
        """Defaults updated with ``values`` (a profile YAML, ``-p`` overrides); an unknown
        name is refused with the list of valid ones (papermill would inject it silently)."""
        values = {k: v for k, v in (values or {}).items() if k not in RUNNER_PARAMS}
        unknown = [k for k in values if k not in cls.names()]
        if unknown:
            raise ParameterError(f"unknown parameters: {', '.join(unknown)}; valid: {', '.join(cls.names())}")
        return cls(**values)

    def to_dict(self) -> dict:
        """Plain values (tuples as lists) for JSON, YAML and papermill."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def schema(cls) -> list[dict]:
        """Every parameter with its type, default, unit and meaning (for docs and notebooks)."""
        hints = typing.get_type_hints(cls)
        return [
            {
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": f.default,
                "unit": f.metadata.get("unit", ""),
                "meaning": f.metadata.get("help", ""),
            }
            for f in dataclasses.fields(cls)
        ]

    # ------------------------------------------------------------------ checks for check()
    def require(self, name: str, ok: bool, what: str) -> None:
        """Refuse ``name`` unless ``ok``; ``what`` says what is valid."""
        if not ok:
            raise ParameterError(f"{name} must be {what}, got {getattr(self, name)!r}")

    def require_positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            self.require(
                name,
                all(v > 0 for v in values) and len(values) > 0,
                "positive" if not isinstance(value, tuple) else "a non-empty list of positive values",
            )

    def require_non_negative(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            self.require(name, all(v >= 0 for v in values), "zero or positive")

    def require_choice(self, name: str, choices) -> None:
        value = getattr(self, name)
        values = value if isinstance(value, tuple) else (value,)
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise ParameterError(
                f"{name} must be {'one of' if not isinstance(value, tuple) else 'a non-empty list from'} "
                f"{', '.join(map(str, choices))}; got {value!r}"
            )

    def require_dtype_on_device(self, name: str = "dtype") -> None:
        """After :meth:`resolve_device`: fp16 is refused on CPU (not every kernel has it there)."""
        self.require(
            name,
            not (self.device == "cpu" and getattr(self, name) == "fp16"),
            "fp32 or bf16 on CPU (fp16 is not supported there)",
        )

    def resolve_device(self, name: str = "device") -> None:
        """``auto`` → ``cuda`` or ``cpu``; ``cuda`` without CUDA is refused before any work."""
        from mfulab.measure.host import resolve_device

        object.__setattr__(self, name, resolve_device(getattr(self, name)))


class OneDevice:
    """Mixed in before :class:`StudyParams` by a study that measures on one device (fields
    ``device`` and ``dtype``): ``prepare`` resolves the device and refuses a dtype it cannot run."""

    def prepare(self) -> None:
        self.resolve_device()
        self.require_dtype_on_device()


class PresetModel:
    """Mixed in before :class:`StudyParams` by a study that times the reference GPT (fields
    ``preset`` and ``seq_len``): ``model_config`` is the preset at the profile's sequence length."""

    def model_config(self, **overrides):
        from mfulab.analytic.config import preset

        return preset(self.preset).with_(seq_len=self.seq_len, **overrides)
