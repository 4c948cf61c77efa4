#!/usr/bin/env python3
"""Per-CTA and per-item timelines of the wide E4M3 MoE decode kernels, from moe_decode_bench_trace.

  cmake -DPDSERVE_MOE_TRACE=ON .. && make moe_decode_bench_trace
  moe_decode_bench_trace --reps 2 --only 64 --kernels wa-pdl-qgmma-wide > t.log
  moe_trace_timeline.py t.log [--launch -1] [--slowest 5]

Each "QT gated cta start_ns end_10ns at_10ns:slot*1000+unit ..." line is one CTA (thread 0's
stamps: the CTA's start, each item's first round after any staging, the CTA's end). Stamps with a
negative code are start-up phases (the kernel's TracePhase: -1 experts listed, -2 items scanned,
-3 first loads issued (down: and its dependency wait), -4 first staging begun, -5 first round's
MMAs done; inside the first staging -6 maxima loaded, -7 their barrier passed, -8 rows converted);
their times from the CTA's own start are summarised when present. Lines are
grouped into launches (same kernel, starts within 20 us). For the chosen launch: when the CTAs'
first items start, how long items take (an item's time = the next item's start - its own; the
last item runs to the CTA's end; the next expert's staging falls in the item before it, since the
stamps follow the staging), the items before a change of expert, and the CTAs' end spread.
"""
import argparse
import statistics
import sys


def parse(lines):
    recs = []
    for line in lines:
        f = line.split()
        if len(f) < 5 or f[0] != "QT":
            continue
        items, phases = [], {}
        for tok in f[5:]:
            at, what = tok.split(":")
            if int(what) < 0:
                phases.setdefault(int(what), int(at) / 100.0)  # the first of each
            else:
                items.append((int(at) / 100.0, int(what)))  # us
        recs.append({"gated": int(f[1]), "cta": int(f[2]), "start": int(f[3]), "end": int(f[4]) / 100.0, "items": items,
                     "phases": phases})
    return recs


def launches(recs, gap_ns=20000):
    out = []
    for r in sorted(recs, key=lambda r: (r["start"], r["gated"])):
        last = out[-1] if out else None
        if last and last[0]["gated"] == r["gated"] and r["start"] - last[0]["start"] < gap_ns:
            last.append(r)
        else:
            out.append([r])
    return out


def q(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


PHASES = [(-1, "experts listed"), (-2, "items scanned"), (-3, "first loads issued"), (-4, "first staging begun"),
          (-6, "  staging: maxima loaded"), (-7, "  staging: their barrier passed"), (-8, "  staging: rows converted"),
          ("item", "first item's first round"), (-5, "first round's MMAs done")]


def phase_lines(launch):
    """Median / max of each start-up phase over the CTAs, us from each CTA's own start."""
    out = []
    for code, name in PHASES:
        if code == "item":
            v = [r["items"][0][0] for r in launch if r["items"]]
        else:
            v = [r["phases"][code] for r in launch if code in r.get("phases", {})]
        if v:
            out.append(f"  {name}: median {statistics.median(v):.2f}, max {max(v):.2f} ({len(v)} CTAs)")
    return ["start-up phases (us from the CTA's start):"] + out if len(out) > 1 else []


def summary(launch, slowest):
    t0 = min(r["start"] for r in launch)
    first = [r["items"][0][0] + (r["start"] - t0) / 1000.0 for r in launch if r["items"]]
    ends = [r["end"] + (r["start"] - t0) / 1000.0 for r in launch]
    plain, switch, last = [], [], []
    for r in launch:
        it = r["items"]
        for i in range(len(it)):
            nxt = it[i + 1][0] if i + 1 < len(it) else r["end"]
            d = nxt - it[i][0]
            if i + 1 == len(it):
                last.append(d)
            elif it[i + 1][1] // 1000 != it[i][1] // 1000:  # the stamp follows the staging: it ends this interval
                switch.append(d)
            else:
                plain.append(d)
    kind = "gate/up" if launch[0]["gated"] else "down"
    lines = [f"{kind}: {len(launch)} CTAs, {sum(len(r['items']) for r in launch)} items"]
    lines.append(f"first item starts (us from the launch's first CTA): min {min(first):.2f} median {statistics.median(first):.2f} max {max(first):.2f}")
    if plain:
        lines.append(f"item time (us): median {statistics.median(plain):.2f}, p90 {q(plain, 0.9):.2f} ({len(plain)} items)")
    if switch:
        lines.append(f"items before a change of expert (us): median {statistics.median(switch):.2f}, max {max(switch):.2f} ({len(switch)})")
    if last:
        lines.append(f"last items, with the reduction and exit (us): median {statistics.median(last):.2f}")
    lines += phase_lines(launch)
    lines.append(f"CTA ends (us): min {min(ends):.2f} median {statistics.median(ends):.2f} p90 {q(ends, 0.9):.2f} max {max(ends):.2f}")
    order = sorted(launch, key=lambda r: -(r["end"] + (r["start"] - t0) / 1000.0))
    for r in order[:slowest]:
        experts = len({w // 1000 for _, w in r["items"]})
        lines.append(f"  slow CTA {r['cta']}: ends {r['end'] + (r['start'] - t0) / 1000.0:.2f} us, {len(r['items'])} items, {experts} experts")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="moe_decode_bench_trace output ('-': standard input)")
    ap.add_argument("--launch", type=int, default=-1, help="which launch (index; default the last complete gate/up one)")
    ap.add_argument("--slowest", type=int, default=3, help="slowest CTAs to list")
    args = ap.parse_args(argv)
    lines = sys.stdin.read().splitlines() if args.log == "-" else open(args.log).read().splitlines()
    ls = launches(parse(lines))
    if not ls:
        print("no QT lines", file=sys.stderr)
        return 1
    if args.launch == -1:
        gates = [l for l in ls if l[0]["gated"]]
        pick = gates[-1] if gates else ls[-1]
    elif -len(ls) <= args.launch < len(ls):
        pick = ls[args.launch]
    else:
        print(f"launch {args.launch} out of range ({len(ls)} launches)", file=sys.stderr)
        return 1
    print(f"{len(ls)} launches")
    print(summary(pick, args.slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
