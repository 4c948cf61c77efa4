"""fla's chunk_kda forward at kda_chunk_bench's shapes (the prefill anchor, docs/perf.md).

Same maths: q, k L2-normalised beforehand (scale D^-0.5 passed), g a precomputed log decay in
(-5, 0) (K3's bounded gate), beta after the sigmoid, a [V][K] fp32 initial state
(state_v_first) and the final state returned. Two input precisions: fp32 (ours reads fp32)
and bf16 q/k/v/beta (fla's usual), with and without safe_gate (fla's path for bounded gates),
in the order below until the run's time is up. Median of 20 timed calls after 3 warm-ups (the first compiles), CUDA events.
"""
import torch
from fla.ops.kda import chunk_kda

REPS = 20
SHAPES = ((16384, 32), (65536, 32), (8192, 24))


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


def main():
    D = 128
    print(f"fla chunk_kda forward, D={D}, chunk 64, initial + final state ([V][K] fp32)")
    # Most telling first (the first call of each variant compiles and autotunes for minutes):
    # bf16 with safe_gate (fla's fastest), then fp32 (what ours reads) without and with it.
    for dtype, safe in ((torch.bfloat16, True), (torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
        for T, H in SHAPES:
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
