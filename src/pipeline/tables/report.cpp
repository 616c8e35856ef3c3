#include "escpod/pipeline/tables/report.hpp"

#include "escpod/pipeline/tables/barcode_labels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/pod5/read_id.hpp"
#include "pipeline/ops/csv_text.hpp"
#include "pipeline/ops/read_stream.hpp"

namespace escpod::pipeline {

// ---- histograms -------------------------------------------------------------------------------

void Histogram::add(double value) {
  if (counts.empty()) return;
  double x = value;
  if (log10) x = value > 0 ? std::log10(value) : lo;
  const double n = static_cast<double>(counts.size());
  double pos = (x - lo) / (hi - lo) * n;
  if (!(pos >= 0)) pos = 0;  // also NaN
  const size_t i = std::min(counts.size() - 1, static_cast<size_t>(std::min(pos, n - 1)));
  ++counts[i];
}

double Histogram::bin_lo(size_t i) const {
  const double e = lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(counts.size());
  return log10 ? std::pow(10.0, e) : e;
}
double Histogram::bin_hi(size_t i) const { return bin_lo(i + 1); }

uint64_t Histogram::total() const {
  uint64_t t = 0;
  for (uint64_t c : counts) t += c;
  return t;
}

namespace {

Histogram make_hist(double lo, double hi, size_t n, bool log10) {
  Histogram h;
  h.lo = lo;
  h.hi = hi;
  h.log10 = log10;
  h.counts.assign(n, 0);
  return h;
}
Histogram confidence_hist() { return make_hist(0, 1, 20, false); }
Histogram samples_hist() { return make_hist(2, 7, 50, true); }      // 100 .. 10M samples
Histogram duration_hist() { return make_hist(-1, 3, 40, true); }    // 0.1 .. 1000 s
constexpr double kTimeSlotS = 10;  // resolution of read start times over the run

void merge_into(Histogram& into, const Histogram& from) {
  for (size_t i = 0; i < into.counts.size() && i < from.counts.size(); ++i) into.counts[i] += from.counts[i];
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Per-label signal statistics, accumulated per batch and merged under a lock.
struct SignalStats {
  uint64_t n = 0, samples = 0;
  double duration_s = 0;
  Histogram hist = samples_hist();
};

}  // namespace

std::string unclassified_reason_group(std::string_view reason) {
  if (reason.rfind("boundary detection failed: ", 0) == 0 || reason.rfind("no fingerprint: ", 0) == 0) {
    return std::string(reason);
  }
  const auto second = reason.find(": ");
  return std::string(second == std::string_view::npos ? reason : reason.substr(0, second));
}

// ---- collecting -------------------------------------------------------------------------------

namespace {

// The labels of the classified reads, kept (with their ids) only when POD5 inputs are joined.
struct ClassifiedReads {
  std::vector<std::string> labels;  // label index -> name
  std::unordered_map<std::string, uint16_t> label_idx;
  std::vector<std::pair<pod5::ReadId, uint16_t>> ids;
};

// A classifications CSV's columns (-1: absent; read_id and the label are required).
struct ClassificationColumns {
  int id = -1, label = -1, conf = -1, det = -1, reason = -1;
  int needed = -1;  // the highest of them
};

// The line buffers reused over every line of every CSV.
struct CsvScratch {
  std::string line, storage;
  std::vector<std::string_view> cells;
};

Result<ClassificationColumns> classification_columns(const std::filesystem::path& path, CsvScratch& csv) {
  detail::split_csv(csv.line, csv.cells, csv.storage);
  ClassificationColumns c;
  for (size_t i = 0; i < csv.cells.size(); ++i) {
    const auto cell = csv.cells[i];
    const int k = static_cast<int>(i);
    if (cell == "read_id") c.id = k;
    else if (cell == kLabelColumn || (cell == kLegacyLabelColumn && c.label < 0)) c.label = k;
    else if (cell == "confidence") c.conf = k;
    else if (cell == "detector") c.det = k;
    else if (cell == "reason") c.reason = k;
  }
  if (c.id < 0 || c.label < 0) {
    return Status::invalid_argument(path.string() + ": header has no read_id and barcode (or predicted_barcode) columns: " + csv.line);
  }
  c.needed = std::max({c.id, c.label, c.conf, c.det, c.reason});
  return c;
}

// One classification (the cells of line line_no of `path`) into the report; its id and label
// into `reads` when joining POD5 inputs.
Status add_classification(const std::filesystem::path& path, size_t line_no, const ClassificationColumns& col,
                          const std::vector<std::string_view>& cells, bool join, ReportData& d,
                          ClassifiedReads& reads) {
  if (static_cast<int>(cells.size()) <= col.needed) {
    return Status::invalid_argument(fmt::format("{}:{}: expected at least {} cells, found {}", path.string(),
                                                line_no, col.needed + 1, cells.size()));
  }
  const std::string label(cells[static_cast<size_t>(col.label)]);
  double conf = 0;
  if (col.conf >= 0 && !cells[static_cast<size_t>(col.conf)].empty() &&
      !detail::parse_double(cells[static_cast<size_t>(col.conf)], conf)) {
    return Status::invalid_argument(fmt::format("{}:{}: confidence '{}' is not a number", path.string(),
                                                line_no, cells[static_cast<size_t>(col.conf)]));
  }
  auto [it, inserted] = d.barcodes.try_emplace(label);
  BarcodeReport& b = it->second;
  if (inserted) {
    b.confidence = confidence_hist();
    b.signal_samples = samples_hist();
  }
  ++d.n_reads;
  ++b.n_reads;
  b.sum_confidence += conf;
  b.confidence.add(conf);
  const std::string det = col.det >= 0 && !cells[static_cast<size_t>(col.det)].empty()
                              ? std::string(cells[static_cast<size_t>(col.det)])
                              : std::string(col.det >= 0 ? "none" : "unknown");
  ++d.detectors[det];
  ++d.detectors_per_barcode[label][det];
  if (col.reason >= 0 && !cells[static_cast<size_t>(col.reason)].empty()) {
    ++d.unclassified_reasons[unclassified_reason_group(cells[static_cast<size_t>(col.reason)])];
  }
  if (!join) return Status::ok();
  auto id = pod5::ReadId::parse(cells[static_cast<size_t>(col.id)]);
  if (!id.is_ok()) {
    return Status::invalid_argument(fmt::format("{}:{}: read_id '{}' is not a UUID", path.string(),
                                                line_no, cells[static_cast<size_t>(col.id)]));
  }
  auto [li, fresh] = reads.label_idx.try_emplace(label, static_cast<uint16_t>(reads.labels.size()));
  if (fresh) {
    if (reads.labels.size() == 65535) return Status::invalid_argument(path.string() + ": more than 65535 labels");
    reads.labels.push_back(label);
  }
  reads.ids.emplace_back(*id, li->second);
  return Status::ok();
}

// Every classification of the CSV at `path` (blank lines skipped).
Status read_classifications(const std::filesystem::path& path, bool join, CsvScratch& csv, ReportData& d,
                            ClassifiedReads& reads) {
  d.classifications.push_back(path.string());
  ESCPOD_ASSIGN_OR_RETURN(auto reader, detail::LineReader::open(path));
  if (!reader.next(csv.line)) return Status::invalid_argument(path.string() + ": empty file, expected a CSV header");
  ESCPOD_ASSIGN_OR_RETURN(const ClassificationColumns col, classification_columns(path, csv));
  while (reader.next(csv.line)) {
    if (csv.line.empty()) continue;
    detail::split_csv(csv.line, csv.cells, csv.storage);
    ESCPOD_RETURN_IF_ERROR(add_classification(path, reader.line_no(), col, csv.cells, join, d, reads));
  }
  if (!reader.error().empty()) return Status::io_error(path.string() + ": " + reader.error());
  return Status::ok();
}

// What the reads batches of the POD5 inputs add up to, per label (the last entry: reads not in
// the classifications), with the read starts per kTimeSlotS slot of run time.
struct SignalTotals {
  std::vector<SignalStats> per_label;
  std::vector<uint64_t> per_slot;
};

// What one reads batch adds, tallied off the lock (SignalTotals, and the report's histograms and
// run length), then merged under it.
struct BatchTally {
  explicit BatchTally(size_t n_labels) : per_label(n_labels) {}
  std::vector<SignalStats> per_label;
  Histogram dur = duration_hist(), samples = samples_hist();
  std::vector<uint64_t> slots;
  double last_end_h = 0;
};

// Tallies batch `b` (its reads' labels looked up in the sorted `reads.ids`, each found marked
// in `found`; durations at the sample rates `rates` of its run infos).
void tally_batch(const pod5::ReadBatch& b, const ClassifiedReads& reads, std::atomic<uint8_t>* found,
                 const std::vector<double>& rates, BatchTally& t) {
  const auto& ids = reads.ids;
  for (size_t i = 0; i < b.size(); ++i) {
    const auto it = std::lower_bound(ids.begin(), ids.end(), b.read_id[i],
                                     [](const auto& e, const pod5::ReadId& id) { return e.first < id; });
    size_t li = reads.labels.size();
    if (it != ids.end() && it->first == b.read_id[i]) {
      li = it->second;
      found[static_cast<size_t>(it - ids.begin())].store(1, std::memory_order_relaxed);
    }
    const auto ri = static_cast<size_t>(b.run_info_idx[i]);
    const double rate = ri < rates.size() ? rates[ri] : 4000.0;
    const uint64_t n = b.num_samples[i];
    const double secs = static_cast<double>(n) / rate;
    SignalStats& s = t.per_label[li];
    ++s.n;
    s.samples += n;
    s.duration_s += secs;
    s.hist.add(static_cast<double>(n));
    t.samples.add(static_cast<double>(n));
    t.dur.add(secs);
    const double start_s = static_cast<double>(b.start_sample[i]) / rate;
    const auto slot = static_cast<size_t>(start_s / kTimeSlotS);
    if (slot < (1u << 23)) {  // ignore absurd start times (over two years into the run)
      if (t.slots.size() <= slot) t.slots.resize(slot + 1, 0);
      ++t.slots[slot];
    }
    t.last_end_h = std::max(t.last_end_h, (start_s + secs) / 3600);
  }
}

// Adds a batch's tally to the totals and the report (under the caller's lock).
void merge_tally(const BatchTally& t, SignalTotals& totals, ReportData& d) {
  for (size_t k = 0; k < t.per_label.size(); ++k) {
    totals.per_label[k].n += t.per_label[k].n;
    totals.per_label[k].samples += t.per_label[k].samples;
    totals.per_label[k].duration_s += t.per_label[k].duration_s;
    merge_into(totals.per_label[k].hist, t.per_label[k].hist);
  }
  merge_into(d.duration_s, t.dur);
  merge_into(d.signal_samples, t.samples);
  if (totals.per_slot.size() < t.slots.size()) totals.per_slot.resize(t.slots.size(), 0);
  for (size_t k = 0; k < t.slots.size(); ++k) totals.per_slot[k] += t.slots[k];
  d.run_hours = std::max(d.run_hours, t.last_end_h);
}

// Sample rates by run-info index of `reader` (4 kHz where unknown).
std::vector<double> sample_rates(const pod5::FileReader& reader) {
  std::vector<double> rates;
  for (const auto& acq : reader.run_info_ids()) {
    const auto* ri = reader.find_run_info(acq);
    rates.push_back(ri && ri->sample_rate > 0 ? ri->sample_rate : 4000.0);
  }
  return rates;
}

// The per-label totals into the report's barcodes, and the read starts into at most ~60 bins
// of whole time slots over the run.
void report_signal_totals(const SignalTotals& totals, const std::vector<std::string>& labels, ReportData& d) {
  for (size_t k = 0; k < totals.per_label.size(); ++k) {
    const SignalStats& s = totals.per_label[k];
    d.n_pod5_reads += s.n;
    d.n_samples += s.samples;
    d.sum_duration_s += s.duration_s;
    if (k == labels.size()) {
      d.n_pod5_reads_unclassified_in_csv = s.n;
      continue;
    }
    BarcodeReport& b = d.barcodes[labels[k]];
    b.n_with_signal += s.n;
    b.n_samples += s.samples;
    b.sum_duration_s += s.duration_s;
    merge_into(b.signal_samples, s.hist);
  }
}

void bin_reads_over_time(const std::vector<uint64_t>& per_slot, ReportData& d) {
  const size_t n_slots = std::max<size_t>(1, per_slot.size());
  const size_t per_bin = (n_slots + 59) / 60;
  const size_t n_bins = (n_slots + per_bin - 1) / per_bin;
  d.reads_over_time = make_hist(0, static_cast<double>(n_bins * per_bin) * kTimeSlotS / 3600.0, n_bins, false);
  for (size_t k = 0; k < per_slot.size(); ++k) d.reads_over_time.counts[k / per_bin] += per_slot[k];
}

// The POD5 inputs' signal joined to the classifications `reads` (sorted by id here; an id
// listed twice is an error): per-label signal statistics, reads on either side only, run time.
Status join_pod5_signal(const ReportOptions& options, ClassifiedReads& reads, ReportData& d) {
  auto& ids = reads.ids;
  std::sort(ids.begin(), ids.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i].first == ids[i - 1].first) {
      return Status::invalid_argument("read " + ids[i].first.to_string() + " is listed twice in the classifications");
    }
  }
  auto found = std::make_unique<std::atomic<uint8_t>[]>(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) found[i].store(0, std::memory_order_relaxed);

