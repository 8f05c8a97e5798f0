#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a lent GPU machine (x86-64, Python 3.12, CUDA 13, no
# network; its image has numpy, pandas, typer, rich, httpx, transformers...): MLX for CUDA and
# the few packages of bt's that the image lacks, at the versions of requirements/linux-cpu.txt.
#
# The mlx-cuda-13 wheel (90 MB) is larger than what one device call may carry (64 MiB with the
# working tree), so its files travel stripped and xz-compressed (74 MB), split in two:
#   .carry1/  the first half                      (carry it in call 1)
#   .carry2/  the second half and the small wheels (carry it in call 2)
# Both folders are ignored by git (.git/info/exclude). Then, on a machine lent to the session:
#   run(carry=[".carry1"], command="mkdir -p .gpu && cp .carry1/* .gpu/")
#   run(carry=[".carry2"], command="bash bench/gpu_check.sh", timeout_s=540)   # at once: warm
# (the first call's .gpu/ stays on the machine while it is warm).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/linux-cpu.txt
pin() { grep -E "^$1==" "$LOCK" | head -1 | cut -d' ' -f1; }
MLX=$(pin mlx)
for dir in .carry1 .carry2 .gpu; do
  grep -qx "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >>.git/info/exclude
done
rm -rf .carry1 .carry2
mkdir -p .carry1 .carry2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$@"
}
download "$work" "mlx-cuda-13==${MLX#mlx==}"
download .carry2 "$MLX" "$(pin mlx-lm)" "$(pin math-verify)" "$(pin latex2sympy2-extended)" \
  "$(pin antlr4-python3-runtime)" "$(pin latex2mathml)" "$(pin gguf)" "$(pin typer)"
mkdir "$work/files"
unzip -q "$work"/mlx_cuda_13-*.whl -d "$work/files"
strip --strip-unneeded "$work/files/mlx/lib/libmlx.so"
tar -cf - -C "$work/files" . | xz -9 -T2 >"$work/mlx-cuda.tar.xz"
split -n 2 -d "$work/mlx-cuda.tar.xz" "$work/mlx-cuda.tar.xz.part-"
mv "$work/mlx-cuda.tar.xz.part-00" .carry1/
mv "$work/mlx-cuda.tar.xz.part-01" .carry2/
du -sh .carry1 .carry2
