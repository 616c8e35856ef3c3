#include "escpod/pipeline/ops/pod5_recover.hpp"

#include <fmt/format.h>

#include <set>
#include <unordered_set>

#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pod5/recover.hpp"

namespace escpod::pipeline {
namespace {

std::string describe(const char* name, const pod5::TableScan& scan) {
  std::string from = scan.source.empty() ? "" : " (" + scan.source.filename().string() + ")";
  if (!scan.found) {
    return fmt::format("{} table{}: not found{}", name, from, scan.stop.empty() ? "" : ": " + scan.stop);
  }
  return fmt::format("{} table{}: {} batches, {} rows salvaged; {}", name, from, scan.n_batches,
                     scan.n_rows, scan.complete ? "complete" : "stopped: " + scan.stop);
}

}  // namespace

std::filesystem::path recovered_path(const std::filesystem::path& input,
                                     const std::filesystem::path& out_dir) {
  const auto name = input.stem().string() + "_recovered.pod5";
  return out_dir.empty() ? input.parent_path() / name : out_dir / name;
}

namespace {

using IdSet = std::unordered_set<pod5::ReadId, pod5::ReadIdHash>;

// What recovery found, for the report: the kind of damage and each table's salvage.
void describe_damage(const pod5::DamagedFile& damaged, RecoverReport& rep) {
  rep.kind = damaged.kind == pod5::DamageKind::kUnfinished ? "unfinished (killed writer)"
                                                           : "truncated or damaged";
  rep.bytes_unused = damaged.bytes_unused;
  rep.n_signal_rows_found = damaged.signal.n_rows;
  rep.n_reads_rows_found = damaged.reads.n_rows;
  rep.notes.push_back(describe("signal", damaged.signal));
  rep.notes.push_back(describe("run info", damaged.run_info));
  rep.notes.push_back(describe("reads", damaged.reads));
  for (const auto& n : damaged.notes) rep.notes.push_back(n);
}

// Pass 1 over the salvaged reads: which rows are complete (keep[batch][row], the first copy of
// each id), every id the reads table holds, and the run infos the kept reads need. Reads lost
// are counted in rep.lost by reason.
struct CompleteReads {
  std::vector<std::vector<uint8_t>> keep;
  IdSet in_reads;
  std::set<std::string> needed_runs;
};

CompleteReads find_complete_reads(const pod5::FileReader& file, RecoverReport& rep) {
  pod5::VbzCodec codec;
  std::vector<int16_t> samples;
  CompleteReads out;
  out.keep.resize(file.n_read_batches());
  IdSet kept_ids;
  for (size_t b = 0; b < file.n_read_batches(); ++b) {
    auto batch = file.read_batch(b);
    if (!batch.is_ok()) {
      rep.notes.push_back("reads batch " + std::to_string(b) + " undecodable: " + batch.status().message());
      continue;
    }
    out.keep[b].assign(batch->size(), 0);
    for (size_t i = 0; i < batch->size(); ++i) {
      out.in_reads.insert(batch->read_id[i]);
      const auto state = pod5::check_read_signal(file, *batch, i, codec, samples);
      if (state != pod5::ReadSignalState::kComplete) {
        ++rep.lost[pod5::read_signal_state_name(state)];
      } else if (!kept_ids.insert(batch->read_id[i]).second) {
        ++rep.lost["duplicate read id (the first is kept)"];
      } else {
        out.keep[b][i] = 1;
        out.needed_runs.insert(file.run_info_ids()[static_cast<size_t>(batch->run_info_idx[i])]);
      }
    }
  }
  return out;
}

// Run infos the salvaged tables lack (`missing_runs`): from --run-info-from into `filled` (then
// none is missing any more; kNotFound when a donor lacks one), or the reads needing them are lost.
Status fill_run_infos(const std::filesystem::path& input, const RecoverOptions& options,
                      std::set<std::string>& missing_runs, std::vector<pod5::RunInfo>& filled, RecoverReport& rep) {
  if (missing_runs.empty() || options.run_info_from.empty()) return Status::ok();
  std::vector<std::unique_ptr<pod5::FileReader>> donors;
  for (const auto& p : options.run_info_from) {
    auto donor = pod5::FileReader::open(p);
    if (!donor.is_ok()) return donor.status().with_context("--run-info-from");
    donors.push_back(std::move(donor).value());
  }
  for (const auto& id : missing_runs) {
    const pod5::RunInfo* found = nullptr;
    for (const auto& d : donors) {
      if ((found = d->find_run_info(id))) break;
    }
    if (!found) {
      std::string names, held;
      for (const auto& d : donors) {
        names += (names.empty() ? "" : ", ") + d->path().string();
        for (const auto& r : d->run_infos()) held += (held.empty() ? "" : ", ") + r.acquisition_id;
      }
      return Status::not_found(input.string() + ": its reads name run info (acquisition id) '" +
                               id + "', which --run-info-from " + names +
                               " does not hold (it holds: " + (held.empty() ? "none" : held) + ")");
    }
    filled.push_back(*found);
    rep.run_infos_filled.push_back(id);
  }
  missing_runs.clear();
  return Status::ok();
}

// Counts the reads with signal whose reads row was never written (or is lost with its table).
void count_orphan_signal(const pod5::DamagedFile& damaged, const IdSet& in_reads, RecoverReport& rep) {
  const pod5::FileReader& file = *damaged.reader;
  const bool reads_cut = damaged.reads.found && !damaged.reads.complete &&
                        damaged.reads.stop.rfind("record batch", 0) == 0;
  const std::string orphan_reason =
      reads_cut ? "signal present but reads-table row lost (its reads batch is cut or damaged)"
      : damaged.kind == pod5::DamageKind::kUnfinished
          ? "signal written but reads-table row never flushed by the writer"
          : "signal present but reads-table row lost (reads table cut or missing)";
  IdSet orphans;
  const pod5::ReadId zero{};
  for (uint64_t row = 0; row < damaged.signal.n_rows; ++row) {
    auto chunk = file.signal_chunk(row);
    if (chunk.is_ok() && chunk->read_id != zero && !in_reads.count(chunk->read_id)) {
      orphans.insert(chunk->read_id);
    }
  }
  if (!orphans.empty()) rep.lost[orphan_reason] = orphans.size();
}

// Pass 2: writes the complete reads (`keep`) whose run info is known (not in `missing_runs`) to
// `output`, created on the first such read with the file's run infos and the `filled` ones.
Status write_recovered_reads(const pod5::FileReader& file, const std::vector<std::vector<uint8_t>>& keep,
                             const std::set<std::string>& missing_runs, const std::vector<pod5::RunInfo>& filled,
                             const std::filesystem::path& output, const RecoverOptions& options, RecoverReport& rep) {
  std::unique_ptr<pod5::FileWriter> writer;
  CopyScratch scratch;
  CopyStats stats;
  for (size_t b = 0; b < keep.size(); ++b) {
    if (keep[b].empty()) continue;
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch batch, file.read_batch(b));
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!keep[b][i]) continue;
      const auto& run = file.run_info_ids()[static_cast<size_t>(batch.run_info_idx[i])];
      if (missing_runs.count(run)) {
        ++rep.lost["run info '" + run + "' missing (rerun with --run-info-from FILE of the same run)"];
        continue;
      }
      if (!writer) {
        ESCPOD_ASSIGN_OR_RETURN(writer, pod5::FileWriter::create(output, options.writer));
        for (const auto& ri : file.run_infos()) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
        for (const auto& ri : filled) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
      }
      ESCPOD_RETURN_IF_ERROR(prepare_read(file, batch, i, scratch.prepared));
      ESCPOD_RETURN_IF_ERROR(copy_prepared(file, batch, scratch.prepared, *writer, scratch, &stats));
    }
  }
  rep.n_reads_recovered = stats.n_reads;
  rep.n_samples_recovered = stats.n_samples;
  if (writer) {
    ESCPOD_RETURN_IF_ERROR(writer->close());
    rep.output = output;
  }
  return Status::ok();
}

}  // namespace

