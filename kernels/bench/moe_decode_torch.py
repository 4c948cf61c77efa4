"""Torch anchor for moe_decode_bench: the same touched experts and rows per expert (read
from the bench's --routes file), with bf16 weights already dequantised (4x the MXFP4
bytes): per expert x W13^T -> SiTU(4, 25) -> W2^T, one matmul per touched expert (eager
and CUDA-graph replayed), and torch._grouped_mm over the touched experts where present.
Prints the time and, like the bench, the touched experts' MXFP4 bytes / time, plus the bf16
bytes actually read / time. CUDA events, median of REPS after warm-up; 2 weight sets.

    python3 moe_decode_torch.py ROUTES_FILE [BW_BYTES_PER_S]
"""
import sys

import torch
from bench_timing import median_us

DIM, INTER = 3584, 3072
MAT = DIM * INTER
MXFP4_PER_EXPERT = 3 * MAT // 2 + 3 * MAT // 32
REPS = 50


def situ(g, u, beta=4.0, lin=25.0):
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * (lin * torch.tanh(u / lin))


def main():
    routes = [list(map(int, line.split())) for line in open(sys.argv[1]) if line.strip()]
    bw = float(sys.argv[2]) if len(sys.argv) > 2 else 4.2e12
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; grouped mm: {hasattr(torch, '_grouped_mm')}")
    print("| case | us | floor us | ratio | effective (MXFP4 bytes) | bf16 bytes/time | note")
    print("|---|---|---|---|---|---|---")
    for r in routes:
        tokens, counts = r[0], r[1:]
        nt = len(counts)
        sets = 2
        w13 = [torch.randn(nt, 2 * INTER, DIM, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(sets)]
        w2 = [torch.randn(nt, DIM, INTER, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(sets)]
        xs = [torch.randn(c, DIM, device=dev, dtype=torch.bfloat16) for c in counts]
        mx = nt * MXFP4_PER_EXPERT
        floor = mx / bw * 1e6
        bf = nt * 3 * MAT * 2

        def loop(i):
            s = i % sets
            outs = []
            for e in range(nt):
                h = xs[e] @ w13[s][e].t()
                outs.append(situ(h[:, :INTER], h[:, INTER:]) @ w2[s][e].t())
            return outs

        def report(name, us, note=""):
            print(f"| B={tokens} {name} | {us:.1f} | {floor:.1f} | {us / floor:.2f}x | {mx / us * 1e-6:.2f} TB/s | "
                  f"{bf / us * 1e-6:.2f} TB/s | {nt} experts, {sum(counts)} rows {note}")

        report("torch bf16 per-expert matmuls, eager", median_us(loop, REPS))
        graphs = []
        for s in range(sets):
            g = torch.cuda.CUDAGraph()
            loop(s)
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                loop(s)
            graphs.append(g)
        report("torch bf16 per-expert matmuls, graph", median_us(lambda i: graphs[i % sets].replay(), REPS))
        if hasattr(torch, "_grouped_mm"):
            try:
                xcat = torch.cat(xs)
                offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)

                def grouped(i):
                    s = i % sets
                    h = torch._grouped_mm(xcat, w13[s].transpose(-2, -1), offs=offs)
                    a = situ(h[:, :INTER], h[:, INTER:]).contiguous()
                    return torch._grouped_mm(a, w2[s].transpose(-2, -1), offs=offs)

                report("torch._grouped_mm bf16", median_us(grouped, REPS))
            except Exception as ex:  # noqa: BLE001 - report and go on
                print(f"| B={tokens} torch._grouped_mm | - | - | - | - | - | failed: {type(ex).__name__}: {str(ex)[:120]}")
        del w13, w2
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
