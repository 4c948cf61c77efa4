#!/usr/bin/env python3
"""FlashInfer's MLA decode (BatchMLAPagedAttentionWrapper) at the TP32 decode rank's shapes: the
issue-12 anchor beside `mla_decode_bench m17` (ours on a bf16 cache).

Same problem as m17: 3 heads, latent 512 + key 64 (576 bf16 a token, 1152 bytes), pages of 64
tokens with shuffled page ids, one query token a row, absorbed attention (o = softmax(q k^T s) v,
v = the latent). Timing as m17: a CUDA graph of 20 back-to-back runs, replayed 5 times after a
warm-up, median / 20 = us a step; TB/s over the cache bytes the step reads; floor = bytes / 4.2
TB/s. Correctness first: FlashInfer's output on ragged rows (1, 63, 64, 65, 1000 tokens) against an
fp32 torch reference, normalised error max|got - ref| / max|ref|.

FlashInfer is not installed on the GPU machine and cannot be fetched there: kernels/bench/
run_mla_flashinfer_h200.sh brings its Python package (trimmed: flashinfer/__init__.py imports only
`jit`) and the JIT module built ahead on the dev VM with nvcc 13.0 (sm_90a), which this script loads
instead of building (--prebuilt). docs/perf.md, "FlashInfer's MLA decode".

  mla_decode_flashinfer.py --prebuilt DIR [--backend fa3] [--shapes 1x64,1x1024,...]
"""
import argparse
import pathlib
import shutil
import sys
import warnings

import torch

from bench_timing import median_us

SHAPES = "1x64,1x1024,1x4096,1x16384,1x65536,1x131072,8x16384,32x16384,64x4096,128x16384,256x16384"
HEADS, LATENT, KEY, PAGE = 3, 512, 64, 64
BYTES_PER_TOKEN = (LATENT + KEY) * 2


def use_prebuilt(prebuilt):
    """Load JIT modules from `prebuilt`/<name>/<name>.so (built on the dev VM) instead of building them."""
    from flashinfer.jit import core

    original = core.JitSpec.build_and_load

    def build_and_load(self):
        so = pathlib.Path(prebuilt) / self.name / f"{self.name}.so"
        if so.exists():
            dst = self.jit_library_path
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                shutil.copy(so, dst)
            return self.load()
        return original(self)

    core.JitSpec.build_and_load = build_and_load


