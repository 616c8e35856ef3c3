#include "escpod/pipeline/ops/read_fields.hpp"

#include "escpod/pipeline/ops/annotations.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <type_traits>

#include "escpod/core/executor.hpp"
#include "escpod/core/ordered_stream.hpp"
#include "escpod/core/progress.hpp"
#include "read_stream.hpp"

namespace escpod::pipeline {
namespace {

// Numbers through std::to_chars: view prints millions of them and fmt's generic path costs
// several times more. Floats come out in their shortest round-trip form ("nan" for NaN).
template <typename T>
void append_number(std::string& out, T v) {
  char buf[48];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // floats: shortest round trip
  out.append(buf, static_cast<size_t>(end - buf));
}

#define ESCPOD_FIELD(NAME, HELP, EXPR)                                                        \
  ReadField {                                                                                 \
    NAME, HELP,                                                                               \
        [](const pod5::FileReader& file, const pod5::ReadBatch& b, size_t i,                  \
           std::string& out) -> Status {                                                      \
          (void)file; (void)b; (void)i;                                                       \
          EXPR;                                                                               \
          return Status::ok();                                                                \
        }                                                                                     \
  }

}  // namespace

const std::vector<ReadField>& all_read_fields() {
  static const std::vector<ReadField> fields = {
      ESCPOD_FIELD("read_id", "read UUID", {
        char buf[36];
        b.read_id[i].format_to(buf);
        out.append(buf, 36);
      }),
      ESCPOD_FIELD("filename", "file the read is in", out += file.path().filename().string()),
      ESCPOD_FIELD("channel", "1-based channel", append_number(out, b.channel[i])),
      ESCPOD_FIELD("well", "1-based well (mux)", append_number(out, b.well[i])),
      ESCPOD_FIELD("read_number", "per-channel read counter", append_number(out, b.read_number[i])),
      ESCPOD_FIELD("start_sample", "samples on the channel before the read", append_number(out, b.start_sample[i])),
      ESCPOD_FIELD("num_samples", "samples in the read", append_number(out, b.num_samples[i])),
      ESCPOD_FIELD("end_reason", "why the read ended",
                   out += file.end_reasons()[static_cast<size_t>(b.end_reason_idx[i])]),
      ESCPOD_FIELD("end_reason_forced", "end forced externally",
                   out += (b.end_reason_forced[i] ? "true" : "false")),
      ESCPOD_FIELD("pore_type", "pore type", out += file.pore_types()[static_cast<size_t>(b.pore_type_idx[i])]),
      ESCPOD_FIELD("median_before", "current before the read, pA", append_number(out, b.median_before[i])),
      ESCPOD_FIELD("num_minknow_events", "MinKNOW events", append_number(out, b.num_minknow_events[i])),
      ESCPOD_FIELD("calibration_offset", "ADC offset", append_number(out, b.calibration_offset[i])),
      ESCPOD_FIELD("calibration_scale", "pA per ADC unit", append_number(out, b.calibration_scale[i])),
      ESCPOD_FIELD("run_info", "acquisition id", out += file.run_info_ids()[static_cast<size_t>(b.run_info_idx[i])]),
      ESCPOD_FIELD("sample_rate", "samples per second (from the run info)", {
        const auto* ri = file.find_run_info(file.run_info_ids()[static_cast<size_t>(b.run_info_idx[i])]);
        if (ri) append_number(out, ri->sample_rate);
      }),
      ESCPOD_FIELD("open_pore_level", "open-pore current, pA", append_number(out, b.open_pore_level[i])),
      ESCPOD_FIELD("expected_open_pore_level", "expected open-pore current, pA",
                   append_number(out, b.expected_open_pore_level[i])),
      ESCPOD_FIELD("selected_read_level", "selected read level, pA", append_number(out, b.selected_read_level[i])),
      ESCPOD_FIELD("tracked_scaling_scale", "deprecated", append_number(out, b.tracked_scaling_scale[i])),
      ESCPOD_FIELD("tracked_scaling_shift", "deprecated", append_number(out, b.tracked_scaling_shift[i])),
      ESCPOD_FIELD("predicted_scaling_scale", "deprecated", append_number(out, b.predicted_scaling_scale[i])),
      ESCPOD_FIELD("predicted_scaling_shift", "deprecated", append_number(out, b.predicted_scaling_shift[i])),
      ESCPOD_FIELD("num_reads_since_mux_change", "deprecated", append_number(out, b.num_reads_since_mux_change[i])),
      ESCPOD_FIELD("time_since_mux_change", "deprecated, s", append_number(out, b.time_since_mux_change[i])),
      ESCPOD_FIELD("signal_hash", "checksum of the decoded samples (decodes the signal)", {
        thread_local pod5::VbzCodec codec;
        thread_local std::vector<int16_t> samples;
        samples.resize(b.num_samples[i]);
        ESCPOD_RETURN_IF_ERROR(file.read_signal(b.rows_of(i), samples, codec));
        fmt::format_to(std::back_inserter(out), "{:016x}", pod5::signal_hash(samples));
      }),
      ESCPOD_FIELD("signal_rows", "signal-table rows (;-separated)", {
        bool first = true;
        for (uint64_t r : b.rows_of(i)) {
          if (!first) out += ';';
          first = false;
          append_number(out, r);
        }
      }),
  };
  return fields;
}

const std::vector<std::string_view>& default_view_fields() {
  static const std::vector<std::string_view> names = {
      "read_id", "channel", "well", "read_number", "start_sample", "num_samples", "end_reason"};
  return names;
}

const ReadField* find_read_field(std::string_view name) {
  for (const auto& f : all_read_fields())
    if (f.name == name) return &f;
  return nullptr;
}

namespace {

// Appends the cells of `columns` for read i (empty where the file has no sidecar, the sidecar no
// such column, or the read no value). False when the sidecar's locator disagrees with the POD5.
bool append_sidecar_cells(const SidecarLookup* lookup, const pod5::FileReader& file, const pod5::ReadBatch& batch,
                          size_t i, const std::vector<std::string>& columns, const std::string& separator,
                          bool first, std::string& out) {
  if (columns.empty()) return true;
  const pod5::Sidecar* sc = lookup ? lookup->sidecar_of(file) : nullptr;
  std::optional<size_t> row;
  if (sc) {
    row = lookup->row(file, batch, i);
    if (!row) return false;
  }
  for (size_t k = 0; k < columns.size(); ++k) {
    if (k || !first) out += separator;
    if (!sc) continue;
    if (const pod5::AnnotationColumn* col = sc->find(columns[k])) out += col->text(*row);
  }
  return true;
}

}  // namespace

namespace {

// One reads batch of the table: a record of the engine's ring, reused (its text buffer keeps
// its capacity from one batch to the next).
struct TableJob {
  std::shared_ptr<const pod5::FileReader> file;
  size_t batch = 0;
  std::string text;
  std::shared_ptr<const SidecarLookup> lookup;
  uint64_t first_read = 0, n_reads = 0;  // of the batch (progress)
};

// Formats the wanted reads of job.batch into job.text.
Status format_batch(TableJob& job, const std::vector<const ReadField*>& fields, const std::string& separator,
                    const std::unordered_set<pod5::ReadId, pod5::ReadIdHash>* wanted,
                    const std::vector<std::string>& sidecar_columns) {
  ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch batch, job.file->read_batch(job.batch));
  job.first_read = batch.first_read_idx;
  job.n_reads = batch.size();
  std::string& s = job.text;
  s.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (wanted && !wanted->count(batch.read_id[i])) continue;
    for (size_t k = 0; k < fields.size(); ++k) {
      if (k) s += separator;
      ESCPOD_RETURN_IF_ERROR(fields[k]->append(*job.file, batch, i, s));
    }
    if (!append_sidecar_cells(job.lookup.get(), *job.file, batch, i, sidecar_columns, separator,
                              fields.empty(), s)) {
      return job.lookup->error();
    }
    s += '\n';
  }
  return Status::ok();
}

}  // namespace