Result<RecoverReport> recover_file(const std::filesystem::path& input,
                                   const std::filesystem::path& output,
                                   const RecoverOptions& options) {
  RecoverReport rep;
  rep.input = input;
  if (auto intact = pod5::FileReader::open(input); intact.is_ok()) {
    if ((*intact)->signal_table_info().is_ok()) {
      rep.intact = true;
      return rep;
    }
  }
  ESCPOD_ASSIGN_OR_RETURN(pod5::DamagedFile damaged, pod5::open_damaged(input));
  const pod5::FileReader& file = *damaged.reader;
  describe_damage(damaged, rep);
  const CompleteReads complete = find_complete_reads(file, rep);
  std::vector<pod5::RunInfo> filled;
  std::set<std::string> missing_runs;
  for (const auto& id : complete.needed_runs) {
    if (!file.find_run_info(id)) missing_runs.insert(id);
  }
  ESCPOD_RETURN_IF_ERROR(fill_run_infos(input, options, missing_runs, filled, rep));
  count_orphan_signal(damaged, complete.in_reads, rep);
  ESCPOD_RETURN_IF_ERROR(write_recovered_reads(file, complete.keep, missing_runs, filled, output, options, rep));
  return rep;
}

std::string format_recover_report(const RecoverReport& r) {
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };
  if (r.intact) {
    line(r.input.string() + ": intact, nothing to recover");
    return out;
  }
  line(fmt::format("{}: {} -> {}", r.input.string(), r.kind,
                   r.output.empty() ? "nothing written (no complete read)" : r.output.string()));
  line(fmt::format("  reads recovered      {} ({} samples)", r.n_reads_recovered, r.n_samples_recovered));
  uint64_t n_lost = 0;
  for (const auto& [why, n] : r.lost) n_lost += n;
  line(fmt::format("  reads lost           {}", n_lost));
  for (const auto& [why, n] : r.lost) line(fmt::format("    {:>8}  {}", n, why));
  line(fmt::format("  bytes unused         {}", r.bytes_unused));
  for (const auto& id : r.run_infos_filled) line("  run info filled      " + id);
  for (const auto& n : r.notes) line("  " + n);
  return out;
}

}  // namespace escpod::pipeline
