"""fla's chunk_kda forward at kda_chunk_bench's shapes (the prefill anchor, docs/perf.md).

Same maths: q, k L2-normalised beforehand (scale D^-0.5 passed), g a precomputed log decay in
(-5, 0) (K3's bounded gate), beta after the sigmoid, a [V][K] fp32 initial state
(state_v_first) and the final state returned. Two input precisions: fp32 (ours reads fp32)
and bf16 q/k/v/beta (fla's usual), with and without safe_gate (fla's path for bounded gates),
in the order below until the run's time is up. Median of 20 timed calls after 3 warm-ups (the first compiles), CUDA events.
After the first shape: fla's accuracy (bf16, safe_gate) against an fp64 token recurrence at
T = 1024, H = 32, as normalised error max|fla - ref| / max|ref| of the output and the final
state, the reference fed once with the bf16-rounded inputs (fla's arithmetic alone) and once
with the fp32 inputs before rounding (what bf16 activations cost end to end).
With --dump DIR the accuracy step runs after the first shape and writes its fp32 inputs and fla's output and
final state to DIR (raw float32; meta.txt holds T H D), for `kda_chunk_bench --accuracy DIR`
to put ours and fla's against the same fp32 CPU reference in the same run; the timings then
take bf16 safe_gate only, at the bench's shapes (T 16K / 64K, H 32 / 24), after an untimed
compile at the first shape of each head count; with FLA_GATE=FILE they wait for FILE (one GPU shared with our bench);
FLA_SHAPES="TxH,..." picks the shapes, FLA_ACC=0 skips the accuracy step.
"""
import os
import sys
import time

import torch
from fla.ops.kda import chunk_kda

REPS = 20
SHAPES = ((16384, 32), (8192, 24), (65536, 32))


def inputs(T, H, D, dtype):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.nn.functional.normalize(torch.randn(1, T, H, D, device=dev), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, D, device=dev), dim=-1)
    v = torch.randn(1, T, H, D, device=dev)
    g = -5.0 * torch.sigmoid(torch.randn(1, T, H, D, device=dev))
    beta = torch.sigmoid(torch.randn(1, T, H, device=dev))
    h0 = torch.randn(1, H, D, D, device=dev) * 0.1
    return q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype), h0


def time_us(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def reference(q, k, v, g, beta, h0, scale):
    """fp64 token recurrence: S = S diag(exp g); S += beta (v - S k) k^T; o = S (scale q). S is [V][K]."""
    q, k, v, g, beta, S = (x[0].double() for x in (q, k, v, g, beta, h0))
    o = torch.empty_like(v)
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t]).unsqueeze(1)
        pred = torch.einsum("hvk,hk->hv", S, k[t])
        S = S + torch.einsum("hv,hk->hvk", beta[t][:, None] * (v[t] - pred), k[t])
        o[t] = torch.einsum("hvk,hk->hv", S, q[t] * scale)
    return o, S


def nerr(x, ref):
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


