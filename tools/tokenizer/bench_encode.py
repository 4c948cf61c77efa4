#!/usr/bin/env python3
"""Single-thread encode throughput, pdserve vs tiktoken, same corpus, same run.

    bench_encode.py --bench BUILD/bench_encode --model DIR [--docs N] [--repeat R]

The corpus is tiktoken_compare.py's generator (all categories but invalid UTF-8 and the
25k-character runs) plus prose-like text made of the vocabulary's own words. Two shapes:
many short documents (one encode call each) and the same bytes as one large string.
tiktoken runs encode_ordinary on one thread; pdserve runs Tokenizer::encode (allow_special
false, including Kimi's chunking) on one thread. Best of R runs each.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from kimi_reference import load_encoding  # noqa: E402
from tiktoken_compare import corpus  # noqa: E402


def best_of(repeat, fn):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--docs", type=int, default=40000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    enc = load_encoding(a.model)
    rng = random.Random(7)
    pieces = [enc.decode_single_token_bytes(i) for i in range(enc.max_token_value + 1 - 256)]
    docs = [d.decode("utf-8", "replace") for cat, d, _ in corpus(rng, a.docs, pieces)
            if cat not in ("invalid_utf8", "long_runs", "specials")]
    docs = [d.replace("\0", " ") for d in docs if d]
    big = " ".join(docs)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, items in (("short_docs", docs), ("one_string", [big])):
            path = os.path.join(tmp, shape)
            with open(path, "w", encoding="utf-8") as f:
                f.write("\0".join(items))
            nbytes = sum(len(x.encode()) for x in items)
            tk = best_of(a.repeat, lambda: [enc.encode_ordinary(x) for x in items])
            out = subprocess.run([a.bench, "--model", a.model, "--input", path, "--repeat", str(a.repeat)],
                                 check=True, capture_output=True, text=True).stdout
            ours = json.loads(out)
            tk_tokens = sum(len(enc.encode_ordinary(x)) for x in items)
            results[shape] = {"bytes": nbytes, "tiktoken_mb_s": nbytes / tk / 1e6, "pdserve_mb_s": ours["mb_per_s"],
                              "tiktoken_tokens": tk_tokens, "pdserve_tokens": ours["tokens"]}
    import tiktoken
    print(f"tiktoken {tiktoken.__version__}, vocab {enc.n_vocab}")
    for shape, r in results.items():
        print(f"{shape:11s} {r['bytes'] / 1e6:6.2f} MB  tiktoken {r['tiktoken_mb_s']:6.2f} MB/s  "
              f"pdserve {r['pdserve_mb_s']:6.2f} MB/s  ratio {r['pdserve_mb_s'] / r['tiktoken_mb_s']:.2f}x  "
              f"tokens {r['tiktoken_tokens']} vs {r['pdserve_tokens']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
