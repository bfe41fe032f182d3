#!/bin/bash
# The measurements the plans still lack, in one run on a machine with many cores and a GPU (one build of 1M vectors
# of the plans' dim 768 took 36.5 s on one thread in bench/build_scaling_768.log; the GPU part's time is not
# measured):
#   - the index build's thread scaling at 1, 2, 4, 8, 16 (and 32) threads, as many as the machine has cores, at
#     the plans' dim (bench/build_scaling.py --dim 768; recipes/plan.py reads the curve from
#     bench/build_scaling_768.json);
#   - the recipes' training, encoding and doc2query generation rates on the GPU (bench/throughput.py --device
#     cuda, bfloat16 autocast), when torch sees one;
#   - the index build with GPU Faiss beside the CPU build, and a GPU search (bench/gpu_build.py), when Faiss sees
#     a GPU (faiss-gpu==1.15.1 installed in place of faiss-cpu).
# Needs numpy, torch, transformers, tqdm and faiss (faiss-cpu==1.15.1 or faiss-gpu==1.15.1) importable by python3.
#
#     bash bench/device_checks.sh OUTDIR
#
# Writes, into a new or empty OUTDIR (a non-empty one is refused), build_scaling_768.{log,json},
# throughput_gpu.{log,json} and gpu_build.{log,json}; commit them under bench/ with a header naming the command,
# the machine and the commit.
set -euo pipefail
out=${1:?usage: bash bench/device_checks.sh OUTDIR}
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then  # its fixed file names would replace what is there
    echo "device_checks: $out is not empty: give a new or empty folder" >&2
    exit 2
fi
mkdir -p "$out"
export JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
cores=$(nproc)
threads="1"
for t in 2 4 8 16 32; do
    if [ "$t" -le "$cores" ]; then threads="$threads $t"; fi
done
echo "# $(date -u '+%F %H:%M UTC'); git $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $cores cores"
python3 bench/build_scaling.py --threads $threads --vectors 1000000 --dim 768 \
    --json "$out/build_scaling_768.json" 2>&1 | tee "$out/build_scaling_768.log"
if python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    python3 bench/throughput.py --device cuda --amp bf16 --train_batch 32 --encode_batch 256 --gen_passages 32 \
        --seconds 5 --json "$out/throughput_gpu.json" 2>&1 | tee "$out/throughput_gpu.log"
else
    echo "torch sees no GPU: the GPU rates are not measured"
fi
if python3 -c "import sys, faiss; sys.exit(not (hasattr(faiss, 'StandardGpuResources') and faiss.get_num_gpus()))"; then
    python3 bench/gpu_build.py --vectors 1000000 --factory IVF4096,Flat --json "$out/gpu_build.json" \
        2>&1 | tee "$out/gpu_build.log"
else
    echo "Faiss sees no GPU (faiss-cpu): the GPU build is not measured"
fi
