"""Summary of a bench/testbed.sh run: per host, per mode and epoch, and the issue's ratios.

Reads OUT/MODE/hostI.jsonl, one JSON object per epoch written by `nostall node --json`:
epoch, node, images, seconds, images_per_s, storage_bytes, peer_bytes (received from
peers), served_bytes (sent to peers), served_local_bytes (of those, to the host's own
ranks over TCP: "local TCP"), stall_s. With several ranks per host (testbed.sh
--ranks-per-host), each rank is one "host" here. Prints three tables and writes
OUT/summary.json. Python 3 standard library only.

Aggregate images/s of an epoch = the hosts' images together / the job's seconds for it:
from the end of the previous epoch on its last host to the end of this one on its last
host (`ended_s`, the hosts' shared clock: a data-parallel job goes at its slowest rank's
pace, and each rank's own seconds leave out or count differently what it waited for the
others); the slowest host's seconds where `ended_s` is missing and for the first epoch.
"Steady state" = every epoch after the first, which fills the caches (0-based epochs >=
1, the issue's "epochs >= 2"); its images/s = its images / the sum of its epochs' seconds.
That measure suits hosts that start each epoch together (a meeting before each). Hosts
that do not (`nostall node` without --epoch-barrier) drift apart, and a host far ahead
has done later epochs' work before the last host ends the first: the "while all run"
rate counts instead the images every host delivered between the moment the last host
ended its first epoch and the moment the first host ended its last (each host's count
interpolated within its epochs, from `ended_s` and `seconds`), over that time. It needs
enough epochs for that window to exist. For the same reason partitioned caching's
storage check counts what storage served beyond one pass of the dataset (a host ahead
reads some of the first pass in its second epoch), spread over the later epochs.

With --predicted (a `nostall simulate cache --csv` file for the same dataset, hosts,
cache share, epochs and seed), the local cache hit rates of the modes without peers
(`nopeers`: MinIO, `frequency` and `frequency-before`: NoPFS) are set beside the
simulator's, epoch by epoch and over the job. The simulator takes the frequency placement
as read before the first epoch: `frequency-before` is that setting, checked in every epoch;
`frequency` reads the placement beside the first epoch's reads, checked after it.

Usage: python3 bench/testbed_summary.py --out bench/out/testbed [--modes "partitioned plain
nopeers local"] [--hosts 4] [--dataset-bytes B] [--predicted simulated.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

MB = 1e6
KEYS = ("epoch", "node", "images", "seconds", "images_per_s", "storage_bytes",
        "peer_bytes", "served_bytes", "stall_s")
# The targets: steady-state throughput of partitioned caching at least 3x the
# same job without it, at least 0.9x the job with the whole dataset cached locally, and
# about no storage reads (here: at most 1% of the dataset per epoch).
MIN_VS_NOPEERS = 3.0
MIN_VS_LOCAL = 0.9
MAX_STORAGE_SHARE = 0.01
# Locality-aware batches move at most this share of the bytes the plain plan moves between
# hosts, over the same partitioned caches.
MAX_PEER_BYTES_VS_PLAIN = 0.10
# The frequency policy's local hit rate within this of the simulator's (in hit-rate
# points): in every epoch with the placement read before the first (the simulator's
# setting), in the epochs after the first with it read in the background (the first
# shares storage with the placement's reads, which the simulator takes as done).
MAX_HIT_RATE_GAP = 0.02
# The simulator's policy for each mode without peers.
SIMULATED = {"nopeers": "minio", "frequency": "frequency", "frequency-before": "frequency"}
# The first epoch each frequency mode's hit rates are checked from.
CHECKED_FROM = {"frequency": 1, "frequency-before": 0}


def load(out: Path, mode: str, hosts: int) -> dict[int, list[dict]] | None:
    """The epochs of every host of one mode, or None when the mode did not run."""
    per_host = {}
    for host in range(hosts):
        path = out / mode / f"host{host}.jsonl"
        if not path.exists():
            if host == 0:
                return None
            sys.exit(f"{path}: missing (the other hosts of {mode} wrote theirs)")
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            missing = [k for k in KEYS if k not in row]
            if missing:
                sys.exit(f"{path}:{number}: missing keys {', '.join(missing)}")
            rows.append(row)
        if not rows:
            sys.exit(f"{path}: no epochs")
        per_host[host] = rows
    return per_host


def aggregate(per_host: dict[int, list[dict]]) -> list[dict]:
    """One row per epoch over all hosts (only epochs every host reported)."""
    epochs = sorted(set.intersection(*({r["epoch"] for r in rows} for rows in per_host.values())))
    result = []
    previous = None
    for epoch in epochs:
        rows = [next(r for r in host_rows if r["epoch"] == epoch) for host_rows in per_host.values()]
        images = sum(r["images"] for r in rows)
        slowest = max(r["seconds"] for r in rows)
        ended = max(r["ended_s"] for r in rows) if all("ended_s" in r for r in rows) else None
        if ended is not None and previous is not None:
            slowest = ended - previous
        previous = ended
        result.append({
            "epoch": epoch,
            "images": images,
            "slowest_s": slowest,
            "images_per_s": images / slowest if slowest > 0 else 0.0,
            "storage_bytes": sum(r["storage_bytes"] for r in rows),
            "peer_bytes": sum(r["peer_bytes"] for r in rows),
            "served_bytes": sum(r["served_bytes"] for r in rows),
            "served_local_bytes": sum(r.get("served_local_bytes", 0) for r in rows),
            "max_stall_s": max(r["stall_s"] for r in rows),
        })
    return result


def steady(epochs: list[dict]) -> dict | None:
    """Totals over the epochs after the first, or None when there is only one."""
    later = epochs[1:]
    if not later:
        return None
    images = sum(e["images"] for e in later)
    seconds = sum(e["slowest_s"] for e in later)
    return {
        "epochs": [e["epoch"] for e in later],
        "images_per_s": images / seconds if seconds > 0 else 0.0,
        "storage_bytes_per_epoch": sum(e["storage_bytes"] for e in later) / len(later),
        "peer_bytes_per_epoch": sum(e["peer_bytes"] for e in later) / len(later),
        "local_tcp_bytes_per_epoch": sum(e["served_local_bytes"] for e in later) / len(later),
    }


def running_rate(per_host: dict[int, list[dict]]) -> dict | None:
    """Images/s of all hosts together while every host is past its first epoch and none has
    ended its last (see the module doc); None when that window is empty."""
    curves = []
    for rows in per_host.values():
        rows = sorted(rows, key=lambda r: r["epoch"])
        if len(rows) < 2 or not all("ended_s" in r for r in rows):
            return None
        points = [(rows[0]["ended_s"] - rows[0]["seconds"], 0.0)]
        for r in rows:
            points.append((r["ended_s"], points[-1][1] + r["images"]))
        curves.append(points)
    start = max(c[1][0] for c in curves)
    end = min(c[-1][0] for c in curves)
    if end <= start:
        return None

    def count(points: list[tuple[float, float]], t: float) -> float:
        for (t0, n0), (t1, n1) in zip(points, points[1:]):
            if t0 <= t <= t1:
                return n0 + (n1 - n0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
        return points[-1][1] if t > points[-1][0] else 0.0

    images = sum(count(c, end) - count(c, start) for c in curves)
    return {"from_s": start, "to_s": end, "seconds": end - start, "images": images,
            "images_per_s": images / (end - start)}


def hit_rates(per_host: dict[int, list[dict]]) -> dict[int, float]:
    """Local cache hit rate per epoch over all hosts, where the hosts reported hits."""
    rates = {}
    for epoch in sorted({r["epoch"] for rows in per_host.values() for r in rows}):
        rows = [r for rows in per_host.values() for r in rows if r["epoch"] == epoch]
        if all("cache_hits" in r for r in rows):
            hits = sum(r["cache_hits"] for r in rows)
            reads = hits + sum(r["cache_misses"] for r in rows)
            rates[epoch] = hits / reads if reads else 0.0
    return rates


def predicted_rates(path: Path) -> dict[str, dict[int, float]]:
    """The simulator's hit rate per policy and epoch, from its CSV."""
    rates: dict[str, dict[int, float]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            rates.setdefault(row["policy"], {})[int(row["epoch"])] = float(row["hit_rate"])
    return rates


def compare_hit_rates(runs, predicted: dict[str, dict[int, float]], checks: dict) -> None:
    """Prints measured against simulated hit rates; records the frequency checks."""
    measured = {mode: hit_rates(runs[mode]) for mode in SIMULATED if mode in runs}
    if not measured:
        return
    print("\nLocal cache hit rate, all hosts: measured (simulated)")
    for mode, rates in measured.items():
        policy = SIMULATED[mode]
        cells = [f"epoch {e}: {100 * r:.1f}% ({100 * predicted.get(policy, {}).get(e, float('nan')):.1f}%)"
                 for e, r in rates.items()]
        print(f"  {mode:<10} ({policy}): " + ", ".join(cells))
    later = lambda rates: [r for e, r in rates.items() if e >= 1]  # noqa: E731
    simulated = predicted.get("frequency", {})
    for mode, first in CHECKED_FROM.items():
        if mode not in measured or not simulated:
            continue
        gaps = [abs(r - simulated[e]) for e, r in measured[mode].items()
                if e >= first and e in simulated]
        job, predicted_job = job_hit_rate(runs[mode]), sum(simulated.values()) / len(simulated)
        if gaps:
            ok = max(gaps) <= MAX_HIT_RATE_GAP
            checks[f"{mode}_vs_simulated"] = {"max_gap": max(gaps), "target": MAX_HIT_RATE_GAP,
                                              "from_epoch": first, "job": job,
                                              "job_simulated": predicted_job, "ok": ok}
            print(f"  {mode} against the simulator, epochs >= {first}: at most "
                  f"{100 * max(gaps):.2f} points apart (target <= {100 * MAX_HIT_RATE_GAP:.0f}) "
                  f"{'ok' if ok else 'BELOW TARGET'}; the job {100 * job:.1f}% "
                  f"({100 * predicted_job:.1f}%)")
    if "nopeers" in measured:
        m = later(measured["nopeers"])
        for mode in CHECKED_FROM:
            f = later(measured.get(mode, {}))
            if f and m:
                ok = sum(f) / len(f) > sum(m) / len(m)
                checks[f"{mode}_vs_minio"] = {"frequency": sum(f) / len(f),
                                              "minio": sum(m) / len(m), "ok": ok}
                print(f"  {mode} {100 * sum(f) / len(f):.1f}% against MinIO "
                      f"{100 * sum(m) / len(m):.1f}%, epochs >= 1 {'ok' if ok else 'BELOW TARGET'}")
    for mode in CHECKED_FROM:
        if mode in runs:
            made = [r["made_s"] for rows in runs[mode].values() for r in rows
                    if r["epoch"] == 0 and "made_s" in r]
            stored = sum(r.get("made_storage_bytes", 0) for rows in runs[mode].values()
                         for r in rows if r["epoch"] == 0)
            if made:
                print(f"  {mode}: loaders made in at most {max(made):.2f} s, {stored / MB:.2f} MB "
                      "read from storage meanwhile (all hosts)")


def job_hit_rate(per_host: dict[int, list[dict]]) -> float:
    """Local cache hit rate over every epoch of every host."""
    rows = [r for rows in per_host.values() for r in rows if "cache_hits" in r]
    hits = sum(r["cache_hits"] for r in rows)
    reads = hits + sum(r["cache_misses"] for r in rows)
    return hits / reads if reads else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("bench/out/testbed"))
    parser.add_argument("--modes", default="partitioned plain nopeers local")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--dataset-bytes", type=int, default=0,
                        help="the dataset's bytes, for the storage share (0: unknown)")
    parser.add_argument("--mbps", default="", help="the storage limit, for the record")
    parser.add_argument("--cache", default="", help="the per-host cache, for the record")
    parser.add_argument("--predicted", type=Path,
                        help="the cache simulator's CSV for the same setting")
    args = parser.parse_args()

    runs = {}
    for mode in args.modes.split():
        per_host = load(args.out, mode, args.hosts)
        if per_host is None:
            print(f"{mode}: no results in {args.out / mode}", file=sys.stderr)
            continue
        runs[mode] = per_host

    print(f"\nPer host ({args.hosts} hosts, storage {args.mbps or '?'} MB/s, cache {args.cache or '?'})")
    print(f"{'mode':<12}{'epoch':>6}{'host':>5}{'images':>8}{'s':>8}{'images/s':>10}"
          f"{'storage MB':>12}{'peer MB':>9}{'served MB':>11}{'stall s':>9}")
    for mode, per_host in runs.items():
        by_epoch = sorted((r["epoch"], host, r) for host, rows in per_host.items() for r in rows)
        for epoch, host, r in by_epoch:
            print(f"{mode:<12}{epoch:>6}{host:>5}{r['images']:>8}{r['seconds']:>8.2f}"
                  f"{r['images_per_s']:>10.0f}{r['storage_bytes'] / MB:>12.2f}"
                  f"{r['peer_bytes'] / MB:>9.2f}{r['served_bytes'] / MB:>11.2f}{r['stall_s']:>9.2f}")

    summary = {"hosts": args.hosts, "mbps": args.mbps, "cache": args.cache,
               "dataset_bytes": args.dataset_bytes, "modes": {}}
    print("\nAll hosts (images/s = all images / the job's seconds for the epoch: see the module doc)")
    print(f"{'mode':<12}{'epoch':>6}{'images':>8}{'job s':>11}{'images/s':>10}"
          f"{'storage MB':>12}{'peer MB':>9}{'served MB':>11}{'local TCP MB':>14}{'max stall s':>13}")
    for mode, per_host in runs.items():
        epochs = aggregate(per_host)
        for e in epochs:
            print(f"{mode:<12}{e['epoch']:>6}{e['images']:>8}{e['slowest_s']:>11.2f}"
                  f"{e['images_per_s']:>10.0f}{e['storage_bytes'] / MB:>12.2f}"
                  f"{e['peer_bytes'] / MB:>9.2f}{e['served_bytes'] / MB:>11.2f}"
                  f"{e['served_local_bytes'] / MB:>14.2f}{e['max_stall_s']:>13.2f}")
        summary["modes"][mode] = {"epochs": epochs, "steady": steady(epochs),
                                  "while_all_run": running_rate(per_host),
                                  "per_host": {str(h): rows for h, rows in per_host.items()}}

    print("\nSteady state (every epoch after the first)")
    modes = summary["modes"]
    rate = {m: modes[m]["steady"]["images_per_s"] for m in modes if modes[m]["steady"]}
    for mode, value in rate.items():
        print(f"  {mode:<12}{value:>8.0f} images/s, storage "
              f"{modes[mode]['steady']['storage_bytes_per_epoch'] / MB:.2f} MB/epoch, peers "
              f"{modes[mode]['steady']['peer_bytes_per_epoch'] / MB:.2f} MB/epoch, local TCP "
              f"{modes[mode]['steady']['local_tcp_bytes_per_epoch'] / MB:.2f} MB/epoch")
    running = {m: modes[m]["while_all_run"]["images_per_s"] for m in modes
               if modes[m]["while_all_run"]}
    for mode, value in running.items():
        window = modes[mode]["while_all_run"]
        print(f"  {mode:<12}{value:>8.0f} images/s while all hosts run ({window['seconds']:.2f} s, "
              f"{window['images']:.0f} images)")
    checks = {}

    def verdict(ok: bool) -> str:
        return "ok" if ok else "BELOW TARGET"

    for other in ("nopeers", "local"):
        if "partitioned" in rate and rate.get(other):
            ratio = rate["partitioned"] / rate[other]
            target = MIN_VS_NOPEERS if other == "nopeers" else MIN_VS_LOCAL
            checks[f"partitioned_vs_{other}"] = {"ratio": ratio, "target": target,
                                                 "ok": ratio >= target}
            print(f"  partitioned / {other + ':':<8} {ratio:.2f}x (target >= {target}x) "
                  f"{verdict(ratio >= target)}")
    for mode in ("partitioned", "barrier"):
        if running.get(mode) and running.get("local"):
            ratio = running[mode] / running["local"]
            target = MIN_VS_LOCAL
            checks[f"{mode}_vs_local_while_all_run"] = {"ratio": ratio, "target": target,
                                                        "ok": ratio >= target}
            print(f"  {mode} / local, while all run: {ratio:.2f}x (target >= {target}x) "
                  f"{verdict(ratio >= target)}")
    if "barrier" in rate and rate.get("local"):
        ratio = rate["barrier"] / rate["local"]
        checks["barrier_vs_local"] = {"ratio": ratio}
        print(f"  barrier / local:      {ratio:.2f}x (partitioned, meeting before each epoch)")
    if "partitioned" in rate and "plain" in rate:
        moved = modes["partitioned"]["steady"]["peer_bytes_per_epoch"]
        plain = modes["plain"]["steady"]["peer_bytes_per_epoch"]
        ratio = moved / plain if plain else float("inf")
        ok = ratio <= MAX_PEER_BYTES_VS_PLAIN
        checks["peer_bytes_vs_plain"] = {"ratio": ratio, "target": MAX_PEER_BYTES_VS_PLAIN,
                                         "ok": ok}
        print(f"  peer bytes, locality-aware / plain: {100 * ratio:.1f}% (target <= "
              f"{100 * MAX_PEER_BYTES_VS_PLAIN:.0f}%) {verdict(ok)}")
    if "partitioned" in rate:
        stored = modes["partitioned"]["steady"]["storage_bytes_per_epoch"]
        line = f"  partitioned storage:   {stored / MB:.3f} MB per epoch"
        if args.dataset_bytes:
            # Hosts that do not meet between epochs read some of the first pass in their
            # second epoch (a host ahead reads a sample of its part before the host
            # behind does): what counts is what storage served beyond one pass, spread
            # over the later epochs.
            every = modes["partitioned"]["epochs"]
            beyond = sum(e["storage_bytes"] for e in every) - args.dataset_bytes
            stored = max(0, beyond) / max(1, len(every) - 1)
            line = (f"  partitioned storage:   {stored / MB:.3f} MB per epoch beyond the first "
                    f"pass")
            share = stored / args.dataset_bytes
            checks["partitioned_storage"] = {"bytes_per_epoch": stored, "share": share,
                                             "target": MAX_STORAGE_SHARE,
                                             "ok": share <= MAX_STORAGE_SHARE}
            line += (f" = {100 * share:.2f}% of the dataset (target ~0, <= "
                     f"{100 * MAX_STORAGE_SHARE:.0f}%) {verdict(share <= MAX_STORAGE_SHARE)}")
        print(line)
    if "agent" in modes:
        # Through the node agent, no rank reads its host's part over TCP, in any epoch;
        # its throughput against the same job without the agent.
        local_tcp = sum(e["served_local_bytes"] for e in modes["agent"]["epochs"])
        checks["agent_local_tcp_bytes"] = {"bytes": local_tcp, "ok": local_tcp == 0}
        print(f"  agent local TCP bytes, all epochs: {local_tcp} (target 0) {verdict(local_tcp == 0)}")
        if "partitioned" in rate and rate.get("agent"):
            ratio = rate["agent"] / rate["partitioned"]
            checks["agent_vs_partitioned"] = {"ratio": ratio, "target": 1.0, "ok": ratio >= 1.0}
            print(f"  agent / partitioned:   {ratio:.2f}x (target >= 1.0x) {verdict(ratio >= 1.0)}")
    if not rate:
        print("  (needs at least 2 epochs)")
    if args.predicted:
        compare_hit_rates(runs, predicted_rates(args.predicted), checks)
    summary["checks"] = checks
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\n{args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
