"""mfulab: where a training step's time goes — analytic models and micro-benchmarks
behind the study notebooks (docs/architecture.md describes the layout)."""

__version__ = "0.1.0"
