"""Study ``compare`` (notebook 10): every machine's metrics side by side.

It measures nothing: each study declares its metrics (key, unit, label) in its ``study.yaml``,
writes them flat into ``results/<machine>/<study>/metrics.json``, and ``analysis`` reads
them for every machine found under ``results/``. Results produced elsewhere can be dropped
into ``results/<machine>/`` and compared as long as their ``metrics.json`` carries those keys;
a missing study or key shows as *missing*. ``across``: one claim judged by several chapters;
``published``: cited reference measurements of other machines; ``mfu_gap``: why chapters 01 and
07 read two MFUs of one box; ``hosts``: result folders of one host run on other cores;
``drift``: how two machines' numbers are told apart; ``scaling``: what deviates per core;
``figures``: the ceilings figure; ``published_data``: rows computed from publications alone.
"""