  for (const auto& p : options.pod5_inputs) d.pod5_inputs.push_back(p.string());
  ESCPOD_ASSIGN_OR_RETURN(auto readers, detail::open_readers(options.pod5_inputs, options.n_threads));
  std::map<std::string, int> writers;
  uint64_t n_total = 0;
  for (const auto& r : readers) {
    writers[r->info().software + " (POD5 " + r->info().pod5_version + ")"];
    n_total += r->info().n_reads;
  }
  for (const auto& [w, unused] : writers) d.writers.push_back(w);

  std::mutex mutex;
  SignalTotals totals;
  totals.per_label.resize(reads.labels.size() + 1);  // last: reads not in the CSVs
  progress::Task progress(n_total, 0);
  for (const auto& reader : readers) {
    const std::vector<double> rates = sample_rates(*reader);
    ESCPOD_RETURN_IF_ERROR(reader->for_each_batch(options.n_threads, [&](const pod5::ReadBatch& b) -> Status {
      BatchTally tally(totals.per_label.size());
      tally_batch(b, reads, found.get(), rates, tally);
      progress.add(b.size());
      std::lock_guard lock(mutex);
      merge_tally(tally, totals, d);
      return Status::ok();
    }));
  }
  progress.finish();
  report_signal_totals(totals, reads.labels, d);
  for (size_t i = 0; i < ids.size(); ++i) d.n_csv_reads_without_signal += found[i].load(std::memory_order_relaxed) == 0;
  // Reads over run time: at most ~60 bins of whole time slots.
  bin_reads_over_time(totals.per_slot, d);
  return Status::ok();
}

}  // namespace

