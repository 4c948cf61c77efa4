#!/usr/bin/env python3
"""Scoreboards and stall counts of SASS instructions, from `cuobjdump -sass` text.

Each Volta-and-later instruction is 128 bits; cuobjdump prints the low and the high 64-bit
words as two hex comments. Bits 105-125 (the high word >> 41) are the scheduling control:
stall cycles (4 bits), yield (1), the scoreboard the instruction sets when its result lands
(write, 3 bits; 7 = none), the one it sets when its sources are read (read, 3 bits), the
scoreboards it waits on (6-bit mask) and operand reuse (4 bits). A long-latency load that
shares its write scoreboard with later loads makes every wait on it wait for all of them:
`--loads` lists which scoreboards the loads use.

  cuobjdump -sass obj.o > k.sass
  sass_scoreboards.py k.sass --function decode_gemm_q8ILb1 --loads
  sass_scoreboards.py k.sass --function decode_gemm_q8ILb1 --grep 'LDG|WAIT' --range 4000:4b80
"""
import argparse
import re
import sys
from collections import Counter

INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
HIGH = re.compile(r"/\* (0x[0-9a-f]+) \*/")
FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
LOADS = re.compile(r"^(@!?U?P\w+\s+)?(LDG|LDGSTS|LDS|LDSM|LD|LDL|LDC|TLD|TEX|ULDC)\b")


def control(high):
    c = high >> 41
    return {
        "stall": c & 0xF,
        "yield": (c >> 4) & 1,
        "write": (c >> 5) & 7,
        "read": (c >> 8) & 7,
        "wait": [b for b in range(6) if (c >> 11) >> b & 1],
        "reuse": (c >> 17) & 0xF,
    }


def parse(lines, function=None):
    """Yields (function, address, text, control) for every instruction (of functions matching)."""
    current = None
    i = 0
    while i < len(lines):
        f = FUNCTION.search(lines[i])
        if f:
            current = f.group(1)
            i += 1
            continue
        m = INSTR.match(lines[i])
        if m and i + 1 < len(lines):
            h = HIGH.search(lines[i + 1])
            if h and (function is None or (current and re.search(function, current))):
                yield current, int(m.group(1), 16), m.group(2).strip(), control(int(h.group(1), 16))
            i += 2
            continue
        i += 1


def describe(addr, text, c):
    s = f"{addr:6x}  {text[:64]:64s} stall={c['stall']:2d}"
    if c["write"] != 7:
        s += f" write=SB{c['write']}"
    if c["read"] != 7:
        s += f" read=SB{c['read']}"
    if c["wait"]:
        s += " wait=" + ",".join(f"SB{b}" for b in c["wait"])
    return s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sass", help="cuobjdump -sass output ('-': standard input)")
    ap.add_argument("--function", help="regex on the mangled function name")
    ap.add_argument("--grep", help="regex: print only the instructions (or their scoreboard notes) matching")
    ap.add_argument("--range", help="LO:HI hex addresses within the function")
    ap.add_argument("--loads", action="store_true", help="summarise the write scoreboards of the loads, per opcode")
    args = ap.parse_args(argv)
    text = sys.stdin.read() if args.sass == "-" else open(args.sass).read()
    lo, hi = (int(x, 16) for x in args.range.split(":")) if args.range else (0, 1 << 40)
    rows = [r for r in parse(text.split("\n"), args.function) if lo <= r[1] < hi]
    if not rows:
        print("no instructions matched", file=sys.stderr)
        return 1
    if args.loads:
        use = Counter()
        for _, _, t, c in rows:
            m = LOADS.match(t)
            if m:
                op = t[len(m.group(1) or ""):].split()[0]
                use[(op, "SB%d" % c["write"] if c["write"] != 7 else "none")] += 1
        waits = Counter(b for _, _, _, c in rows for b in c["wait"])
        for (op, sb), n in sorted(use.items()):
            print(f"{op:28s} write {sb:5s} x{n}")
        print("waits: " + " ".join(f"SB{b} x{n}" for b, n in sorted(waits.items())))
        return 0
    for _, addr, t, c in rows:
        line = describe(addr, t, c)
        if args.grep is None or re.search(args.grep, line):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
