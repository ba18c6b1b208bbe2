"""What every study builds on: the registry of studies (``registry``), typed parameters and
their mixins (``params``), the first notebook cell (``notebook``), what ``claims.outcome``
returns (``outcome``), verdicts, their rules and the claims tables (``verdicts``), the note of
``make stability`` under a claims table (``stability_report``) and figures (``plots``)."""
