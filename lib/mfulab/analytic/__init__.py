"""Analytic models: numbers only, no torch or pandas at module level (FLOPs, memory, collectives,
parallel layouts, the one step model, device figures)."""
