"""Which host each machine's results came from (its runs' ``env.json`` fingerprints), so that
two result folders of one host run on different cores are read as that, not as two machines."""

from __future__ import annotations

from pathlib import Path

from mfulab import results

RANK_PARAMS = ("nproc", "ranks")  # the studies' names for the processes a run launches (and any "*_ranks")


def _rank_counts(params: dict) -> list[int]:
    """Every process count a run's parameters name: ``nproc``, ``ranks`` and any ``*_ranks`` (a
    list, such as the pipeline stages measured, counts each of its entries)."""
    counts = []
    for key, value in params.items():
        if key in RANK_PARAMS or key.endswith("_ranks"):
            values = value if isinstance(value, list | tuple) else [value]
            counts += [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return counts


def ranks_per_study(results_root, machine: str) -> dict:
    """``{study: the most processes one of its runs launched}`` for the studies of a machine that
    launch several (their ``env.json`` params: ``nproc``, ``ranks``, ``*_ranks``)."""
    out = {}
    for path in sorted(Path(results_root, machine).glob("*/" + results.ENV)):
        params = results.read_json(path).get("params") or {}
        n = max(_rank_counts(params), default=0)
        if n > 1:
            out[path.parent.name] = n
    return out


def oversubscribed(records, study: str) -> list[str]:
    """The machines whose run of ``study`` launched more ranks than the cores it could use."""
    hosts, ranks = records.get("hosts") or {}, records.get("ranks") or {}
    return [
        name
        for name, h in hosts.items()
        if h.get("cpu_count") and (ranks.get(name) or {}).get(study, 0) > h["cpu_count"]
    ]


def not_comparable(records, studies: list[str]) -> list[str]:
    """The machines on which a number that ``studies`` all wrote (one value: the comparison merges
    a key only where they agree) comes from oversubscribed runs alone: a machine where any of them
    ran uncrowded has the number from that run."""
    crowded = [set(oversubscribed(records, s)) for s in studies]
    return sorted(set.intersection(*crowded)) if crowded else []


RATES = ("FLOP/s", "B/s", "tokens/s")


def per_core_scaling(values: dict, unit: str, records) -> str:
    """Among machines of one kind of host with different usable cores (an affinity mask), a rate's
    ratio between the machine with the most cores and the one with the fewest, over the ratio of
    their cores (a time's inverted): 1 is linear scaling, above 1 super-linear. Machines of other
    hosts are left out. Empty for any other unit or fewer than two numbers of one host."""
    hosts = records.get("hosts") or {}
    if unit not in (*RATES, "s"):
        return ""
    numbers = {
        m: float(v)
        for m, v in values.items()
        if isinstance(v, int | float)
        and not isinstance(v, bool)
        and v > 0
        and hosts.get(m, {}).get("cpu_count")
    }
    # only machines of one kind of host (one device model and node size) scale by their cores;
    # with several kinds, the kind that has two or more of the numbers (the first such)
    kinds: dict = {}
    for m in numbers:
        kinds.setdefault((hosts[m].get("device_name"), hosts[m].get("cpu_count_node")), []).append(m)
    group = next((ms for ms in kinds.values() if len(ms) >= 2), [])
    numbers = {m: numbers[m] for m in group}
    if len(numbers) < 2:
        return ""
    few = min(numbers, key=lambda m: hosts[m]["cpu_count"])
    many = max(numbers, key=lambda m: hosts[m]["cpu_count"])
    cores = hosts[many]["cpu_count"] / hosts[few]["cpu_count"]
    if cores == 1:
        return ""
    ratio = numbers[many] / numbers[few] if unit in RATES else numbers[few] / numbers[many]
    return f"{ratio / cores:.2f}"


def oversubscribed_note(records) -> str:
    """Machines whose multi-rank studies launched more processes than the cores they could use:
    those ranks took turns on the cores, so their step, overlap and communication figures are an
    oversubscribed run's, not a smaller machine's."""
    hosts, ranks = records.get("hosts") or {}, records.get("ranks") or {}
    notes = []
    for name, h in hosts.items():
        cores = h.get("cpu_count")
        crowded = {s: n for s, n in (ranks.get(name) or {}).items() if cores and n > cores}
        if crowded:
            studies = ", ".join(f"{s} ({n} ranks)" for s, n in crowded.items())
            notes.append(f"`{name}` ran {studies} on {cores} usable core{'s' if cores > 1 else ''}")
    if not notes:
        return ""
    return (
        "**Oversubscribed.** "
        + "; ".join(notes)
        + ": the ranks took turns on the cores, so those studies' step, overlap and communication "
        "figures there are an oversubscribed run's, not what a machine with that many cores per rank "
        "would show."
    )


def host(results_root, machine: str) -> dict:
    """What a machine's runs say about its host (the first ``env.json`` fingerprint found): the
    CPU or GPU model, the cores the run could use and the node's cores."""
    for path in sorted(Path(results_root, machine).glob("*/" + results.ENV)):
        f = results.read_json(path).get("fingerprint") or {}
        if f:
            keys = (
                "device_name",
                "cpu_model",
                "cpu_count",
                "cpu_count_node",
                "device_count",
                "torch_num_threads",
            )
            return {k: f.get(k) for k in keys}
    return {}


def same_host_note(records) -> str:
    """Machines whose runs name the same device model and node size but ran on different numbers of
    cores (an affinity mask: ``taskset``, Slurm's ``--cpus-per-task``): one host restricted two
    ways, whose differences are the cores a run may use, not the hardware."""
    hosts = records.get("hosts") or {}
    groups = {}
    for name, h in hosts.items():
        if h.get("device_name") and h.get("cpu_count_node"):
            groups.setdefault((h["device_name"], h["cpu_count_node"]), []).append(name)
    notes = [
        " and ".join(f"`{n}`" for n in names)
        + f" ran on the same kind of host ({device}, {node} cores a node) with "
        + " and ".join(str(hosts[n]["cpu_count"]) for n in names)
        + " usable cores (an affinity mask)"
        + (
            " and "
            + " and ".join(str(hosts[n]["torch_num_threads"]) for n in names)
            + " torch threads per process"
            if all(hosts[n].get("torch_num_threads") for n in names)
            else ""
        )
        + ": their differences are what the cores a run may use change, not the hardware"
        for (device, node), names in groups.items()
        if len(names) > 1 and len({hosts[n]["cpu_count"] for n in names}) > 1
    ]
    if not notes:
        return ""
    only_one_host = len(groups) == 1 and len(next(iter(groups.values()))) == len(hosts)
    return (
        "**Same host, other cores.** "
        + "; ".join(notes)
        + "."
        + (
            " So this chapter compares two core budgets of one CPU, not two machines: no accelerator "
            "or cluster has run the course yet (`docs/first-gpu-run.md` is the first GPU run), and "
            "until one does, what it can show across hardware is this CPU against the published "
            "measurements of other machines (below)."
            if only_one_host
            else ""
        )
    )


def revisions(results_root, machine: str) -> dict:
    """``{study: code}`` of a machine's results: the digest of the library code and notebook the
    study's run depended on (``env.json`` inputs: ``library_sha256``, ``notebook_sha256``; two
    commits that left a study's code alone give it the same digest), labelled by the commit it
    ran at."""
    out = {}
    for path in sorted(Path(results_root, machine).glob("*/" + results.ENV)):
        env = results.read_json(path)
        inputs, git = env.get("inputs") or {}, env.get("git") or {}
        if inputs.get("library_sha256"):
            digest = inputs["library_sha256"] + (inputs.get("notebook_sha256") or "")
            label = (git.get("commit") or "?")[:7] + ("+dirty" if git.get("dirty") else "")
            out[path.parent.name] = {"digest": digest, "commit": label}
    return out


def revision_note(records) -> str:
    """Studies whose results on different machines come from different code: a row that cannot
    change from one machine to another (analysis, arithmetic, documentation) may then differ
    because the code did, and the comparison says so rather than read it as the machines'."""
    revs = records.get("revisions") or {}
    studies = sorted({s for r in revs.values() for s in r})
    mixed = []
    for study in studies:
        at = {m: r[study] for m, r in revs.items() if study in r}
        if len({v["digest"] for v in at.values()}) > 1:
            mixed.append(f"{study} (" + ", ".join(f"`{m}` at {v['commit']}" for m, v in at.items()) + ")")
    if not mixed:
        return ""
    return (
        "**Different code.** " + "; ".join(mixed) + ": rows of these studies that no machine could "
        "change may differ here because the code did; re-run them at one revision to compare machines."
    )
