"""mfulab: where a training step's time goes — analytic models and micro-benchmarks
behind the study notebooks (see DESIGN.md for the layout)."""

__version__ = "0.1.0"
