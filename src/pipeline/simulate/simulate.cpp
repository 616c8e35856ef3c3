#include "escpod/pipeline/simulate/simulate.hpp"

#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "escpod/core/executor.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/ordered_stream.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/pod5/vbz.hpp"
#include "pipeline/ops/csv_text.hpp"

namespace escpod::pipeline {
namespace {

constexpr const char* kSimulatorVersion = "escpod-simulate/1";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Parses "synthetic:N"; returns -1 when `spec` is not of that form, -2 when N is not a number.
long parse_synthetic(std::string_view spec) {
  constexpr std::string_view kPrefix = "synthetic:";
  if (spec.substr(0, kPrefix.size()) != kPrefix) return -1;
  const std::string_view num = spec.substr(kPrefix.size());
  long v = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || ptr != num.data() + num.size() || num.empty()) return -2;
  return v;
}

// The lines of a plain or gzip text file (detail::LineReader), with the errors a user can act
// on reported first: a missing file, a folder.
Result<detail::LineReader> open_lines(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::not_found(path.string() + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    return Status::invalid_argument(path.string() + ": is a directory, not a file");
  }
  return detail::LineReader::open(path);
}

// The read error a LineReader met (a damaged gzip stream), or OK.
Status read_status(const detail::LineReader& lines, const std::filesystem::path& path) {
  return lines.error().empty() ? Status::ok() : Status::corrupt(path.string() + ": " + lines.error());
}

std::vector<Barcode> synthetic_barcodes(int n) {
  // Fixed seed: the same N always gives the same set (bc01..bcNN, each a prefix of the larger).
  signal::SimRng rng(0xbac0de5ULL, 0);
  std::vector<Barcode> out;
  std::string s;
  while (static_cast<int>(out.size()) < n) {
    signal::random_sequence(rng, 20, s);
    // No homopolymer run longer than 3 (keeps each barcode's signal eventful).
    bool ok = true;
    for (size_t i = 3; i < s.size() && ok; ++i) {
      if (s[i] == s[i - 1] && s[i] == s[i - 2] && s[i] == s[i - 3]) ok = false;
    }
    for (const auto& b : out) {
      if (!ok) break;
      int d = 0;
      for (size_t i = 0; i < s.size(); ++i) d += s[i] != b.sequence[i];
      if (d < 8) ok = false;
    }
    if (ok) out.push_back({fmt::format("bc{:02d}", out.size() + 1), s});
  }
  return out;
}

}  // namespace

Result<std::vector<Barcode>> parse_barcode_csv(std::string_view text, std::string_view source) {
  std::vector<Barcode> out;
  std::set<std::string> names;
  long name_col = -1, seq_col = -1;
  bool have_header = false;
  size_t line_no = 0;
  size_t pos = 0;
  std::vector<std::string_view> fields;
  std::string storage;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    if (line.empty()) {
      if (nl == text.size()) break;
      continue;
    }
    detail::split_csv(line, fields, storage);
    for (auto& f : fields) f = trim(f);
    const std::string where = fmt::format("{}:{}", source, line_no);
    if (!have_header) {
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string f = lower(fields[i]);
        if (f == "name" && name_col < 0) name_col = static_cast<long>(i);
        if (f == "sequence" && seq_col < 0) seq_col = static_cast<long>(i);
      }
      if (name_col < 0 || seq_col < 0) {
        return Status::invalid_argument(where + ": barcode CSV header must have 'name' and 'sequence' columns, got '" +
                                        std::string(line) + "'");
      }
      have_header = true;
      continue;
    }
    const auto need = static_cast<size_t>(std::max(name_col, seq_col));
    if (fields.size() <= need) {
      return Status::invalid_argument(where + ": expected at least " + std::to_string(need + 1) +
                                      " fields, got " + std::to_string(fields.size()));
    }
    Barcode b;
    b.name = std::string(fields[static_cast<size_t>(name_col)]);
    for (char c : fields[static_cast<size_t>(seq_col)]) {
      char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (u == 'U') u = 'T';
      if (u != 'A' && u != 'C' && u != 'G' && u != 'T') {
        return Status::invalid_argument(where + ": barcode '" + b.name + "' sequence '" +
                                        std::string(fields[static_cast<size_t>(seq_col)]) +
                                        "' is not ACGT");
      }
      b.sequence.push_back(u);
    }
    if (b.name.empty()) return Status::invalid_argument(where + ": empty barcode name");
    if (b.sequence.empty()) return Status::invalid_argument(where + ": barcode '" + b.name + "' has an empty sequence");
    if (!names.insert(b.name).second) {
      return Status::invalid_argument(where + ": duplicate barcode name '" + b.name + "'");
    }
    out.push_back(std::move(b));
    if (nl == text.size()) break;
  }
  if (out.empty()) return Status::invalid_argument(std::string(source) + ": no barcodes (empty barcode CSV)");
  return out;
}

