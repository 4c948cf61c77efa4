"""Peer anchor for the MXFP4 MoE benches: OpenAI's Triton MoE (triton_kernels: matmul_ogs
with MXFP4 weights in its own Hopper value/scale layouts, its routing) at Kimi-K3 expert
shapes (3584 -> 2 x 3072 fused gate/up -> 3584), timed on the same work as our benches:

  decode: one EP32 rank (28 local of 896 experts, top-16) at B = 1, 4, 16, 32, 64, with the
          touched experts and rows per expert read from moe_decode_bench's --routes FILE
          (the same draws); floor = touched experts' MXFP4 bytes (packed + scales) / BW.
  prefill: one EP4 rank (224 local experts), 8192 tokens x top-16 = 32768 local rows,
          distributed as moe_prefill_bench does (uniform, Zipf, one hot expert, random), and
          with --prefill-rows other row counts (R rows of R / 4 tokens: moe_prefill_bench --rows R);
          floor = the larger of 2 * rows * 3 * 3072 * 3584 FLOPs / 790 TFLOP/s and the touched
          experts' MXFP4 bytes / BW (the bound at few rows an expert).

triton_kernels is third-party code and is not in this repository: it is imported from
TRITON_KERNELS_PATH (the folder holding the triton_kernels package). Per shape the step a
serving engine calls is timed: routing metadata from the given top-k ids (routing with the
ids supplied and simulated_ep pruning to the local experts), gate/up matmul_ogs with the
row gather and triton_kernels' fused swiglu (an anchor only: K3's SiTU differs), then down
matmul_ogs with the scatter and the weighted top-k combine. Also the two matmuls alone
with the routing precomputed, and the whole step replayed from a CUDA graph. CUDA events,
median of REPS after warm-ups (the first call compiles). Weights rotate over 3 sets at
decode so repeats do not time L2. One small case is checked against a torch reference
on the dequantised (bf16) weights.

    TRITON_KERNELS_PATH=DIR python3 moe_peer_triton.py ROUTES_FILE [--reps N] [--deadline S]
"""
import argparse
import os
import sys
import time

import torch
from bench_timing import median_us, moe_prefill_counts

EXPERTS, TOPK, DIM, INTER = 896, 16, 3584, 3072
MAT = DIM * INTER
MXFP4_PER_EXPERT = 3 * MAT // 2 + 3 * MAT // 32
BW, PEAK = 4.2e12, 790e12
ALPHA, LIMIT = 1.702, 7.0  # triton_kernels swiglu arguments (gpt-oss's); any values do for timing

sys.path.insert(0, os.environ.get("TRITON_KERNELS_PATH", "."))
import triton  # noqa: E402
import triton_kernels.swiglu  # noqa: E402
from triton_kernels.matmul_ogs import (FlexCtx, FnSpecs, FusedActivation, PrecisionConfig,  # noqa: E402
                                       matmul_ogs)
from triton_kernels.numerics import InFlexData  # noqa: E402
from triton_kernels.numerics_details.mxfp import downcast_to_mxfp, upcast_from_mxfp  # noqa: E402
from triton_kernels.routing import routing  # noqa: E402
from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor  # noqa: E402
from triton_kernels.tensor_details import layout  # noqa: E402

T0 = time.time()


def log(*a):
    print(*a, flush=True)


def quantize(w, num_warps, keep_raw=False):
    """bf16 [E, K, N] -> triton_kernels MXFP4 (quantised along K) in the Hopper layouts."""
    q, s = downcast_to_mxfp(w, torch.uint8, axis=1)
    raw = (q, s) if keep_raw else None
    vl, vopts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
    sl, sopts = layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=num_warps)
    qw = convert_layout(wrap_torch_tensor(q, dtype=FP4), vl, **vopts)
    qs = convert_layout(wrap_torch_tensor(s), sl, **sopts)
    return qw, PrecisionConfig(flex_ctx=FlexCtx(rhs_data=InFlexData()), weight_scale=qs), raw