Result<ReportData> collect_report(const ReportOptions& options) {
  ReportData d;
  d.version = options.version;
  d.command_line = options.command_line;
  d.created_utc = utc_now();
  d.demux_seconds = options.demux_seconds;
  d.demux_threads = options.demux_threads;
  d.model = options.model;
  d.bam = options.bam;
  d.bam_records_per_label = options.bam_records_per_label;
  d.signal_samples = samples_hist();
  d.duration_s = duration_hist();
  if (options.classifications.empty()) return Status::usage("report needs a classifications CSV");

  ClassifiedReads reads;  // ids kept only when POD5 inputs are given
  const bool join = !options.pod5_inputs.empty();
  CsvScratch csv;
  for (const auto& path : options.classifications) {
    ESCPOD_RETURN_IF_ERROR(read_classifications(path, join, csv, d, reads));
  }
  if (!join) return d;
  ESCPOD_RETURN_IF_ERROR(join_pod5_signal(options, reads, d));
  return d;
}

// ---- JSON -----------------------------------------------------------------------------------

namespace {

using Json = nlohmann::ordered_json;

Json hist_json(const Histogram& h) {
  Json edges = Json::array();
  for (size_t i = 0; i <= h.counts.size(); ++i) edges.push_back(i == 0 ? h.bin_lo(0) : h.bin_hi(i - 1));
  return Json{{"scale", h.log10 ? "log10" : "linear"}, {"edges", edges}, {"counts", h.counts}};
}

double mean_of(double sum, uint64_t n) { return n ? sum / static_cast<double>(n) : 0.0; }

// A sample-name for MultiQC: the first CSV's stem.
std::string sample_name(const ReportData& d) {
  if (d.classifications.empty()) return "escpod";
  return std::filesystem::path(d.classifications.front()).stem().string();
}

}  // namespace

