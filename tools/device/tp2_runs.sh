#!/usr/bin/env bash
# The issue-10 device runs on nvidia-h200-x2 (docs/perf.md, "Tensor parallelism on two H200s").
# Binaries built on the dev machine, stripped, carried in .dev/nccl/{bin,lib} with tp2_ask.py;
# first call: this script with "1", second call: with "2". Writes logs under $OUT.
set -u
D=.dev/nccl
if [ "${1:-1}" = 1 ]; then
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=.dev/nccl
chmod +x "$D"/bin/* 2>/dev/null
NCCLDIR=$(python3 -c "import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)/lib
[ -e "$NCCLDIR/libnccl.so.2" ] || NCCLDIR=$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")
echo "NCCL dir: $NCCLDIR"; ls -la "$NCCLDIR"
export LD_LIBRARY_PATH="$PWD/$D"/lib:$NCCLDIR:$LD_LIBRARY_PATH
nvidia-smi -L; nvidia-smi topo -m > "$OUT"/topo.txt 2>&1; cat "$OUT"/topo.txt
for b in "$D"/bin/*; do ldd "$b" | grep "not found" && echo "MISSING in $b"; done
echo "=== cuda_tp_test"; timeout 60 "$D"/bin/cuda_tp_test > "$OUT"/cuda_tp_test.log 2>&1; echo "rc $?"; grep -E "OK|FAILED|error|PASSED|SKIP|identical|NCCL|cuda \(" "$OUT"/cuda_tp_test.log | head -60
echo "=== cuda_forward_test"; timeout 35 "$D"/bin/cuda_forward_test --gtest_filter=-*Golden* > "$OUT"/cuda_forward_test.log 2>&1; echo "rc $?"; tail -5 "$OUT"/cuda_forward_test.log
echo "=== tp_bench"; timeout 60 "$D"/bin/tp_bench > "$OUT"/tp_bench.log 2>&1; echo "rc $?"; cat "$OUT"/tp_bench.log
echo "=== serve --tp 2"
"$D"/bin/pdserve make-model --preset tiny-k3 --out /tmp/tk3 > /dev/null
"$D"/bin/pdserve serve --model /tmp/tk3 --device cuda --tp 2 --port 30011 > "$OUT"/serve_tp2.log 2>&1 &
SP=$!
timeout 25 python3 "$D"/tp2_ask.py 30011 "$OUT"/serve_tp2_answer.json
echo
kill "$SP"; wait "$SP"
"$D"/bin/pdserve serve --model /tmp/tk3 --device cuda --tp 1 --port 30012 > "$OUT"/serve_tp1.log 2>&1 &
SP=$!
timeout 25 python3 "$D"/tp2_ask.py 30012 "$OUT"/serve_tp1_answer.json
kill "$SP"; wait "$SP"
python3 -c "
import json;a=json.load(open('$OUT/serve_tp2_answer.json'));b=json.load(open('$OUT/serve_tp1_answer.json'))
print('TP2 == TP1 message:', a['choices'][0]['message']==b['choices'][0]['message'], a.get('usage'))"
grep -E "device:|listening|error" "$OUT"/serve_tp2.log | head
echo "=== serve --tp 4 (2 GPUs)"; timeout 30 "$D"/bin/pdserve serve --model /tmp/tk3 --device cuda --tp 4 --port 30013 > "$OUT"/serve_tp4.log 2>&1; echo "rc $?"; tail -2 "$OUT"/serve_tp4.log
echo "=== unset NCCL"; LD_LIBRARY_PATH="$PWD/$D"/lib timeout 10 "$D"/bin/pdserve serve --model /tmp/tk3 --device cuda --tp 2 --port 30014 > "$OUT"/serve_nonccl.log 2>&1; echo "rc $?"; tail -2 "$OUT"/serve_nonccl.log
else
D=.dev/nccl
chmod +x "$D"/bin/*
export LD_LIBRARY_PATH="$PWD/$D"/lib:$LD_LIBRARY_PATH
echo "=== cuda_tp_test"; timeout 90 "$D"/bin/cuda_tp_test > "$OUT"/cuda_tp_test2.log 2>&1; echo "rc $?"; grep -E "OK|FAILED|Failure|error|PASSED|identical|NCCL|Expected|Which|diverged" "$OUT"/cuda_tp_test2.log | head -60
echo "=== compute-sanitizer (memcheck) on the TP2 mixed batch, tiny-k3"
timeout 90 compute-sanitizer --tool memcheck "$D"/bin/cuda_tp_test --gtest_filter='Tiny/CudaTp2.MixedBatches*/0:Tiny/TpHandover.*/0' > "$OUT"/sanitizer.log 2>&1; echo "rc $?"; tail -8 "$OUT"/sanitizer.log
fi
