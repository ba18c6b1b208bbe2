"""Measurements on this machine: timing, calibration, memory and operator profiles, collectives,
the reference GPT, corpus and storage formats, checkpoint writes, the host, torchrun jobs."""