Result<std::vector<Barcode>> load_barcodes(const std::string& spec) {
  const long n = parse_synthetic(spec);
  if (n == -2 || n == 0 || n > 384) {  // up to a 384-well plate
    return Status::usage("--barcodes " + spec + ": synthetic:N needs N in [1, 384]");
  }
  if (n > 0) return synthetic_barcodes(static_cast<int>(n));
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader lines, open_lines(spec));
  std::string text, line;
  while (lines.next(line)) {
    text += line;
    text += '\n';
  }
  ESCPOD_RETURN_IF_ERROR(read_status(lines, spec));
  return parse_barcode_csv(text, spec);
}

Result<signal::KmerTable> load_kmer_table(const std::string& spec) {
  const long k = parse_synthetic(spec);
  if (k == -2 || k == 0 || k > 12) {
    return Status::usage("--kmer-model " + spec + ": synthetic:K needs K in [1, 12]");
  }
  if (k > 0) return signal::KmerTable::synthetic(static_cast<int>(k));
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader lines, open_lines(spec));
  std::optional<signal::KmerTable> table;
  std::string line;
  bool first_data = true;
  while (lines.next(line)) {
    const std::string_view l = trim(line);
    if (l.empty() || l.front() == '#') continue;
    const size_t sep = l.find_first_of(" \t");
    const std::string where = fmt::format("{}:{}", spec, lines.line_no());
    if (sep == std::string_view::npos) {
      return Status::invalid_argument(where + ": expected 'KMER<TAB>level', got '" + std::string(l) + "'");
    }
    const std::string_view kmer = l.substr(0, sep);
    std::string_view rest = trim(l.substr(sep));
    rest = rest.substr(0, rest.find_first_of(" \t"));
    float level = 0.0f;
    auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), level);
    if (ec != std::errc() || ptr != rest.data() + rest.size()) {
      if (first_data) {  // a header line
        first_data = false;
        continue;
      }
      return Status::invalid_argument(where + ": level '" + std::string(rest) + "' is not a number");
    }
    first_data = false;
    if (!table) {
      ESCPOD_ASSIGN_OR_RETURN(signal::KmerTable t,
                              signal::KmerTable::create(static_cast<int>(kmer.size()), spec, false));
      table = std::move(t);
    }
    const Status s = table->set(kmer, level);
    if (!s.is_ok()) return Status::invalid_argument(where + ": " + s.message());
  }
  ESCPOD_RETURN_IF_ERROR(read_status(lines, spec));
  if (!table) return Status::invalid_argument(spec + ": no k-mer levels in the file");
  ESCPOD_RETURN_IF_ERROR(table->check_complete());
  return std::move(*table);
}

