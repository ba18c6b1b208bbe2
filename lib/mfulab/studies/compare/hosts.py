"""Which host each machine's results came from (its runs' ``env.json`` fingerprints), so that
two result folders of one host run on different cores are read as that, not as two machines."""

from __future__ import annotations

from pathlib import Path

from mfulab import results


def host(results_root, machine: str) -> dict:
    """What a machine's runs say about its host (the first ``env.json`` fingerprint found): the
    CPU or GPU model, the cores the run could use and the node's cores."""
    for path in sorted(Path(results_root, machine).glob("*/" + results.ENV)):
        f = results.read_json(path).get("fingerprint") or {}
        if f:
            keys = ("device_name", "cpu_model", "cpu_count", "cpu_count_node", "device_count")
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
        + " usable cores (an affinity mask): their differences are what the cores a run may use change, "
        "not the hardware"
        for (device, node), names in groups.items()
        if len(names) > 1 and len({hosts[n]["cpu_count"] for n in names}) > 1
    ]
    return ("**Same host, other cores.** " + "; ".join(notes) + ".") if notes else ""
