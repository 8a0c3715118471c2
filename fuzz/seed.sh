#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.
#
# Corpora are not committed (/fuzz/corpus is in .gitignore): the seeds are
# made by the targets themselves. Each target, run with MOVER_FUZZ_WRITE_SEEDS
# set to a directory, writes its seeds there from its `init` block and exits
# before fuzzing. The targets must be built first (`cargo fuzz build -a`, see
# README.md); existing corpus files are kept.
#
# Usage: fuzz/seed.sh [TARGET...]   (default: every target)
set -euo pipefail
cd "$(dirname "$0")"
triple="${CARGO_BUILD_TARGET:-x86_64-unknown-linux-gnu}"
bin_dir="${CARGO_TARGET_DIR:-target}/$triple/release"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(frame_decoder delta_applier checkpoint_parser block_writer block_checkpoint_parser)
fi
for t in "${targets[@]}"; do
    if [ ! -x "$bin_dir/$t" ]; then
        echo "seed.sh: $bin_dir/$t is not built; run: RUSTC_BOOTSTRAP=1 cargo fuzz build -a $t" >&2
        exit 1
    fi
    mkdir -p "corpus/$t"
    MOVER_FUZZ_WRITE_SEEDS="corpus/$t" "$bin_dir/$t"
done
