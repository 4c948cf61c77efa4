#!/usr/bin/env python3
"""Where a kernel's instructions and stall samples go, per SASS instruction, from ncu's source page.

  ncu --section SourceCounters -k regex:KERNEL -c 1 -o rep ./bench ...
  ncu -i rep.ncu-rep --page source --csv --print-source sass > k.csv
  ncu_source_hotspots.py k.csv [--kernel 0] [--top 20] [--blocks 0.5]

Prints the instructions executed and the warp-state samples in all, the samples' split by stall
reason, the instructions with the most samples (and their reasons), and the straight-line
blocks (consecutive instructions executed equally often) holding at least --blocks percent of
the instructions or of the samples, with their opcode mix.
"""
import argparse
import csv
import re
import sys
from collections import Counter

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def kernels(lines):
    """[(kernel name, rows as dicts)] from the CSV: each kernel's rows follow a "Kernel Name" row."""
    out, header = [], None
    for r in csv.reader(lines):
        if r and r[0] == "Kernel Name":
            out.append((r[1] if len(r) > 1 else "?", []))
            header = None
        elif out and header is None:
            header = r
        elif out and r:
            out[-1][1].append(dict(zip(header, r)))
    return out


def num(r, key):
    v = r.get(key, "") or "0"
    return int(v.replace(",", ""))


def opcode(source):
    s = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return s.split()[0] if s else "?"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output ('-': standard input)")
    ap.add_argument("--kernel", default="0", help="index of the kernel section, or a substring of its name")
    ap.add_argument("--top", type=int, default=20, help="instructions to list by samples")
    ap.add_argument("--blocks", type=float, default=0.5, help="list blocks above this percentage (0: none)")
    args = ap.parse_args(argv)
    lines = sys.stdin.read().splitlines() if args.csv == "-" else open(args.csv).read().splitlines()
    ks = kernels(lines)
    if not ks:
        print("no kernel sections in the CSV", file=sys.stderr)
        return 1
    pick = [k for i, k in enumerate(ks) if args.kernel == str(i) or (not args.kernel.isdigit() and args.kernel in k[0])]
    if not pick:
        print(f"no kernel section matches {args.kernel!r} ({len(ks)} sections)", file=sys.stderr)
        return 1
    name, rows = pick[0]
    stalls = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h] if rows else []
    executed = sum(num(r, EXECUTED) for r in rows)
    samples = sum(num(r, SAMPLES) for r in rows)
    print(f"kernel: {name[:120]}")
    print(f"instructions executed {executed}, samples {samples}, SASS instructions {len(rows)}")
    by_reason = Counter()
    for r in rows:
        for h in stalls:
            by_reason[h[6:]] += num(r, h)
    total = sum(by_reason.values()) or 1
    print("samples by reason: " + " ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common() if v))
    base = int(rows[0]["Address"], 16) if rows else 0
    print(f"\ntop {args.top} instructions by samples (offset, executed, samples, share, reasons):")
    for r in sorted(rows, key=lambda r: -num(r, SAMPLES))[: args.top]:
        why = " ".join(f"{h[6:]}={num(r, h)}" for h in stalls if num(r, h))
        share = 100 * num(r, SAMPLES) / max(samples, 1)
        print(f"  {int(r['Address'], 16) - base:6x} {num(r, EXECUTED):9d} {num(r, SAMPLES):6d} {share:5.1f}%  {r['Source'].strip()[:56]:56s} {why}")
    if args.blocks > 0:
        blocks = []
        for r in rows:
            n, s = num(r, EXECUTED), num(r, SAMPLES)
            if blocks and blocks[-1]["count"] == n:
                b = blocks[-1]
            else:
                b = {"start": int(r["Address"], 16) - base, "count": n, "len": 0, "samples": 0, "ops": Counter()}
                blocks.append(b)
            b["len"] += 1
            b["samples"] += s
            b["ops"][opcode(r["Source"])] += 1
        print(f"\nblocks above {args.blocks}% (offset, times run, length, instructions %, samples %, opcodes):")
        for b in blocks:
            ip = 100 * b["count"] * b["len"] / max(executed, 1)
            sp = 100 * b["samples"] / max(samples, 1)
            if ip >= args.blocks or sp >= args.blocks:
                mix = " ".join(f"{k}:{v}" for k, v in b["ops"].most_common(6))
                print(f"  {b['start']:6x} x{b['count']:<8d} {b['len']:4d} {ip:5.1f}% {sp:5.1f}%  {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
