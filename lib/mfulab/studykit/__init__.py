"""What every study builds on: the registry, typed parameters, verdicts and claims tables, plots."""