std::string report_json(const ReportData& d) {
  Json j;
  j["escpod_version"] = d.version;
  j["command_line"] = d.command_line;
  j["created_utc"] = d.created_utc;
  j["classifications"] = d.classifications;
  j["pod5_inputs"] = d.pod5_inputs;
  j["pod5_writers"] = d.writers;
  j["n_reads"] = d.n_reads;
  uint64_t n_unclassified = 0;
  if (auto it = d.barcodes.find("unclassified"); it != d.barcodes.end()) n_unclassified = it->second.n_reads;
  j["n_classified"] = d.n_reads - n_unclassified;
  j["n_unclassified"] = n_unclassified;
  Json bcs = Json::object();
  for (const auto& [name, b] : d.barcodes) {
    Json e = {{"reads", b.n_reads},
              {"mean_confidence", mean_of(b.sum_confidence, b.n_reads)},
              {"confidence_histogram", hist_json(b.confidence)},
              {"detectors", d.detectors_per_barcode.count(name) ? Json(d.detectors_per_barcode.at(name)) : Json::object()}};
    if (!d.pod5_inputs.empty()) {
      e["reads_with_signal"] = b.n_with_signal;
      e["signal_samples"] = b.n_samples;
      e["mean_signal_samples"] = mean_of(static_cast<double>(b.n_samples), b.n_with_signal);
      e["mean_duration_s"] = mean_of(b.sum_duration_s, b.n_with_signal);
      e["signal_samples_histogram"] = hist_json(b.signal_samples);
    }
    bcs[name] = e;
  }
  j["barcodes"] = bcs;
  if (!d.bam.empty()) {
    j["bam"] = d.bam;
    j["bam_records_per_label"] = d.bam_records_per_label;
  }
  j["unclassified_reasons"] = d.unclassified_reasons;
  j["detectors"] = d.detectors;
  if (!d.pod5_inputs.empty()) {
    j["signal"] = {{"reads", d.n_pod5_reads},
                   {"reads_not_in_classifications", d.n_pod5_reads_unclassified_in_csv},
                   {"classified_reads_without_signal", d.n_csv_reads_without_signal},
                   {"samples", d.n_samples},
                   {"duration_s", d.sum_duration_s},
                   {"signal_samples_histogram", hist_json(d.signal_samples)},
                   {"duration_s_histogram", hist_json(d.duration_s)}};
    j["throughput"] = {{"run_hours", d.run_hours},
                       {"reads_per_hour", d.run_hours > 0 ? static_cast<double>(d.n_pod5_reads) / d.run_hours : 0.0},
                       {"read_starts_over_run_hours", hist_json(d.reads_over_time)}};
  }
  if (d.demux_seconds > 0) {
    j["demux"] = {{"seconds", d.demux_seconds},
                  {"threads", d.demux_threads},
                  {"model", d.model},
                  {"reads_per_second", static_cast<double>(d.n_reads) / d.demux_seconds}};
  }
  return j.dump(1) + "\n";
}

const std::vector<std::string>& mqc_section_names() {
  static const std::vector<std::string> kNames = {"general_stats", "reads_per_barcode", "unclassified_reasons",
                                                  "detectors", "confidence", "signal_length"};
  return kNames;
}