Result<std::vector<FastaRecord>> load_fasta(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader lines, open_lines(path));
  std::vector<FastaRecord> out;
  std::string line;
  while (lines.next(line)) {
    const std::string_view l = trim(line);
    if (l.empty() || l.front() == ';') continue;
    if (l.front() == '>') {
      std::string_view name = l.substr(1);
      name = name.substr(0, name.find_first_of(" \t"));
      FastaRecord r;
      r.name = std::string(name);
      for (char& c : r.name) {
        if (c == ',') c = ';';  // keep the truth CSV parseable
      }
      out.push_back(std::move(r));
      continue;
    }
    if (out.empty()) {
      return Status::invalid_argument(fmt::format("{}:{}: sequence before the first '>' header",
                                                  path.string(), lines.line_no()));
    }
    for (char c : l) {
      const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (signal::base_code(u) < 0) {
        return Status::invalid_argument(fmt::format("{}:{}: '{}' is not a base (ACGTU)",
                                                    path.string(), lines.line_no(), c));
      }
      out.back().sequence.push_back(u);
    }
  }
  ESCPOD_RETURN_IF_ERROR(read_status(lines, path));
  std::erase_if(out, [](const FastaRecord& r) { return r.sequence.empty(); });
  if (out.empty()) return Status::invalid_argument(path.string() + ": no sequences in the FASTA file");
  return out;
}

std::filesystem::path default_truth_path(const std::filesystem::path& output) {
  std::filesystem::path p = output;
  if (p.extension() == ".pod5") p.replace_extension();
  p += ".truth.csv";
  return p;
}

