// `escpod` is two programs. The front, `escpod`, runs the POD5 commands (inspect, view, filter,
// index, ...) and links only what they need; every other command line (demux, model, convert,
// bam-filter, report, simulate, `--help`, none) it hands unchanged to `escpod-full`, which links
// every layer and runs every command. Why (measured, bench/results/index.md): loading and
// relocating oneDNN, protobuf, HDF5, htslib, Parquet and the libraries they pull in cost ~20 ms
// of CPU at every start, as much as the whole of pulling 100 reads by id through the index.
#pragma once

namespace escpod::cli {

// Replaces this process with escpod-full (the ESCPOD_FULL environment variable, else the file
// `escpod-full` beside this executable), same arguments, same process id, so exit status,
// signals and resource use are the command's own. Returns only when that fails: the exit
// status to leave with, after printing why on stderr.
// quiet_if_missing: no message when escpod-full cannot be run (the caller falls back).
int exec_full(char** argv, bool quiet_if_missing = false);

}  // namespace escpod::cli