def accuracy(D, dump=None):
    T, H = 1024, 32
    q32, k32, v32, g, b32, h0 = inputs(T, H, D, torch.float32)
    q, k, v, beta = (x.to(torch.bfloat16) for x in (q32, k32, v32, b32))
    with torch.inference_mode():
        o, st = chunk_kda(q, k, v, g, beta, scale=D ** -0.5, initial_state=h0.clone(), output_final_state=True,
                          state_v_first=True, safe_gate=True, lower_bound=-5.0)
        ro, rs = reference(q, k, v, g, beta, h0, D ** -0.5)
        fo, fs = reference(q32, k32, v32, g, b32, h0, D ** -0.5)
    print(f"fla accuracy T={T} H={H} bf16 safe_gate=1 vs fp64 recurrence: on its bf16 inputs output nerr {nerr(o[0], ro):.2e}, "
          f"state {nerr(st[0], rs):.2e}; vs the fp32 inputs output nerr {nerr(o[0], fo):.2e}, state {nerr(st[0], fs):.2e}",
          flush=True)
    if dump:
        os.makedirs(dump, exist_ok=True)
        for name, x in (("q", q32), ("k", k32), ("v", v32), ("g", g), ("beta", b32), ("h0", h0), ("fla_o", o), ("fla_state", st)):
            x.float().contiguous().cpu().numpy().tofile(os.path.join(dump, name + ".bin"))
        with open(os.path.join(dump, "meta.txt"), "w") as f:  # last: the bench waits for it
            f.write(f"{T} {H} {D}\n")
        print(f"fla accuracy inputs and outputs written to {dump}", flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        D = 128
        print(f"fla chunk_kda forward, D={D}, chunk 64, initial + final state ([V][K] fp32); bf16 safe_gate", flush=True)
        shapes = ((16384, 32), (65536, 32), (16384, 24), (65536, 24))
        if os.environ.get("FLA_SHAPES"):  # e.g. "16384x24,65536x24": each new H compiles anew (~100 s)
            shapes = tuple(tuple(int(x) for x in s.split("x")) for s in os.environ["FLA_SHAPES"].split(","))

        def run_for(T, H):
            q, k, v, g, beta, h0 = inputs(T, H, D, torch.bfloat16)
            return lambda: chunk_kda(q, k, v, g, beta, scale=D ** -0.5, initial_state=h0, output_final_state=True,
                                     state_v_first=True, safe_gate=True, lower_bound=-5.0)

        with torch.inference_mode():  # compile (and autotune) at the first shape of each head count, untimed
            for H in dict.fromkeys(h for _, h in shapes):
                run_for(next(t for t, h in shapes if h == H), H)()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        print("fla compiled", flush=True)
        try:
            if os.environ.get("FLA_ACC", "1") != "0":  # FLA_ACC=0: timings only
                accuracy(D, sys.argv[2])
        except Exception as e:  # say so and go on to the timings
            print(f"fla accuracy failed: {type(e).__name__}: {e}"[:300], flush=True)
        gate = os.environ.get("FLA_GATE")  # one GPU shared with our bench: time only once it is done
        if gate:
            while not os.path.exists(gate):
                time.sleep(0.2)
            print("fla timing starts (gate open)", flush=True)
        for T, H in shapes:
            fn = run_for(T, H)
            with torch.inference_mode():
                us = time_us(fn)
            print(f"fla T={T:6d} H={H:2d} {str(torch.bfloat16):15s} safe_gate=1 {us:9.1f} us", flush=True)
            del fn
            torch.cuda.empty_cache()
        return
    D = 128
    print(f"fla chunk_kda forward, D={D}, chunk 64, initial + final state ([V][K] fp32)")
    # Most telling first (the first call of each variant compiles and autotunes for minutes):
    # bf16 with safe_gate (fla's fastest), then fp32 (what ours reads) without and with it.
    for dtype, safe in ((torch.bfloat16, True), (torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
        for T, H in SHAPES:
            if dtype == torch.bfloat16 and safe and T == 8192:
                try:
                    accuracy(D)
                except Exception as e:  # say so and go on
                    print(f"fla accuracy failed: {type(e).__name__}: {e}"[:300], flush=True)
            q, k, v, g, beta, h0 = inputs(T, H, D, dtype)

            def run():
                return chunk_kda(q, k, v, g, beta, scale=D ** -0.5, initial_state=h0, output_final_state=True,
                                 state_v_first=True, safe_gate=safe, lower_bound=-5.0 if safe else None)

            try:
                with torch.inference_mode():
                    us = time_us(run)
                print(f"fla T={T:6d} H={H:2d} {str(dtype):15s} safe_gate={int(safe)} {us:9.1f} us", flush=True)
            except Exception as e:  # say so and go on: one failing variant must not hide the rest
                print(f"fla T={T:6d} H={H:2d} {str(dtype):15s} safe_gate={int(safe)} failed: {type(e).__name__}: {e}"[:300],
                      flush=True)
            del q, k, v, g, beta, h0
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