namespace {

// One generated read on its way from a worker to the writer.
// One simulated read: a record of the engine's ring, reused (chunk buffers and the truth row
// keep their capacity from one read to the next).
struct Work {
  uint64_t index = 0;
  pod5::ReadRecord record;
  std::vector<std::vector<uint8_t>> chunk_bytes;  // [0, n_chunks) are this read's
  std::vector<uint32_t> chunk_samples;
  size_t n_chunks = 0;
  std::string truth_row;
  uint64_t gap = 0;  // samples between the previous read on the channel and this one
};

struct Scratch {
  signal::SimulatedRead read;
  pod5::VbzCodec codec;
  std::string transcript;
};

// RNA004 PromethION calibration (real file): scale 0.1462070643901825 pA/ADC for every read,
// integer offsets per channel (-287..-210, median -247).
constexpr float kCalibrationScale = 0.1462070643901825f;

signal::Calibration channel_calibration(uint64_t seed, uint32_t channel) {
  signal::SimRng rng(seed ^ 0xca11b7a7e0ffULL, channel);
  const double off = std::clamp(std::nearbyint(-247.0 + 15.0 * rng.normal()), -287.0, -207.0);
  return {static_cast<float>(off), kCalibrationScale};
}

pod5::ReadId make_read_id(signal::SimRng& rng) {
  pod5::ReadId id;
  const uint64_t a = rng.next(), b = rng.next();
  for (int i = 0; i < 8; ++i) {
    id.bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(a >> (8 * i));
    id.bytes[static_cast<size_t>(8 + i)] = static_cast<uint8_t>(b >> (8 * i));
  }
  id.bytes[6] = static_cast<uint8_t>((id.bytes[6] & 0x0f) | 0x40);  // version 4
  id.bytes[8] = static_cast<uint8_t>((id.bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  return id;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// The truth CSV path for these options, after checking the options that need no file.
Result<std::filesystem::path> check_options(const std::filesystem::path& output, const SimulateOptions& o) {
  if (o.n_reads == 0) return Status::usage("--reads must be at least 1");
  if (o.n_channels == 0) return Status::usage("--channels must be at least 1");
  if (o.kmer_model.empty()) return Status::usage("--kmer-model is required (a table file or synthetic:K)");
  if (!(o.transcript_length_mean >= 1.0) || o.transcript_length_min == 0 ||
      o.transcript_length_min > o.transcript_length_max) {
    return Status::usage("transcript length: need mean >= 1 and 1 <= min <= max");
  }
  if (!(o.polya_length_mean >= 0.0) || !(o.polya_length_sd >= 0.0)) {
    return Status::usage("poly(A) length mean and sd must be non-negative");
  }
  std::filesystem::path truth_path = o.truth_path.empty() ? default_truth_path(output) : o.truth_path;
  if (std::filesystem::absolute(truth_path).lexically_normal() ==
      std::filesystem::absolute(output).lexically_normal()) {
    return Status::usage("the truth CSV and the POD5 output are the same path: " + output.string());
  }
  return truth_path;
}

// What the reads are made of: the k-mer table, barcodes, transcripts (empty: random) and adapter.
struct SimInputs {
  signal::KmerTable table;
  std::vector<Barcode> barcodes;
  std::vector<FastaRecord> fasta;
  std::string adapter;
  std::string kmer_desc;  // the k-mer model as the truth CSV and run info name it
};

Result<SimInputs> load_inputs(const SimulateOptions& o) {
  ESCPOD_ASSIGN_OR_RETURN(signal::KmerTable table, load_kmer_table(o.kmer_model));
  ESCPOD_ASSIGN_OR_RETURN(std::vector<Barcode> barcodes, load_barcodes(o.barcodes));
  std::vector<FastaRecord> fasta;
  if (!o.transcripts.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(fasta, load_fasta(o.transcripts));
  }
  std::string adapter = o.adapter.empty() ? signal::default_adapter_sequence() : o.adapter;
  for (char c : adapter) {
    if (signal::base_code(c) < 0) return Status::invalid_argument("adapter sequence is not ACGTU: " + adapter);
  }
  if (table.is_synthetic()) {
    log::warn("k-mer model {} is SYNTHETIC (no pore model behind it): signal levels are not real RNA004 levels",
              table.label());
  }
  std::string kmer_desc =
      table.is_synthetic() ? table.label() + " (SYNTHETIC k-mer table, not a real pore model)" : table.label();
  return SimInputs{std::move(table), std::move(barcodes), std::move(fasta), std::move(adapter),
                   std::move(kmer_desc)};
}

// Run info, shaped like a real RNA004 MinKNOW run but marked simulated.
pod5::RunInfo simulated_run_info(const SimulateOptions& o, const std::string& kmer_desc) {
  pod5::RunInfo ri;
  uint64_t s = o.seed;
  const uint64_t h1 = signal::splitmix64(s), h2 = signal::splitmix64(s);
  ri.acquisition_id = hex64(h1) + hex64(h2).substr(0, 8) + "sim0";
  ri.acquisition_start_time_ms = 1735689600000;  // 2025-01-01T00:00:00Z, fixed for reproducibility
  ri.adc_min = o.params.adc_min;
  ri.adc_max = o.params.adc_max;
  ri.context_tags = {{"experiment_type", "rna"},
                     {"sample_frequency", fmt::format("{}", o.params.sample_rate_hz)},
                     {"selected_speed_bases_per_second", fmt::format("{}", o.params.bases_per_second)},
                     {"sequencing_kit", "sqk-rna004"},
                     {"simulator", kSimulatorVersion},
                     {"simulator_kmer_model", kmer_desc},
                     {"simulator_seed", std::to_string(o.seed)}};
  ri.experiment_name = "escpod-simulate";
  ri.flow_cell_id = "SIM00000";
  ri.flow_cell_product_code = "FLO-PRO004RA";
  ri.protocol_name = "escpod simulate (simulated direct RNA, SQK-RNA004 layout)";
  ri.protocol_run_id = ri.acquisition_id;
  ri.protocol_start_time_ms = ri.acquisition_start_time_ms;
  ri.sample_id = "simulated";
  ri.sample_rate = static_cast<uint16_t>(std::clamp(o.params.sample_rate_hz, 1.0, 65535.0));
  ri.sequencing_kit = "sqk-rna004";
  ri.sequencer_position = "SIM";
  ri.sequencer_position_type = "simulated";
  ri.software = kSimulatorVersion;
  ri.system_name = "escpod";
  ri.system_type = "simulated";
  ri.tracking_id = {{"data_source", "simulated"},
                    {"exp_script_purpose", "simulation"},
                    {"is_simulated", "1"},
                    {"run_id", ri.acquisition_id},
                    {"sample_id", "simulated"}};
  return ri;
}

// The truth CSV: staged beside its destination, written in read order, committed last.
class TruthWriter {
 public:
  static Result<TruthWriter> open(const std::filesystem::path& path, const SimulateOptions& o,
                                  const std::string& kmer_desc) {
    ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(path, o.writer.overwrite));
    std::FILE* f = std::fopen(staged.staging_path().c_str(), "wb");
    if (f == nullptr) return Status::io_error(staged.staging_path().string() + ": cannot open for writing");
    TruthWriter w(std::move(staged), f);
    std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
    ESCPOD_RETURN_IF_ERROR(w.write(fmt::format(
        "read_id,barcode,adapter_start,adapter_end,barcode_start,barcode_end,polya_start,polya_end,"
        "transcript_start,num_samples,transcript\n"
        "# {} seed={} reads={} kmer_model={} barcodes={} transcripts={} sample_rate={}\n"
        "# positions are sample indices, regions half-open; signal order: open pore [0,adapter_start), "
        "adapter [adapter_start,adapter_end) with the barcode at its end, poly(A), transcript read 3'->5'\n",
        kSimulatorVersion, o.seed, o.n_reads, kmer_desc, o.barcodes,
        o.transcripts.empty() ? std::string("random") : o.transcripts, o.params.sample_rate_hz)));
    return w;
  }

  Status write(std::string_view text) {
    if (std::fwrite(text.data(), 1, text.size(), m_file.get()) != text.size()) {
      return Status::io_error(m_staged.staging_path().string() + ": write failed");
    }
    return Status::ok();
  }

  // Flushes and closes the staging file (call before the POD5 is committed).
  Status close() {
    if (std::fflush(m_file.get()) != 0 || std::ferror(m_file.get())) {
      return Status::io_error(m_staged.staging_path().string() + ": write failed");
    }
    if (std::fclose(m_file.release()) != 0) {
      return Status::io_error(m_staged.staging_path().string() + ": close failed");
    }
    return Status::ok();
  }

  Status commit(FsyncMode fsync) { return m_staged.commit(fsync); }

 private:
  TruthWriter(StagedFile staged, std::FILE* f) : m_staged(std::move(staged)), m_file(f, &std::fclose) {}

  StagedFile m_staged;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> m_file;
};

// Makes read w.index (a pure function of the seed and the index, so the output is the same for
// any thread count): its signal, compressed chunks, record fields and truth row. The channel
// timing (read_number, start_sample) is the writer's: see ChannelClock.
class ReadMaker {
 public:
  ReadMaker(const SimulateOptions& o, const SimInputs& in, const std::string& run_info_id)
      : m_o(o), m_in(in), m_run_info_id(run_info_id), m_max_chunk(std::max<uint32_t>(1, o.writer.max_chunk_samples)) {}

  Status make(Work& w, Scratch& sc) const {
    signal::SimRng rng(m_o.seed, w.index);
    const pod5::ReadId id = make_read_id(rng);
    const auto channel = static_cast<uint32_t>(1 + rng.below(m_o.n_channels));
    const Barcode& bc = m_in.barcodes[rng.below(m_in.barcodes.size())];
    std::string_view transcript_name = "random";
    const std::string_view transcript = pick_transcript(rng, sc, transcript_name);
    const double pa_len = std::clamp(std::nearbyint(m_o.polya_length_mean + m_o.polya_length_sd * rng.normal()),
                                     static_cast<double>(m_o.polya_length_min), 500.0);
    w.gap = 1000 + rng.below(39000);  // 0.25-10 s between reads on a channel
    const signal::Calibration cal = channel_calibration(m_o.seed, channel);
    signal::ReadSpec spec;
    spec.adapter = m_in.adapter;
    spec.barcode = bc.sequence;
    spec.polya_length = static_cast<uint32_t>(pa_len);
    spec.transcript = transcript;
    spec.calibration = cal;
    ESCPOD_RETURN_IF_ERROR(signal::simulate_read(m_in.table, m_o.params, spec, rng, sc.read));
    fill_record(id, channel, cal, sc.read, w.record);
    ESCPOD_RETURN_IF_ERROR(compress_chunks(sc, w));
    const signal::ReadLayout& L = sc.read.layout;
    w.truth_row.clear();
    fmt::format_to(std::back_inserter(w.truth_row), "{},{},{},{},{},{},{},{},{},{},{}\n", id.to_string(), bc.name,
                   L.adapter_start, L.adapter_end, L.barcode_start, L.barcode_end, L.polya_start, L.polya_end,
                   L.transcript_start, L.num_samples, transcript_name);
    return Status::ok();
  }

 private:
  // A FASTA record, or a random transcript of log-normal length (in sc.transcript).
  std::string_view pick_transcript(signal::SimRng& rng, Scratch& sc, std::string_view& name) const {
    if (!m_in.fasta.empty()) {
      const FastaRecord& r = m_in.fasta[rng.below(m_in.fasta.size())];
      name = r.name;
      return r.sequence;
    }
    constexpr double kSigma = 0.5;
    const double len = std::exp(std::log(m_o.transcript_length_mean) - 0.5 * kSigma * kSigma + kSigma * rng.normal());
    const double clamped = std::clamp(std::nearbyint(len), static_cast<double>(m_o.transcript_length_min),
                                      static_cast<double>(m_o.transcript_length_max));
    signal::random_sequence(rng, static_cast<size_t>(clamped), sc.transcript);
    return sc.transcript;
  }

  void fill_record(const pod5::ReadId& id, uint32_t channel, const signal::Calibration& cal,
                   const signal::SimulatedRead& sr, pod5::ReadRecord& rec) const {
    rec.read_id = id;
    rec.channel = channel;
    rec.well = 1;
    rec.pore_type = "not_set";
    rec.calibration_offset = cal.offset;
    rec.calibration_scale = cal.scale;
    rec.median_before = sr.open_pore_pa;
    rec.end_reason = "signal_positive";
    rec.end_reason_forced = false;
    rec.run_info = m_run_info_id;
    rec.num_samples = sr.layout.num_samples;
  }

  // Compresses in the worker (VBZ, or raw little-endian int16); the writer only copies chunks.
  // The record's chunk buffers are reused (no allocation per read once they have grown).
  Status compress_chunks(Scratch& sc, Work& w) const {
    const std::span<const int16_t> all(sc.read.adc);
    w.n_chunks = 0;
    for (size_t off = 0; off < all.size(); off += m_max_chunk) {
      const auto part = all.subspan(off, std::min<size_t>(m_max_chunk, all.size() - off));
      if (w.n_chunks == w.chunk_bytes.size()) {
        w.chunk_bytes.emplace_back();
        w.chunk_samples.emplace_back();
      }
      std::vector<uint8_t>& bytes = w.chunk_bytes[w.n_chunks];
      if (m_o.writer.vbz) {
        ESCPOD_RETURN_IF_ERROR(sc.codec.compress(part, bytes, m_o.writer.zstd_level));
      } else {
        bytes.resize(part.size() * 2);
        for (size_t i = 0; i < part.size(); ++i) {
          const auto u = static_cast<uint16_t>(part[i]);
          bytes[2 * i] = static_cast<uint8_t>(u & 0xff);
          bytes[2 * i + 1] = static_cast<uint8_t>(u >> 8);
        }
      }
      w.chunk_samples[w.n_chunks++] = static_cast<uint32_t>(part.size());
    }
    return Status::ok();
  }

  const SimulateOptions& m_o;
  const SimInputs& m_in;
  const std::string& m_run_info_id;
  const uint32_t m_max_chunk;
};

// Places reads on their channels in read order: read_number, start_sample and the time since
// the mux change follow each channel's previous read plus the read's gap.
class ChannelClock {
 public:
  explicit ChannelClock(double sample_rate_hz) : m_rate(sample_rate_hz) {}

  void place(Work& w) {
    State& cs = m_channels[w.record.channel];
    cs.next_sample += w.gap;
    w.record.read_number = ++cs.read_number;
    w.record.start_sample = cs.next_sample;
    w.record.num_reads_since_mux_change = cs.read_number - 1;
    w.record.time_since_mux_change = static_cast<float>(static_cast<double>(cs.next_sample) / m_rate);
    cs.next_sample += w.record.num_samples;
  }

 private:
  struct State {
    uint32_t read_number = 0;
    uint64_t next_sample = 0;
  };
  double m_rate;
  std::unordered_map<uint32_t, State> m_channels;
};

}  // namespace

Status simulate(const std::filesystem::path& output, const SimulateOptions& o, SimulateStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  ESCPOD_ASSIGN_OR_RETURN(const std::filesystem::path truth_path, check_options(output, o));
  ESCPOD_ASSIGN_OR_RETURN(const SimInputs in, load_inputs(o));
  const pod5::RunInfo ri = simulated_run_info(o, in.kmer_desc);
  ESCPOD_ASSIGN_OR_RETURN(auto writer, pod5::FileWriter::create(output, o.writer));
  ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
  ESCPOD_ASSIGN_OR_RETURN(TruthWriter truth, TruthWriter::open(truth_path, o, in.kmer_desc));

  const ReadMaker maker(o, in, ri.acquisition_id);
  tbb::enumerable_thread_specific<Scratch> scratch;
  ChannelClock clock(o.params.sample_rate_hz);
  uint64_t next_index = 0, n_samples = 0;
  std::vector<pod5::SignalChunk> chunks;
  // Bytes: compressed signal written (its total is not known in advance).
  progress::Task progress(o.n_reads, 0);

  // Writes read w (serial, in read order): its channel timing, chunks and truth row.
  auto consume = [&](Work& w) -> Status {
    clock.place(w);
    chunks.clear();
    uint64_t bytes = 0;
    for (size_t i = 0; i < w.n_chunks; ++i) {
      chunks.push_back({std::span<const uint8_t>(w.chunk_bytes[i]), w.chunk_samples[i], w.record.read_id});
      bytes += w.chunk_bytes[i].size();
    }
    ESCPOD_RETURN_IF_ERROR(writer->add_read_chunks(w.record, chunks));
    ESCPOD_RETURN_IF_ERROR(truth.write(w.truth_row));
    n_samples += w.record.num_samples;
    progress.add(1, bytes);
    return Status::ok();
  };

  // Reads are generated in parallel on the streaming engine and written in index order, so the
  // output depends only on the seed. A read's cost in the byte budget: an estimate of its raw
  // signal and chunks (64 KiB; its real length is known only once generated).
  Executor& ex = Executor::for_threads(std::max(1, o.n_threads));
  constexpr uint64_t read_cost = uint64_t{64} << 10;
  OrderedStream<Work, char> stream(
      ex, {.max_bytes = std::max<uint64_t>(uint64_t{256} << 20, static_cast<uint64_t>(ex.width()) * (uint64_t{32} << 20)),
           .max_items = static_cast<size_t>(4 * ex.width())});
  ESCPOD_RETURN_IF_ERROR(stream.run(
      [&](Work& w, uint64_t* cost, bool* end) {
        if (next_index == o.n_reads) {
          *end = true;
          return Status::ok();
        }
        w.index = next_index++;
        *cost = read_cost;
        return Status::ok();
      },
      [] { return char{}; }, [&](Work& w, char&) { return maker.make(w, scratch.local()); },
      [&](Work& w, bool*) { return consume(w); },
      [](const Work& w) { return fmt::format("read {}", w.index); }));

  ESCPOD_RETURN_IF_ERROR(writer->finish());
  ESCPOD_RETURN_IF_ERROR(truth.close());
  ESCPOD_RETURN_IF_ERROR(writer->commit());
  ESCPOD_RETURN_IF_ERROR(truth.commit(o.writer.fsync));

  if (stats != nullptr) {
    stats->n_reads = o.n_reads;
    stats->n_samples = n_samples;
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats->truth_path = truth_path;
    stats->kmer_label = in.table.label();
    stats->kmer_synthetic = in.table.is_synthetic();
  }
  return Status::ok();
}

}  // namespace escpod::pipeline
