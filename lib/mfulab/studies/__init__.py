"""The studies, one package each (``<id>/study.yaml`` declares it); :mod:`mfulab.studykit.registry`
finds them."""