def make_case(lengths, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages_per = [(n + PAGE - 1) // PAGE for n in lengths]
    total = sum(pages_per)
    ids = torch.randperm(total, device="cuda", generator=g).to(torch.int32)
    ckv = torch.randn(total, PAGE, LATENT, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    kpe = torch.randn(total, PAGE, KEY, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    b = len(lengths)
    q_nope = torch.randn(b, HEADS, LATENT, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    q_pe = torch.randn(b, HEADS, KEY, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    kv_indptr = torch.tensor([0] + list(torch.tensor(pages_per).cumsum(0).tolist()), device="cuda", dtype=torch.int32)
    return dict(lengths=lengths, ids=ids, ckv=ckv, kpe=kpe, q_nope=q_nope, q_pe=q_pe, kv_indptr=kv_indptr,
                qo_indptr=torch.arange(b + 1, device="cuda", dtype=torch.int32),
                kv_len=torch.tensor(lengths, device="cuda", dtype=torch.int32))


def planned_wrapper(case, backend, sm_scale, graph):
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    b = len(case["lengths"])
    kw = {}
    if graph:
        kw = dict(use_cuda_graph=True, qo_indptr=torch.empty(b + 1, dtype=torch.int32, device="cuda"),
                  kv_indptr=torch.empty(b + 1, dtype=torch.int32, device="cuda"),
                  kv_indices=torch.empty(case["ids"].numel(), dtype=torch.int32, device="cuda"),
                  kv_len_arr=torch.empty(b, dtype=torch.int32, device="cuda"))
    w = BatchMLAPagedAttentionWrapper(ws, backend=backend, **kw)
    w.plan(case["qo_indptr"], case["kv_indptr"], case["ids"], case["kv_len"], HEADS, LATENT, KEY, PAGE, False, sm_scale,
           torch.bfloat16, torch.bfloat16)
    return w, ws


def reference(case, sm_scale):
    outs, start = [], 0
    ids = case["ids"].long()
    for i, n in enumerate(case["lengths"]):
        np_ = (n + PAGE - 1) // PAGE
        pg = ids[start:start + np_]
        start += np_
        ckv = case["ckv"][pg].reshape(-1, LATENT)[:n].float()
        kpe = case["kpe"][pg].reshape(-1, KEY)[:n].float()
        s = (case["q_nope"][i].float() @ ckv.T + case["q_pe"][i].float() @ kpe.T) * sm_scale
        outs.append(torch.softmax(s, dim=-1) @ ckv)
    return torch.stack(outs)


def check(backend, sm_scale):
    case = make_case([1, 63, 64, 65, 1000], 1)
    w, _ = planned_wrapper(case, backend, sm_scale, graph=False)
    out = torch.empty(len(case["lengths"]), HEADS, LATENT, device="cuda", dtype=torch.bfloat16)
    w.run(case["q_nope"], case["q_pe"], case["ckv"], case["kpe"], out=out)
    ref = reference(case, sm_scale)
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"correctness ({backend}): rows of 1, 63, 64, 65, 1000 tokens, {HEADS} heads: normalised error {err:.2e} (bf16 output)")
    return err


def time_shape(b, ctx, backend, sm_scale, reps=20, rounds=5):
    case = make_case([ctx] * b, 7)
    w, ws = planned_wrapper(case, backend, sm_scale, graph=True)
    out = torch.empty(b, HEADS, LATENT, device="cuda", dtype=torch.bfloat16)
    run = lambda: w.run(case["q_nope"], case["q_pe"], case["ckv"], case["kpe"], out=out)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            run()
    # Steps from the graph (warm-up replay first), and one eager run (plan excluded: the per-call view).
    us = median_us(lambda i: graph.replay(), rounds, warm=1) / reps
    one = median_us(lambda i: run(), 20)
    del graph, w, ws, case
    torch.cuda.empty_cache()
    return us, one


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prebuilt", help="folder of JIT modules built ahead (<name>/<name>.so)")
    ap.add_argument("--backend", default="fa3")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--bw", type=float, default=4.2e12)
    args = ap.parse_args()
    if args.prebuilt:
        use_prebuilt(args.prebuilt)
    # The flat (qo_indptr, ..., q_nope, q_pe) form, positional as in FlashInfer's MLA examples: 0.7.4
    # warns that it is deprecated (checked to run, and to agree with the reference, above).
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import flashinfer

    sm_scale = 1.0 / (192 ** 0.5)  # K3's qk head dim (NoPE 128 + key 64)
    print(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}, backend {args.backend}")
    if check(args.backend, sm_scale) > 1e-2:  # bf16 output: a few 1e-3; more means the call is wrong
        print("FAILED: FlashInfer's output is not the attention this harness means; no timings")
        return 1
    print(f"\n| batch x ctx | floor us (bf16, {args.bw / 1e12:.1f} TB/s) | FlashInfer graph us/step | TB/s | x floor | one launch us |")
    print("|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        b, ctx = (int(v) for v in shape.split("x"))
        nbytes = b * ctx * BYTES_PER_TOKEN
        try:
            us, one = time_shape(b, ctx, args.backend, sm_scale)
        except Exception as e:  # report and go on: one shape's refusal is a result too
            print(f"| {b} x {ctx} | {nbytes / args.bw * 1e6:.2f} | failed: {type(e).__name__}: {str(e)[:120]} | | | |")
            continue
        print(f"| {b} x {ctx} | {nbytes / args.bw * 1e6:.2f} | {us:.2f} | {nbytes / us / 1e6:.2f} | {us / (nbytes / args.bw * 1e6):.2f} | {one:.2f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