std::string report_mqc_json(const ReportData& d, const std::string& section) {
  const std::string sample = sample_name(d);
  Json j;
  j["id"] = "escpod_" + section;
  j["parent_id"] = "escpod";
  j["parent_name"] = "escpod demux";
  j["parent_description"] = "Signal-level barcode demultiplexing of direct-RNA reads (escpod " + d.version + ").";
  if (section == "general_stats") {
    uint64_t unclassified = d.barcodes.count("unclassified") ? d.barcodes.at("unclassified").n_reads : 0;
    j["plot_type"] = "generalstats";
    j["data"][sample] = {{"escpod_reads", d.n_reads},
                         {"escpod_classified_pct", d.n_reads ? 100.0 * static_cast<double>(d.n_reads - unclassified) /
                                                                   static_cast<double>(d.n_reads)
                                                             : 0.0}};
  } else if (section == "reads_per_barcode") {
    j["section_name"] = "Reads per barcode";
    j["plot_type"] = "bargraph";
    j["pconfig"] = {{"id", "escpod_reads_per_barcode_plot"}, {"title", "escpod: reads per barcode"}, {"ylab", "Reads"}};
    Json row = Json::object();
    for (const auto& [name, b] : d.barcodes) row[name] = b.n_reads;
    j["data"][sample] = row;
  } else if (section == "unclassified_reasons") {
    j["section_name"] = "Unclassified reads";
    j["plot_type"] = "bargraph";
    j["pconfig"] = {{"id", "escpod_unclassified_plot"}, {"title", "escpod: why reads are unclassified"}, {"ylab", "Reads"}};
    j["data"][sample] = d.unclassified_reasons.empty() ? Json{{"none", 0}} : Json(d.unclassified_reasons);
  } else if (section == "detectors") {
    j["section_name"] = "Adapter detectors";
    j["plot_type"] = "bargraph";
    j["pconfig"] = {{"id", "escpod_detectors_plot"}, {"title", "escpod: detector that found each adapter"}, {"ylab", "Reads"}};
    Json data = Json::object();
    for (const auto& [name, m] : d.detectors_per_barcode) data[name] = m;
    j["data"] = data;
  } else if (section == "confidence") {
    j["section_name"] = "Confidence per barcode";
    j["plot_type"] = "linegraph";
    j["pconfig"] = {{"id", "escpod_confidence_plot"}, {"title", "escpod: confidence per barcode"},
                    {"xlab", "Confidence (bin start)"}, {"ylab", "Reads"}};
    Json data = Json::object();
    for (const auto& [name, b] : d.barcodes) {
      Json series = Json::object();
      for (size_t i = 0; i < b.confidence.counts.size(); ++i) series[fmt::format("{:.2f}", b.confidence.bin_lo(i))] = b.confidence.counts[i];
      data[name] = series;
    }
    j["data"] = data;
  } else if (section == "signal_length") {
    j["section_name"] = "Signal length";
    j["plot_type"] = "linegraph";
    j["pconfig"] = {{"id", "escpod_signal_length_plot"}, {"title", "escpod: signal length"},
                    {"xlab", "Signal samples (bin start)"}, {"ylab", "Reads"}, {"xLog", true}};
    Json series = Json::object();
    for (size_t i = 0; i < d.signal_samples.counts.size(); ++i) {
      series[fmt::format("{:.0f}", d.signal_samples.bin_lo(i))] = d.signal_samples.counts[i];
    }
    j["data"][sample] = series;
  }
  return j.dump(1) + "\n";
}

// ---- HTML with inline SVG ---------------------------------------------------------------------