Status write_read_table(const std::vector<std::filesystem::path>& files,
                        const std::vector<const ReadField*>& fields, const std::string& separator,
                        const std::unordered_set<pod5::ReadId, pod5::ReadIdHash>* wanted,
                        int n_threads_wanted, const std::function<bool(std::string_view)>& write,
                        const std::vector<std::string>& sidecar_columns) {
  // Batches are formatted in parallel and written in input order (identical output for any
  // thread count) by the streaming engine; source and sink both run on the calling thread, so
  // the reader state below needs no lock.
  std::shared_ptr<const pod5::FileReader> current;
  std::shared_ptr<const SidecarLookup> current_lookup;
  size_t file_idx = 0, batch_idx = 0;
  // Files are opened one after another: bytes are known now, reads as each file opens.
  uint64_t n_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec) n_bytes += size;
  }
  progress::Task progress(0, n_bytes);
  auto open_next_file = [&]() -> Status {
    ESCPOD_ASSIGN_OR_RETURN(auto f, pod5::FileReader::open(files[file_idx]));
    current = std::move(f);
    current_lookup.reset();
    if (!sidecar_columns.empty()) {
      ESCPOD_ASSIGN_OR_RETURN(current_lookup, SidecarLookup::open({current.get()}, false));
    }
    progress.add_totals(current->info().n_reads, 0);
    return Status::ok();
  };
  auto next_job = [&](TableJob& job, uint64_t* bytes, bool* end) -> Status {
    while (true) {
      if (file_idx == files.size()) {
        *end = true;
        return Status::ok();
      }
      if (!current) ESCPOD_RETURN_IF_ERROR(open_next_file());
      if (batch_idx == current->n_read_batches()) {
        current.reset();  // unmaps once its jobs are done
        current_lookup.reset();
        ++file_idx;
        batch_idx = 0;
        continue;
      }
      job.file = current;
      job.lookup = current_lookup;
      job.batch = batch_idx++;
      // The text of a batch: about 24 bytes a cell.
      *bytes = current->batch_rows(job.batch) * (fields.size() + sidecar_columns.size() + 1) * 24;
      return Status::ok();
    }
  };
  auto write_job = [&](TableJob& job, bool* stop) -> Status {
    if (!write(job.text)) *stop = true;  // the consumer is done (a closed pipe): not an error
    progress.add(job.n_reads, detail::input_bytes_of(*job.file, job.first_read, job.n_reads));
    job.file.reset();
    job.lookup.reset();
    return Status::ok();
  };
  Executor& ex = Executor::for_threads(std::max(1, n_threads_wanted));
  OrderedStream<TableJob, char> stream(
      ex, {.max_bytes = uint64_t{64} << 20, .max_items = static_cast<size_t>(2 * ex.width() + 2)});
  return stream.run(
      next_job, [] { return char{}; },
      [&](TableJob& job, char&) { return format_batch(job, fields, separator, wanted, sidecar_columns); },
      write_job);
}

}  // namespace escpod::pipeline
