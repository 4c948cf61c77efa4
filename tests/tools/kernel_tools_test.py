#!/usr/bin/env python3
"""tools/kernels on committed fixtures: the SASS scoreboard decoder and the ncu source-page reader.

The fixtures are trimmed from the wide E4M3 MoE decode kernel's real outputs (docs/perf.md,
"What limits the wide form"): its register-ring loads all write scoreboard 5 and the first use
waits on it; that use holds 1503 of the kernel's stall samples.
"""
import contextlib
import io
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "kernels"))
FIX = os.path.join(ROOT, "tests", "fixtures", "kernels")

import moe_trace_timeline  # noqa: E402
import ncu_source_hotspots  # noqa: E402
import sass_scoreboards  # noqa: E402


def run(main, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(list(args))
    return rc, out.getvalue()


class SassScoreboards(unittest.TestCase):
    sass = os.path.join(FIX, "sass_ring_loads.txt")

    def test_control_bits(self):
        # LDG.E.NA.128 at 0x19c0: high word 0x000f68000c5e9d00 -> stall 4, write SB5, no wait.
        c = sass_scoreboards.control(0x000F68000C5E9D00)
        self.assertEqual((c["stall"], c["write"], c["read"], c["wait"]), (4, 5, 7, []))

    def test_ring_loads_share_one_scoreboard(self):
        rc, out = run(sass_scoreboards.main, self.sass, "--function", "decode_gemm_q8ILb1", "--loads")
        self.assertEqual(rc, 0)
        self.assertIn("LDG.E.NA.128.CONSTANT        write SB5   x6", out)
        self.assertIn("LDG.E.CONSTANT               write SB5   x2", out)
        self.assertIn("SB5 x1", out.splitlines()[-1])

    def test_first_use_waits(self):
        rc, out = run(sass_scoreboards.main, self.sass, "--range", "4430:4440")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"4430\s+SHF\.L\.W\.U32\.HI R24, R72, 0x4, R72\s+stall= 1 wait=SB5")

    def test_no_match_is_an_error(self):
        rc, _ = run(sass_scoreboards.main, self.sass, "--function", "no_such_kernel")
        self.assertEqual(rc, 1)


class NcuSourceHotspots(unittest.TestCase):
    csv = os.path.join(FIX, "ncu_source_wide64.csv")

    def test_totals_and_top_instruction(self):
        rc, out = run(ncu_source_hotspots.main, self.csv, "--top", "1", "--blocks", "0")
        self.assertEqual(rc, 0)
        self.assertIn("instructions executed 675968, samples 1847, SASS instructions 15", out)
        top = [line for line in out.splitlines() if line.startswith("    4430")]
        self.assertEqual(len(top), 1)
        self.assertIn("1503", top[0])
        self.assertIn("long_sb=1470", top[0])
        self.assertTrue(out.split("samples by reason: ")[1].startswith("long_sb"))

    def test_blocks_group_equal_counts(self):
        rc, out = run(ncu_source_hotspots.main, self.csv, "--top", "0", "--blocks", "50")
        self.assertEqual(rc, 0)
        blocks = out.split("blocks above")[1].strip().splitlines()[1:]
        self.assertEqual(len(blocks), 1)
        self.assertRegex(blocks[0], r"4430 x55296\s+12 ")

    def test_kernel_by_name_and_missing(self):
        self.assertEqual(run(ncu_source_hotspots.main, self.csv, "--kernel", "decode_gemm_q8", "--blocks", "0")[0], 0)
        self.assertEqual(run(ncu_source_hotspots.main, self.csv, "--kernel", "3")[0], 1)


class MoeTraceTimeline(unittest.TestCase):
    log = os.path.join(FIX, "moe_trace_b64.log")

    def test_parse_and_group(self):
        recs = moe_trace_timeline.parse(open(self.log).read().splitlines())
        self.assertEqual(len(recs), 23)
        self.assertEqual(len(moe_trace_timeline.launches(recs)), 1)
        self.assertEqual(len(recs[0]["items"]), 15)
        self.assertTrue(all(r["gated"] == 1 for r in recs))
        # Stamps rise within a CTA, and end before its end stamp.
        for r in recs:
            at = [a for a, _ in r["items"]]
            self.assertEqual(at, sorted(at))
            self.assertLess(at[-1], r["end"])

    def test_summary(self):
        rc, out = run(moe_trace_timeline.main, self.log, "--slowest", "1")
        self.assertEqual(rc, 0)
        self.assertIn("gate/up: 23 CTAs, 345 items", out)
        self.assertIn("item time (us): median 4.55", out)
        self.assertIn("items before a change of expert (us): median 7.74, max 9.41 (5)", out)
        self.assertIn("slow CTA 51: ends 79.81 us, 15 items, 2 experts", out)

    def test_bad_launch_index(self):
        self.assertEqual(run(moe_trace_timeline.main, self.log, "--launch", "5")[0], 1)

    # Two CTAs of a down launch with start-up phases (negative codes), written by hand in the
    # kernel's format: the phases leave the items alone and are summarised from each CTA's start.
    PHASED = [
        "QT 0 0 1000000 900 100:-1 150:-2 200:-3 210:-4 300:5 420:-5 600:6",
        "QT 0 1 1000500 1000 120:-1 170:-2 260:-3 270:-4 380:7 520:-5",
    ]

    def test_phases(self):
        recs = moe_trace_timeline.parse(self.PHASED)
        self.assertEqual([w for _, w in recs[0]["items"]], [5, 6])
        self.assertEqual(recs[1]["phases"], {-1: 1.2, -2: 1.7, -3: 2.6, -4: 2.7, -5: 5.2})
        out = moe_trace_timeline.summary(moe_trace_timeline.launches(recs)[0], 0)
        self.assertIn("down: 2 CTAs, 3 items", out)
        self.assertIn("experts listed: median 1.10, max 1.20 (2 CTAs)", out)
        self.assertIn("first item's first round: median 3.40, max 3.80 (2 CTAs)", out)
        self.assertIn("first round's MMAs done: median 4.70, max 5.20 (2 CTAs)", out)
        # Without phases (the per-item log) no phase block is printed.
        self.assertNotIn("start-up phases", moe_trace_timeline.summary(moe_trace_timeline.launches(
            moe_trace_timeline.parse(open(self.log).read().splitlines()))[0], 0))


if __name__ == "__main__":
    unittest.main()