namespace {

std::string esc(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::string digits = fmt::format("{:.0f}", std::fabs(v));
    std::string out = v < 0 ? "-" : "";
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  }
  if (std::fabs(v) >= 100) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

std::string short_num(double v) {
  if (v >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.3g}", v);
}

double nice_ceil(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

// Vertical bars with a y axis, value labels and category labels (rotated when crowded).
std::string svg_bars(const std::string& id, const std::vector<std::string>& cats, const std::vector<double>& vals,
                     const std::string& ylab, const std::string& xlab, bool gapless = false,
                     const std::vector<std::string>* tick_labels = nullptr) {
  const int W = 900, left = 70, right = 20, top = 20;
  const bool rotate = !gapless && cats.size() > 8;
  const int bottom = rotate ? 110 : 50;
  const int H = 320 + (rotate ? 60 : 0);
  const int pw = W - left - right, ph = H - top - bottom;
  double vmax = 0;
  for (double v : vals) vmax = std::max(vmax, v);
  const double ymax = 4 * nice_ceil(std::max(vmax, 1.0) / 4);
  std::string s = fmt::format(
      R"X(<svg id="{}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)X",
      id, W, H, W, H);
  for (int t = 0; t <= 4; ++t) {
    const double y = top + ph - ph * t / 4.0;
    s += fmt::format(R"X(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/>)X", left, W - right, y, y);
    s += fmt::format(R"X(<text x="{}" y="{:.1f}" text-anchor="end" font-size="11">{}</text>)X", left - 6, y + 4,
                     short_num(ymax * t / 4));
  }
  const size_t n = std::max<size_t>(1, cats.size());
  const double slot = static_cast<double>(pw) / static_cast<double>(n);
  const double bw = gapless ? slot : slot * 0.7;
  for (size_t i = 0; i < cats.size(); ++i) {
    const double h = vals[i] / ymax * ph;
    const double x = left + slot * static_cast<double>(i) + (slot - bw) / 2;
    s += fmt::format(R"X(<rect class="bar" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{}: {}</title></rect>)X",
                     x, top + ph - h, std::max(0.5, bw - (gapless ? 0.5 : 0)), h, kPalette[gapless ? 0 : i % 10],
                     esc(cats[i]), num(vals[i]));
    if (!gapless && cats.size() <= 24 && vals[i] > 0) {
      s += fmt::format(R"X(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" font-size="10">{}</text>)X", x + bw / 2,
                       top + ph - h - 3, num(vals[i]));
    }
    if (!gapless) {
      if (rotate) {
        s += fmt::format(R"X(<text transform="translate({:.1f},{}) rotate(-45)" text-anchor="end" font-size="11">{}</text>)X",
                         x + bw / 2, top + ph + 14, esc(cats[i]));
      } else {
        s += fmt::format(R"X(<text x="{:.1f}" y="{}" text-anchor="middle" font-size="11">{}</text>)X", x + bw / 2,
                         top + ph + 16, esc(cats[i]));
      }
    }
  }
  if (gapless && tick_labels) {
    for (size_t i = 0; i < tick_labels->size(); ++i) {
      if ((*tick_labels)[i].empty()) continue;
      const double x = left + slot * static_cast<double>(i);
      s += fmt::format(R"X(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="#333"/>)X", x, x, top + ph, top + ph + 4);
      s += fmt::format(R"X(<text x="{:.1f}" y="{}" text-anchor="middle" font-size="11">{}</text>)X", x, top + ph + 16,
                       esc((*tick_labels)[i]));
    }
  }
  s += fmt::format(R"X(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#333"/>)X", left, W - right, top + ph, top + ph);
  s += fmt::format(R"X(<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>)X", left + pw / 2, H - 6, esc(xlab));
  s += fmt::format(R"X(<text transform="translate(14,{}) rotate(-90)" text-anchor="middle" font-size="12">{}</text>)X",
                   top + ph / 2, esc(ylab));
  s += "</svg>";
  return s;
}

std::string svg_hist(const std::string& id, const Histogram& h, const std::string& xlab, const std::string& unit) {
  std::vector<std::string> cats, ticks;
  std::vector<double> vals;
  const size_t n = h.counts.size();
  const size_t every = std::max<size_t>(1, n / 8);
  for (size_t i = 0; i < n; ++i) {
    cats.push_back(fmt::format("{}-{} {}", short_num(h.bin_lo(i)), short_num(h.bin_hi(i)), unit));
    // Log axes: ticks at powers of ten; linear axes: about eight evenly spaced ticks.
    const double edge = h.lo + (h.hi - h.lo) * static_cast<double>(i) / static_cast<double>(n);
    const bool tick = h.log10 ? std::fabs(edge - std::round(edge)) < 1e-9 : i % every == 0;
    ticks.push_back(tick ? short_num(h.bin_lo(i)) : std::string());
    vals.push_back(static_cast<double>(h.counts[i]));
  }
  return svg_bars(id, cats, vals, "Reads", xlab, /*gapless=*/true, &ticks);
}

// Rows of barcodes, columns of confidence bins; each cell shaded by its share of the row.
std::string svg_heatmap(const std::string& id, const ReportData& d) {
  const int left = 130, top = 10, cw = 36, ch = 22;
  const size_t n_cols = 20;
  const int W = left + cw * static_cast<int>(n_cols) + 20;
  const int H = top + ch * static_cast<int>(d.barcodes.size()) + 50;
  std::string s = fmt::format(
      R"X(<svg id="{}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)X",
      id, W, H, W, H);
  int row = 0;
  for (const auto& [name, b] : d.barcodes) {
    const double y = top + ch * row;
    s += fmt::format(R"X(<text x="{}" y="{:.1f}" text-anchor="end" font-size="11">{}</text>)X", left - 6, y + ch * 0.7, esc(name));
    uint64_t rmax = 1;
    for (uint64_t c : b.confidence.counts) rmax = std::max(rmax, c);
    for (size_t k = 0; k < n_cols && k < b.confidence.counts.size(); ++k) {
      const uint64_t c = b.confidence.counts[k];
      const double f = static_cast<double>(c) / static_cast<double>(rmax);
      const int shade = static_cast<int>(255 - 200 * f);
      s += fmt::format(
          R"X(<rect class="cell" x="{}" y="{:.1f}" width="{}" height="{}" fill="rgb({},{},255)" stroke="#fff"><title>{} {:.2f}-{:.2f}: {}</title></rect>)X",
          left + cw * static_cast<int>(k), y, cw, ch, shade, shade, esc(name), b.confidence.bin_lo(k),
          b.confidence.bin_hi(k), c);
      if (c > 0) {
        s += fmt::format(R"X(<text x="{}" y="{:.1f}" text-anchor="middle" font-size="9" fill="{}">{}</text>)X",
                         left + cw * static_cast<int>(k) + cw / 2, y + ch * 0.65, f > 0.6 ? "#fff" : "#222",
                         short_num(static_cast<double>(c)));
      }
    }
    ++row;
  }
  const double y = top + ch * row;
  for (size_t k = 0; k <= n_cols; k += 4) {
    s += fmt::format(R"X(<text x="{}" y="{:.1f}" text-anchor="middle" font-size="11">{:.1f}</text>)X",
                     left + cw * static_cast<int>(k), y + 14, static_cast<double>(k) / static_cast<double>(n_cols));
  }
  s += fmt::format(R"X(<text x="{}" y="{:.1f}" text-anchor="middle" font-size="12">Confidence</text>)X",
                   left + cw * static_cast<int>(n_cols) / 2, y + 34);
  s += "</svg>";
  return s;
}

// One horizontal bar per barcode, split by the detector that found the adapter.
std::string svg_stacked(const std::string& id, const ReportData& d) {
  std::vector<std::string> dets;
  for (const auto& [det, n] : d.detectors) dets.push_back(det);
  const int left = 130, top = 30, bh = 20, gap = 4, pw = 640;
  const int W = left + pw + 40;
  const int H = top + (bh + gap) * static_cast<int>(d.detectors_per_barcode.size()) + 30;
  std::string s = fmt::format(
      R"X(<svg id="{}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)X",
      id, W, H, W, H);
  for (size_t k = 0; k < dets.size(); ++k) {
    const int x = left + static_cast<int>(k) * 130;
    s += fmt::format(R"X(<rect x="{}" y="6" width="12" height="12" fill="{}"/><text x="{}" y="16" font-size="11">{}</text>)X", x,
                     kPalette[k % 10], x + 16, esc(dets[k]));
  }
  int row = 0;
  for (const auto& [name, m] : d.detectors_per_barcode) {
    uint64_t total = 0;
    for (const auto& [det, n] : m) total += n;
    const int y = top + row * (bh + gap);
    s += fmt::format(R"X(<text x="{}" y="{}" text-anchor="end" font-size="11">{}</text>)X", left - 6, y + 14, esc(name));
    double x = left;
    for (size_t k = 0; k < dets.size(); ++k) {
      auto it = m.find(dets[k]);
      if (it == m.end() || total == 0) continue;
      const double w = pw * static_cast<double>(it->second) / static_cast<double>(total);
      s += fmt::format(R"X(<rect class="bar" x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{} {}: {}</title></rect>)X",
                       x, y, w, bh, kPalette[k % 10], esc(name), esc(dets[k]), it->second);
      x += w;
    }
    ++row;
  }
  s += "</svg>";
  return s;
}