def make_expert_set(n_local, num_warps, seed, keep_raw=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w13 = torch.randn((n_local, DIM, 2 * INTER), device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    w13q, pc1, raw1 = quantize(w13, num_warps, keep_raw)
    del w13
    w2 = torch.randn((n_local, INTER, DIM), device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    w2q, pc2, raw2 = quantize(w2, num_warps, keep_raw)
    del w2
    return dict(w13=w13q, pc1=pc1, w2=w2q, pc2=pc2, raw=(raw1, raw2) if keep_raw else None)


def ids_for_counts(tokens, counts, n_local):
    """top-16 ids [tokens, 16] (int16) giving local expert e counts[e] rows: expert e takes the
    next counts[e] tokens round-robin (distinct, as counts[e] <= tokens), every other slot a
    distinct remote expert (>= n_local)."""
    local = [[] for _ in range(tokens)]
    p = 0
    for e, c in enumerate(counts):
        assert c <= tokens
        for i in range(c):
            local[(p + i) % tokens].append(e)
        p += c
    rows = []
    for t in range(tokens):
        assert len(local[t]) <= TOPK
        need = TOPK - len(local[t])
        remote = [n_local + (t * 7 + j * 53) % (EXPERTS - n_local) for j in range(need)]
        assert len(set(remote)) == need
        rows.append(sorted(local[t] + remote))
    return torch.tensor(rows, dtype=torch.int16, device="cuda")


def moe_step(x, ids, logits, ws, ep, precomputed=None):
    if precomputed is None:
        rdata, gi, si = routing(logits, TOPK, expt_indx=ids, simulated_ep=ep)
    else:
        rdata, gi, si = precomputed
    act = FusedActivation(FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit")), (ALPHA, LIMIT), 2)
    h = matmul_ogs(x, ws["w13"], None, rdata, gather_indx=gi, precision_config=ws["pc1"], fused_activation=act)
    return matmul_ogs(h, ws["w2"], None, rdata, scatter_indx=si, precision_config=ws["pc2"], gammas=rdata.gate_scal)


def reference(x, ids, ws, n_local):
    """fp32 torch on the dequantised weights; zero logits make every gate weight 1/16."""
    (q1, s1), (q2, s2) = ws["raw"]
    w13 = upcast_from_mxfp(q1, s1, torch.bfloat16, axis=1).float()
    w2 = upcast_from_mxfp(q2, s2, torch.bfloat16, axis=1).float()
    y = torch.zeros(x.shape[0], DIM, device="cuda")
    for t in range(x.shape[0]):
        for e in ids[t].tolist():
            if e >= n_local:
                continue
            a = x[t].float() @ w13[e]
            g, u = a[0::2].clamp(max=LIMIT), a[1::2].clamp(-LIMIT, LIMIT)
            h = (g * torch.sigmoid(ALPHA * g) * (u + 1)).bfloat16().float()  # the kernel keeps h in bf16
            y[t] += (h @ w2[e]) / TOPK
    return y


def time_case(name, tokens, counts, n_local, ep, sets, reps, floor_us, work, unit):
    ids = ids_for_counts(tokens, counts, n_local)
    logits = torch.zeros(tokens, EXPERTS, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(tokens, DIM, device="cuda", dtype=torch.bfloat16)
    pre = [routing(logits, TOPK, expt_indx=ids, simulated_ep=ep)]
    full = median_us(lambda i: moe_step(x, ids, logits, sets[i % len(sets)], ep), reps)
    mm = median_us(lambda i: moe_step(x, ids, logits, sets[i % len(sets)], ep, pre[0]), reps)
    rt = median_us(lambda i: routing(logits, TOPK, expt_indx=ids, simulated_ep=ep), reps)
    graph = float("nan")
    try:
        gs = []
        for s in sets:  # one graph per weight set, so replays rotate too
            moe_step(x, ids, logits, s, ep)
            torch.cuda.synchronize()
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr):
                moe_step(x, ids, logits, s, ep)
            gs.append(gr)
        graph = median_us(lambda i: gs[i % len(gs)].replay(), reps)
    except Exception as exc:  # report, keep the eager figures
        log(f"  ({name}: CUDA graph capture failed: {type(exc).__name__}: {str(exc)[:200]})")
    rate = lambda us: work / us * 1e-6  # bytes/us -> TB/s, FLOPs/us -> TFLOP/s
    best = min(full, graph) if graph == graph else full
    log(f"| {name} | {full:8.1f} | {graph:8.1f} | {mm:8.1f} | {rt:6.1f} | {floor_us:7.1f} | {best / floor_us:5.2f}x "
        f"| {rate(best):6.2f} {unit} |")


def check_small(ws, n_local, ep):
    tokens = 4
    counts = [2, 1, 3, 1]
    ids = ids_for_counts(tokens, counts, n_local)
    logits = torch.zeros(tokens, EXPERTS, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(tokens, DIM, device="cuda", dtype=torch.bfloat16)
    y = moe_step(x, ids, logits, ws, ep).float().reshape(tokens, DIM)
    ref = reference(x, ids, ws, n_local)
    err = ((y - ref).norm() / ref.norm()).item()
    log(f"check: B={tokens}, {sum(counts)} local rows over {len(counts)} experts: ||y - ref|| / ||ref|| = {err:.2e} "
        f"({'ok' if err < 3e-2 else 'MISMATCH'}; ref = fp32 on the bf16-dequantised MXFP4 weights)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("routes")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds; skip the shapes left after it")
    ap.add_argument("--batches", default="1,4,16,32,64")
    ap.add_argument("--prefill", default="uniform,zipf,hot")
    ap.add_argument("--prefill-rows", default="32768", help="routed rows of the prefill cases (comma list)")
    a = ap.parse_args()
    import triton_kernels
    log(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}; "
        f"triton_kernels from {os.path.dirname(triton_kernels.__file__)}")
    routes = {}
    for line in open(a.routes):
        if line.strip():
            v = list(map(int, line.split()))
            routes.setdefault(v[0], v[1:])  # first line of a batch: the bench's draw
    want = [int(b) for b in a.batches.split(",") if b]

    # Decode: EP32 rank, 28 local experts, 3 weight sets (1.4 GB of MXFP4).
    n_local = EXPERTS // 32
    sets = [make_expert_set(n_local, 4, 100 + s, keep_raw=(s == 0)) for s in range(3)]
    check_small(sets[0], n_local, 32)
    sets[0]["raw"] = None
    log(f"\nDecode MoE, EP32 rank (28 of 896, top-16, MXFP4 3584->2x3072->3584, swiglu), median of {a.reps}; "
        f"floor = touched experts' MXFP4 bytes / {BW * 1e-12:.1f} TB/s; rate = those bytes / best of eager, graph")
    log("| case | step us | graph us | matmuls us | routing us | floor us | best/floor | rate |")
    log("|---|---|---|---|---|---|---|---|")
    for b in want:
        if b not in routes:
            log(f"| B={b} | (no route line) |")
            continue
        if time.time() - T0 > a.deadline:
            log(f"| B={b} | (skipped: past --deadline) |")
            continue
        counts = routes[b]
        nbytes = len(counts) * MXFP4_PER_EXPERT
        time_case(f"B={b} ({len(counts)} experts, {sum(counts)} rows)", b, counts, n_local, 32, sets, a.reps,
                  nbytes / BW * 1e6, nbytes, "TB/s")
    del sets
    torch.cuda.empty_cache()

    # Prefill: EP4 rank, 224 local experts, 8192 tokens x top-16 = 32768 local rows.
    kinds = [k for k in a.prefill.split(",") if k]
    if not kinds or time.time() - T0 > a.deadline:
        log("prefill skipped (past --deadline or none asked)")
        return
    n_local = EXPERTS // 4
    ws = [make_expert_set(n_local, 8, 200)]
    for rows in [int(r) for r in a.prefill_rows.split(",") if r]:
        tokens = rows // 4  # 4 local hits a token (top-16 over EP4)
        flops = 2.0 * rows * 3 * INTER * DIM
        log(f"\nPrefill MoE, EP4 rank (224 of 896), {tokens} tokens x top-16 = {rows} local rows, median of {a.reps}; "
            f"floor = max({flops * 1e-12:.3f} TFLOP / {PEAK * 1e-12:.0f} TFLOP/s, touched MXFP4 bytes / {BW * 1e-12:.1f} TB/s)")
        log("| case | step us | graph us | matmuls us | routing us | floor us | best/floor | rate |")
        log("|---|---|---|---|---|---|---|---|")
        for kind in kinds:
            if time.time() - T0 > a.deadline:
                log(f"| {kind} | (skipped: past --deadline) |")
                continue
            c = moe_prefill_counts(kind, n_local, rows, tokens)
            floor = max(flops / PEAK, sum(1 for v in c if v) * MXFP4_PER_EXPERT / BW) * 1e6
            time_case(f"{kind} {rows} rows (max {max(c)} min {min(c)} a expert)", tokens, c, n_local, 4, ws, a.reps,
                      floor, flops, "TFLOP/s")
    log(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
