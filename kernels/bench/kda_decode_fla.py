"""fla's fused recurrent KDA decode step timed like kda_decode_bench (the anchor, docs/perf.md).

Same shape (H=3, D=128, fp32 state in a slot pool, [V][K] layout via state_v_first, scattered
slot ids via ssm_state_indices, state updated in place), gate, beta sigmoid and q/k L2 norm in
the kernel. fla's step does not include the short convolutions or the gated output norm (ours
does). One CUDA graph of 64 steps rotating over 4 disjoint slot sets; median of 15 replays.
"""
import sys

import torch
from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

STEPS, REPS, SETS, SLOTS = 64, 15, 4, 1024


def main():
    H = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    D = 128
    dev = "cuda"
    torch.manual_seed(0)
    pool = torch.randn(SLOTS, H, D, D, device=dev) * 0.05
    perm = torch.randperm(SLOTS, device=dev).to(torch.int32)
    a_log = torch.randn(H, device=dev) * 0.5
    dt_bias = torch.randn(H * D, device=dev) * 0.5
    print(f"fla fused_recurrent_kda_fwd, H={H} D={D}, fp32, {STEPS} steps per graph replay")
    print(f"{'batch':>5} {'us/step':>10} {'state TB/s':>10}")
    for B in (1, 3, 8, 16, 32, 64, 128, 256):
        q = torch.randn(B, 1, H, D, device=dev)
        k = torch.randn(B, 1, H, D, device=dev)
        v = torch.randn(B, 1, H, D, device=dev)
        g = torch.randn(B, 1, H, D, device=dev)
        beta = torch.randn(B, 1, H, device=dev)
        out = torch.empty_like(v)
        sets = [perm[i * B:(i + 1) * B].contiguous() for i in range(SETS)]

        def step(i):
            fused_recurrent_kda_fwd(q, k, v, g, beta, A_log=a_log, dt_bias=dt_bias, initial_state=pool,
                                    inplace_final_state=True, state_v_first=True, ssm_state_indices=sets[i % SETS],
                                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                    use_beta_sigmoid_in_kernel=True, lower_bound=-5.0, out=out)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(3):
                step(i)  # compile and warm outside the capture
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(STEPS):
                step(i)
        for _ in range(3):
            graph.replay()
        times = []
        for _ in range(REPS):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        ms = sorted(times)[len(times) // 2]
        us = ms * 1e3 / STEPS
        bytes_ = B * H * D * D * 4 * 2
        print(f"{B:>5} {us:>10.2f} {bytes_ / (us * 1e-6) / 1e12:>10.3f}")


if __name__ == "__main__":
    main()