// One row of a key-value table: `k` escaped, `v` as HTML.
void html_kv(std::string& h, const std::string& k, const std::string& v) {
  h += "<tr><td>" + esc(k) + "</td><td>" + v + "</td></tr>";
}

// The document's head and title.
void html_head(std::string& h) {
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>escpod demultiplexing report</title>\n";
  h += "<style>body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:960px;color:#222}"
       "h1{font-size:24px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}"
       "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}"
       "td:first-child,th:first-child{text-align:left}.kv td{text-align:left}.plot{display:block;margin:8px 0}"
       "code{font-size:12px;word-break:break-all}.note{color:#666;font-size:13px}</style></head><body>\n";
  h += "<h1>escpod demultiplexing report</h1>\n";
}

// The summary table: reads classified, assigned and not; the POD5 inputs' signal and run time;
// the BAM tagged; the demultiplexing throughput.
void html_summary(std::string& h, const ReportData& d) {
  uint64_t unclassified = d.barcodes.count("unclassified") ? d.barcodes.at("unclassified").n_reads : 0;
  h += "<table class=\"kv\" id=\"summary\">";
  html_kv(h, "Reads classified", fmt::format("<span id=\"n_reads\">{}</span>", num(static_cast<double>(d.n_reads))));
  html_kv(h, "Assigned to a barcode", fmt::format("{} ({:.1f}%)", num(static_cast<double>(d.n_reads - unclassified)),
                                          d.n_reads ? 100.0 * static_cast<double>(d.n_reads - unclassified) / static_cast<double>(d.n_reads) : 0.0));
  html_kv(h, "Unclassified", num(static_cast<double>(unclassified)));
  if (!d.pod5_inputs.empty()) {
    html_kv(h, "Reads in the POD5 inputs", num(static_cast<double>(d.n_pod5_reads)));
    html_kv(h, "Signal", fmt::format("{} samples, {:.1f} h of signal", num(static_cast<double>(d.n_samples)), d.sum_duration_s / 3600));
    html_kv(h, "Run time covered", fmt::format("{:.2f} h ({} reads/h)", d.run_hours,
                                       num(std::round(d.run_hours > 0 ? static_cast<double>(d.n_pod5_reads) / d.run_hours : 0))));
    if (d.n_pod5_reads_unclassified_in_csv) html_kv(h, "POD5 reads missing from the classifications", num(static_cast<double>(d.n_pod5_reads_unclassified_in_csv)));
    if (d.n_csv_reads_without_signal) html_kv(h, "Classified reads missing from the POD5 inputs", num(static_cast<double>(d.n_csv_reads_without_signal)));
  }
  if (!d.bam.empty()) {
    uint64_t records = 0;
    for (const auto& [label, n] : d.bam_records_per_label) records += n;
    html_kv(h, "Basecalled BAM", fmt::format("<code>{}</code>: {} records tagged", esc(d.bam), num(static_cast<double>(records))));
  }
  if (d.demux_seconds > 0) {
    html_kv(h, "Demultiplexing throughput", fmt::format("{} reads/s ({:.1f} s, {} threads)",
                                                num(std::round(static_cast<double>(d.n_reads) / d.demux_seconds)),
                                                d.demux_seconds, d.demux_threads));
  }
  h += "</table>\n";

}

// Reads per barcode (plot and table), and confidence per barcode. `cats` and `vals`: scratch.
void html_barcodes(std::string& h, const ReportData& d, std::vector<std::string>& cats, std::vector<double>& vals) {
  for (const auto& [name, b] : d.barcodes) {
    cats.push_back(name);
    vals.push_back(static_cast<double>(b.n_reads));
  }
  h += "<h2>Reads per barcode</h2>\n" + svg_bars("plot_reads_per_barcode", cats, vals, "Reads", "Barcode") + "\n";
  h += "<table id=\"barcodes\"><tr><th>barcode</th><th>reads</th><th>share</th><th>mean confidence</th>";
  if (!d.pod5_inputs.empty()) h += "<th>mean samples</th><th>mean duration (s)</th>";
  if (!d.bam.empty()) h += "<th>BAM records</th>";
  h += "</tr>";
  for (const auto& [name, b] : d.barcodes) {
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.1f}%</td><td>{:.3f}</td>", esc(name), num(static_cast<double>(b.n_reads)),
                     d.n_reads ? 100.0 * static_cast<double>(b.n_reads) / static_cast<double>(d.n_reads) : 0.0,
                     mean_of(b.sum_confidence, b.n_reads));
    if (!d.pod5_inputs.empty()) {
      h += fmt::format("<td>{}</td><td>{:.2f}</td>", num(std::round(mean_of(static_cast<double>(b.n_samples), b.n_with_signal))),
                       mean_of(b.sum_duration_s, b.n_with_signal));
    }
    if (!d.bam.empty()) {
      auto it = d.bam_records_per_label.find(name);
      h += fmt::format("<td>{}</td>", num(static_cast<double>(it == d.bam_records_per_label.end() ? 0 : it->second)));
    }
    h += "</tr>";
  }
  h += "</table>\n";
  h += "<h2>Confidence per barcode</h2>\n<p class=\"note\">Reads per confidence bin, shaded by the share of the "
       "barcode's busiest bin.</p>\n" + svg_heatmap("plot_confidence", d) + "\n";

}

// Why reads were left unclassified (plot and table). `cats` and `vals`: scratch.
void html_unclassified(std::string& h, const ReportData& d, std::vector<std::string>& cats,
                       std::vector<double>& vals) {
  h += "<h2>Unclassified reasons</h2>\n";
  if (d.unclassified_reasons.empty()) {
    h += "<p class=\"note\">No read was left unclassified.</p>\n";
  } else {
    cats.clear();
    vals.clear();
    for (const auto& [r, n] : d.unclassified_reasons) {
      cats.push_back(r);
      vals.push_back(static_cast<double>(n));
    }
    h += svg_bars("plot_unclassified", cats, vals, "Reads", "Reason") + "\n<table id=\"reasons\">";
    for (const auto& [r, n] : d.unclassified_reasons) h += fmt::format("<tr><td>{}</td><td>{}</td></tr>", esc(r), num(static_cast<double>(n)));
    h += "</table>\n";
  }
}

// Which detector found each read's adapter (plot and table).
void html_detectors(std::string& h, const ReportData& d) {
  h += "<h2>Adapter detector</h2>\n<p class=\"note\">Which detector found each read's adapter, per barcode.</p>\n" +
       svg_stacked("plot_detectors", d) + "\n<table id=\"detectors\">";
  for (const auto& [det, n] : d.detectors) h += fmt::format("<tr><td>{}</td><td>{}</td></tr>", esc(det), num(static_cast<double>(n)));
  h += "</table>\n";

}

// Read length, duration and throughput, from the POD5 inputs (a note without them).
void html_signal(std::string& h, const ReportData& d) {
  if (!d.pod5_inputs.empty()) {
    h += "<h2>Read length</h2>\n" + svg_hist("plot_signal_samples", d.signal_samples, "Signal samples (log scale)", "samples") + "\n";
    h += "<h2>Signal duration</h2>\n" + svg_hist("plot_duration", d.duration_s, "Seconds (log scale)", "s") + "\n";
    h += "<h2>Throughput</h2>\n<p class=\"note\">Read starts over the run.</p>\n" +
         svg_hist("plot_throughput", d.reads_over_time, "Run time (hours)", "h") + "\n";
  } else {
    h += "<p class=\"note\">No POD5 inputs were given: read lengths, durations and throughput are not shown.</p>\n";
  }

}

// How the report was made.
void html_provenance(std::string& h, const ReportData& d) {
  h += "<h2>Provenance</h2>\n<table class=\"kv\" id=\"provenance\">";
  html_kv(h, "escpod version", esc(d.version));
  html_kv(h, "Command line", "<code>" + esc(d.command_line) + "</code>");
  html_kv(h, "Created (UTC)", esc(d.created_utc));
  if (!d.model.empty()) html_kv(h, "Model", "<code>" + esc(d.model) + "</code>");
  std::string list;
  for (const auto& c : d.classifications) list += "<code>" + esc(c) + "</code><br>";
  html_kv(h, "Classifications", list);
  if (!d.pod5_inputs.empty()) {
    list.clear();
    for (const auto& c : d.pod5_inputs) list += "<code>" + esc(c) + "</code><br>";
    html_kv(h, "POD5 inputs", list);
    list.clear();
    for (const auto& w : d.writers) list += esc(w) + "<br>";
    html_kv(h, "Written by", list);
  }
  h += "</table>\n</body></html>\n";
}

}  // namespace

std::string report_html(const ReportData& d) {
  std::string h;
  html_head(h);
  html_summary(h, d);
  std::vector<std::string> cats;
  std::vector<double> vals;
  html_barcodes(h, d, cats, vals);
  html_unclassified(h, d, cats, vals);
  html_detectors(h, d);
  html_signal(h, d);
  html_provenance(h, d);
  return h;
}

Status write_report(const ReportData& d, const ReportOutputs& o) {
  auto write_one = [&](const std::filesystem::path& path, const std::string& text) -> Status {
    ESCPOD_ASSIGN_OR_RETURN(StagedFile f, StagedFile::create(path, o.overwrite));
    {
      std::ofstream out(f.staging_path(), std::ios::binary | std::ios::trunc);
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
      out.close();
      if (!out) return Status::io_error("cannot write " + f.staging_path().string());
    }
    return f.commit(o.fsync);
  };
  if (!o.html.empty()) ESCPOD_RETURN_IF_ERROR(write_one(o.html, report_html(d)));
  if (!o.json.empty()) ESCPOD_RETURN_IF_ERROR(write_one(o.json, report_json(d)));
  if (!o.mqc_prefix.empty()) {
    for (const auto& s : mqc_section_names()) {
      ESCPOD_RETURN_IF_ERROR(write_one(o.mqc_prefix.string() + "_" + s + "_mqc.json", report_mqc_json(d, s)));
    }
  }
  return Status::ok();
}

}  // namespace escpod::pipeline
