// Writer round trips: what we write, we read back field for field and sample for sample.
#include "escpod/pod5/file_writer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <cstring>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "escpod/pod5/read_id_map.hpp"
#include "pod5/read_id_set.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {

RunInfo make_run_info(const std::string& id) {
  RunInfo ri;
  ri.acquisition_id = id;
  ri.acquisition_start_time_ms = 1700000000123;
  ri.adc_max = 2047;
  ri.adc_min = -2048;
  ri.context_tags = {{"sample_frequency", "5000"}, {"experiment_type", "rna"}};
  ri.experiment_name = "exp";
  ri.flow_cell_id = "FAX00001";
  ri.flow_cell_product_code = "FLO-MIN004RA";
  ri.protocol_name = "sequencing/sequencing_MIN004RA_RNA004";
  ri.protocol_run_id = "prid";
  ri.protocol_start_time_ms = 1700000000000;
  ri.sample_id = "sample";
  ri.sample_rate = 4000;
  ri.sequencing_kit = "sqk-rna004";
  ri.sequencer_position = "MN00001";
  ri.sequencer_position_type = "MinION Mk1B";
  ri.software = "MinKNOW";
  ri.system_name = "host";
  ri.system_type = "linux";
  ri.tracking_id = {{"z_last", "1"}, {"a_first", "2"}};  // order must survive
  return ri;
}

struct TestRead {
  ReadRecord record;
  std::vector<int16_t> signal;
};

std::vector<TestRead> make_reads(size_t n, uint32_t seed, const std::vector<std::string>& runs) {
  std::mt19937 rng(seed);
  std::vector<TestRead> reads;
  for (size_t k = 0; k < n; ++k) {
    TestRead t;
    ReadRecord& r = t.record;
    r.read_id = ReadId::random();
    r.read_number = static_cast<uint32_t>(rng());
    r.start_sample = rng();
    r.median_before = static_cast<float>(rng() % 1000) / 7.0f;
    r.num_minknow_events = rng() % 5000;
    r.channel = k == 3 ? 70000u : static_cast<uint32_t>(1 + rng() % 3000);  // one channel beyond 16 bits
    r.well = static_cast<uint8_t>(1 + rng() % 4);
    r.pore_type = "pore_" + std::to_string(k / 7);  // new values keep appearing: deltas
    r.calibration_offset = -240.0f + static_cast<float>(k);
    r.calibration_scale = 0.1462f;
    r.end_reason = std::string(kEndReasonNames[k % kEndReasonNames.size()]);
    r.end_reason_forced = k % 3 == 0;
    r.run_info = runs[k % runs.size()];
    r.open_pore_level = k % 2 ? kNaN : 211.5f;
    r.expected_open_pore_level = 200.25f;
    r.selected_read_level = kNaN;
    r.time_since_mux_change = 1.5f;
    r.num_reads_since_mux_change = 3;
    // Lengths around the chunk size, zero included.
    const size_t len = k == 0 ? 0 : (rng() % 2500);
    t.signal.resize(len);
    int v = 500;
    for (auto& s : t.signal) {
      v += static_cast<int>(rng() % 61) - 30;
      if (rng() % 500 == 0) v = static_cast<int>(rng() % 65536) - 32768;
      s = static_cast<int16_t>(std::clamp(v, -32768, 32767));
    }
    reads.push_back(std::move(t));
  }
  return reads;
}

void expect_same_float(float a, float b, const char* what) {
  if (std::isnan(a)) {
    EXPECT_TRUE(std::isnan(b)) << what;
  } else {
    EXPECT_EQ(a, b) << what;
  }
}

void check_round_trip(bool vbz) {
  auto dir = test::scratch_dir(vbz ? "vbz" : "raw");
  auto path = dir / "out.pod5";
  WriterOptions opts;
  opts.vbz = vbz;
  opts.max_chunk_samples = 1000;  // small: reads span several chunks
  opts.signal_batch_rows = 7;     // several batches, flushed mid-read
  opts.read_batch_rows = 11;
  std::vector<std::string> runs = {"acq_a", "acq_b"};
  auto reads = make_reads(60, vbz ? 1 : 2, runs);
  {
    auto writer = FileWriter::create(path, opts);
    ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
    ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq_a")).is_ok());
    ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq_b")).is_ok());
    ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq_a")).is_ok());  // deduplicated
    for (const auto& t : reads) {
      Status s = (*writer)->add_read(t.record, t.signal);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << "visible before close";
    ASSERT_TRUE((*writer)->close().is_ok());
  }
  // Only the final file is left in the folder.
  size_t n_files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n_files;
  }
  EXPECT_EQ(n_files, 1u);

  auto file = FileReader::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  const FileInfo& info = (*file)->info();
  EXPECT_EQ(info.is_vbz, vbz);
  EXPECT_EQ(info.n_reads, reads.size());
  EXPECT_EQ(info.read_table_version, ReadTableVersion::kV7);
  EXPECT_EQ(info.pod5_version, kWrittenPod5Version);
  EXPECT_EQ(info.software, "escpod");
  EXPECT_TRUE((*file)->signal_table_info()->uniform);
  EXPECT_EQ(info.n_read_batches, 6u);
  ASSERT_EQ((*file)->run_infos().size(), 2u);
  EXPECT_EQ((*file)->run_infos()[0], make_run_info("acq_a"));

  VbzCodec codec;
  size_t k = 0;
  for (size_t b = 0; b < (*file)->n_read_batches(); ++b) {
    auto batch = (*file)->read_batch(b);
    ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
    for (size_t i = 0; i < batch->size(); ++i, ++k) {
      const ReadRecord& want = reads[k].record;
      ReadRecord got = (*file)->record(*batch, i);
      SCOPED_TRACE("read " + std::to_string(k));
      EXPECT_EQ(got.read_id, want.read_id);
      EXPECT_EQ(got.read_number, want.read_number);
      EXPECT_EQ(got.start_sample, want.start_sample);
      expect_same_float(got.median_before, want.median_before, "median_before");
      EXPECT_EQ(got.num_minknow_events, want.num_minknow_events);
      EXPECT_EQ(got.channel, want.channel);
      EXPECT_EQ(got.well, want.well);
      EXPECT_EQ(got.pore_type, want.pore_type);
      EXPECT_EQ(got.calibration_offset, want.calibration_offset);
      EXPECT_EQ(got.calibration_scale, want.calibration_scale);
      EXPECT_EQ(got.end_reason, want.end_reason);
      EXPECT_EQ(got.end_reason_forced, want.end_reason_forced);
      EXPECT_EQ(got.run_info, want.run_info);
      expect_same_float(got.open_pore_level, want.open_pore_level, "open_pore_level");
      expect_same_float(got.expected_open_pore_level, want.expected_open_pore_level, "expected");
      expect_same_float(got.selected_read_level, want.selected_read_level, "selected");
      EXPECT_EQ(got.time_since_mux_change, want.time_since_mux_change);
      EXPECT_EQ(got.num_reads_since_mux_change, want.num_reads_since_mux_change);
      EXPECT_EQ(got.num_samples, reads[k].signal.size());
      EXPECT_EQ(got.signal_rows.size(), (reads[k].signal.size() + 999) / 1000);
      std::vector<int16_t> samples(got.num_samples);
      ASSERT_TRUE((*file)->read_signal(got.signal_rows, samples, codec).is_ok());
      EXPECT_EQ(samples, reads[k].signal);
      for (uint64_t row : got.signal_rows) {
        auto chunk = (*file)->signal_chunk(row);
        ASSERT_TRUE(chunk.is_ok());
        EXPECT_EQ(chunk->read_id, want.read_id) << "signal table must hold the real read id";
      }
    }
  }
  EXPECT_EQ(k, reads.size());
}

TEST(FileWriter, RoundTripVbz) { check_round_trip(true); }
TEST(FileWriter, RoundTripUncompressed) { check_round_trip(false); }

TEST(FileWriter, EmptyFileIsValid) {
  auto path = test::scratch_dir("empty") / "empty.pod5";
  auto writer = FileWriter::create(path);
  ASSERT_TRUE(writer.is_ok());
  ASSERT_TRUE((*writer)->close().is_ok());
  auto file = FileReader::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ((*file)->info().n_reads, 0u);
}

TEST(FileWriter, RejectsBadReadsWithClearErrors) {
  auto path = test::scratch_dir("bad") / "bad.pod5";
  auto writer = FileWriter::create(path);
  ASSERT_TRUE(writer.is_ok());
  ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq")).is_ok());
  ReadRecord r;
  r.read_id = ReadId::random();
  r.run_info = "nope";
  Status s = (*writer)->add_read(r, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("run info 'nope'"), std::string::npos) << s.message();
  r.run_info = "acq";
  r.end_reason = "bogus";
  s = (*writer)->add_read(r, {});
  EXPECT_NE(s.message().find("unknown end reason 'bogus'"), std::string::npos) << s.message();
  r.end_reason = "signal_positive";
  EXPECT_TRUE((*writer)->add_read(r, {}).is_ok());
  s = (*writer)->add_read(r, {});
  EXPECT_NE(s.message().find("duplicate read id " + r.read_id.to_string()), std::string::npos);
}

TEST(FileWriter, UnclosedWriterLeavesNothingAndExistingFileIsKept) {
  auto dir = test::scratch_dir("unclosed");
  auto path = dir / "x.pod5";
  {
    auto writer = FileWriter::create(path);
    ASSERT_TRUE(writer.is_ok());
    ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq")).is_ok());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  {
    auto writer = FileWriter::create(path);
    ASSERT_TRUE((*writer)->close().is_ok());
  }
  const auto size = std::filesystem::file_size(path);
  auto again = FileWriter::create(path);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  WriterOptions overwrite;
  overwrite.overwrite = true;
  {
    auto writer = FileWriter::create(path, overwrite);
    ASSERT_TRUE(writer.is_ok());
    ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq")).is_ok());
    // dropped without close: the previous file stays as it was
  }
  EXPECT_EQ(std::filesystem::file_size(path), size);
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  EXPECT_EQ(n, 1u);
}

// Chunks given with ChunkBytes::kBorrow are written from where they lie when the batch is
// written, not when added: changing the bytes in between shows in the file. kCopy and writers
// under a signal budget take the bytes as they were. Borrowed, copied and encoded chunks mix in
// one batch (several pieces of a writev, contiguous ones merged) and in odd sizes.
TEST(FileWriter, BorrowedChunksAreWrittenFromWhereTheyLie) {
  auto dir = test::scratch_dir("borrow");
  auto reads = make_reads(23, 5, {"acq"});
  // Raw (uncompressed) chunks: any bytes are valid signal, so a change is visible sample by sample.
  // All reads' samples in one arena, a read's two chunks back to back (merged into one piece),
  // a gap of 8 samples between reads (separate pieces).
  std::vector<int16_t> arena;
  std::vector<size_t> start;
  for (const auto& t : reads) {
    start.push_back(arena.size());
    arena.insert(arena.end(), t.signal.begin(), t.signal.end());
    arena.insert(arena.end(), 8, int16_t{0});
  }
  // Modes: 0 borrow, 1 copy, 2 borrow under a budget (copies), 3 borrow with batches written
  // while adding (asynchronously, several in turn) and no change: a plain round trip, 4 borrow
  // and then copy_borrowed_in() over the first half of the reads' bytes before the change.
  for (int mode = 0; mode < 5; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    std::vector<int16_t> bytes = arena;
    WriterOptions opts;
    opts.vbz = false;
    opts.signal_batch_rows = mode == 3 ? 5 : 1000;  // mode 3: batches flush while adding
    if (mode == 2) opts.signal_budget = std::make_shared<SignalMemoryBudget>(int64_t{1} << 30);
    const auto path = dir / ("out" + std::to_string(mode) + ".pod5");
    auto writer = FileWriter::create(path, opts);
    ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
    ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq")).is_ok());
    for (size_t k = 0; k < reads.size(); ++k) {
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + start[k]);
      const size_t n = reads[k].signal.size();
      // Two chunks of uneven size (the second may be empty).
      std::vector<SignalChunk> chunks(2);
      const size_t half = n / 3;
      chunks[0].bytes = {p, half * 2};
      chunks[0].n_samples = static_cast<uint32_t>(half);
      chunks[1].bytes = {p + half * 2, (n - half) * 2};
      chunks[1].n_samples = static_cast<uint32_t>(n - half);
      Status s;
      if (k % 5 == 4) {
        s = (*writer)->add_read(reads[k].record, reads[k].signal);  // owned, encoded
      } else {
        const ChunkBytes how = (mode == 1 || k % 7 == 6) ? ChunkBytes::kCopy : ChunkBytes::kBorrow;
        s = (*writer)->add_read_chunks(reads[k].record, chunks, how);
      }
      ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
    const size_t first_half = start[reads.size() / 2];  // samples of reads [0, n/2)
    if (mode == 4) {
      Status s = (*writer)->copy_borrowed_in(bytes.data(), bytes.data() + first_half);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
    // Change every byte after adding: borrowed chunks not yet written pick the change up.
    if (mode != 3) {
      for (auto& v : bytes) v = static_cast<int16_t>(~v);
    }
    ASSERT_TRUE((*writer)->close().is_ok());

    auto file = FileReader::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    EXPECT_TRUE((*file)->signal_table_info()->uniform);
    VbzCodec codec;
    size_t k = 0;
    for (size_t b = 0; b < (*file)->n_read_batches(); ++b) {
      auto batch = (*file)->read_batch(b);
      ASSERT_TRUE(batch.is_ok());
      for (size_t i = 0; i < batch->size(); ++i, ++k) {
        ReadRecord got = (*file)->record(*batch, i);
        ASSERT_EQ(got.read_id, reads[k].record.read_id);
        std::vector<int16_t> samples(got.num_samples);
        ASSERT_TRUE((*file)->read_signal(got.signal_rows, samples, codec).is_ok());
        // Reads copied in mode 4: a piece is copied whole when any byte of it is in the range
        // (the range ends where read n/2 starts, so exactly the reads before it).
        const bool copied_later = mode == 4 && start[k] < first_half;
        const bool borrowed = k % 5 != 4 && mode != 1 && mode != 2 && mode != 3 && k % 7 != 6 &&
                              !copied_later;
        std::vector<int16_t> want = reads[k].signal;
        if (borrowed) {
          for (auto& v : want) v = static_cast<int16_t>(~v);
        }
        EXPECT_EQ(samples, want) << "read " << k << (borrowed ? " (borrowed)" : " (copied)");
      }
    }
    EXPECT_EQ(k, reads.size());
  }
}

TEST(FileWriter, MissingFolderIsAClearError) {
  auto writer = FileWriter::create("/nonexistent-escpod-dir/x.pod5");
  ASSERT_FALSE(writer.is_ok());
  EXPECT_NE(writer.status().message().find("/nonexistent-escpod-dir"), std::string::npos);
}


// Rows read for random access (a lazy open: straight from the file, pod5/reads_rows.hpp) equal
// the same rows decoded through Arrow from a fully validated open, field for field and bit for
// bit, for every row, runs of rows and whole batches: files of every reads-table version that
// has a num_samples column (V3, V4 real; V7 ours, with batches of 11 rows so booleans start
// mid-byte) and both signal encodings.
void expect_same_rows(const ReadBatch& a, const ReadBatch& b, const std::string& where) {
  auto bits = [](const auto& x, const auto& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0);
  };
  EXPECT_EQ(a.batch_idx, b.batch_idx) << where;
  EXPECT_EQ(a.first_read_idx, b.first_read_idx) << where;
  EXPECT_TRUE(bits(a.read_id, b.read_id)) << where;
  EXPECT_EQ(a.signal_offsets, b.signal_offsets) << where;
  EXPECT_EQ(a.signal_rows, b.signal_rows) << where;
  EXPECT_EQ(a.read_number, b.read_number) << where;
  EXPECT_EQ(a.start_sample, b.start_sample) << where;
  EXPECT_TRUE(bits(a.median_before, b.median_before)) << where;
  EXPECT_EQ(a.num_minknow_events, b.num_minknow_events) << where;
  EXPECT_TRUE(bits(a.tracked_scaling_scale, b.tracked_scaling_scale)) << where;
  EXPECT_TRUE(bits(a.tracked_scaling_shift, b.tracked_scaling_shift)) << where;
  EXPECT_TRUE(bits(a.predicted_scaling_scale, b.predicted_scaling_scale)) << where;
  EXPECT_TRUE(bits(a.predicted_scaling_shift, b.predicted_scaling_shift)) << where;
  EXPECT_EQ(a.num_reads_since_mux_change, b.num_reads_since_mux_change) << where;
  EXPECT_TRUE(bits(a.time_since_mux_change, b.time_since_mux_change)) << where;
  EXPECT_EQ(a.num_samples, b.num_samples) << where;
  EXPECT_EQ(a.channel, b.channel) << where;
  EXPECT_EQ(a.well, b.well) << where;
  EXPECT_EQ(a.pore_type_idx, b.pore_type_idx) << where;
  EXPECT_TRUE(bits(a.calibration_offset, b.calibration_offset)) << where;
  EXPECT_TRUE(bits(a.calibration_scale, b.calibration_scale)) << where;
  EXPECT_EQ(a.end_reason_idx, b.end_reason_idx) << where;
  EXPECT_EQ(a.end_reason_forced, b.end_reason_forced) << where;
  EXPECT_EQ(a.run_info_idx, b.run_info_idx) << where;
  EXPECT_TRUE(bits(a.open_pore_level, b.open_pore_level)) << where;
  EXPECT_TRUE(bits(a.expected_open_pore_level, b.expected_open_pore_level)) << where;
  EXPECT_TRUE(bits(a.selected_read_level, b.selected_read_level)) << where;
}

// read_signal_ref of every row of reads batch b (all of it in `batch`, from the fully validated
// reader `full`) holds exactly the columns decoding signal needs, equal to the batch's, from
// both readers; its other columns are empty where the row came from the file. The signal
// decoded by the random-access reader (chunks read with pread) equals the full reader's.
void expect_signal_refs_equal(const FileReader& lazy, const FileReader& full, const ReadBatch& batch, size_t b) {
  const std::string where = lazy.path().string() + " batch " + std::to_string(b);
  VbzCodec codec;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (const FileReader* reader : {&lazy, &full}) {
      auto ref = reader->read_signal_ref(b, i);
      ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
      ASSERT_EQ(ref->size(), 1u) << where;
      EXPECT_EQ(ref->read_id[0], batch.read_id[i]) << where << " row " << i;
      EXPECT_EQ(ref->num_samples[0], batch.num_samples[i]) << where << " row " << i;
      EXPECT_EQ(ref->calibration_offset[0], batch.calibration_offset[i]) << where << " row " << i;
      EXPECT_EQ(ref->calibration_scale[0], batch.calibration_scale[i]) << where << " row " << i;
      const auto rows = ref->rows_of(0), expected = batch.rows_of(i);
      EXPECT_TRUE(std::equal(rows.begin(), rows.end(), expected.begin(), expected.end())) << where << " row " << i;
      EXPECT_EQ(ref->batch_idx, b);
      EXPECT_EQ(ref->first_read_idx, batch.first_read_idx + i);
      // (Open decodes the last reads batch for its dictionaries: its rows come from the batch.)
      if (reader == &lazy && b + 1 < lazy.n_read_batches()) {
        EXPECT_TRUE(ref->read_number.empty() && ref->pore_type_idx.empty()) << where;
      }
    }
    if (i % 7 != 0) continue;  // the signal of every seventh read
    std::vector<int16_t> a(batch.num_samples[i]), e(batch.num_samples[i]);
    ASSERT_TRUE(lazy.read_signal(batch.rows_of(i), a, codec).is_ok()) << where;
    ASSERT_TRUE(full.read_signal(batch.rows_of(i), e, codec).is_ok()) << where;
    EXPECT_EQ(a, e) << where << " row " << i;
  }
  auto past = lazy.read_signal_ref(b, batch.size());
  ASSERT_FALSE(past.is_ok());
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find(lazy.path().string()), std::string::npos) << past.status().message();
}

void expect_random_access_rows_equal(const std::filesystem::path& path) {
  auto full = FileReader::open(path);
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  OpenOptions lazy_options;
  lazy_options.validate_all_batches = false;
  auto lazy = FileReader::open(path, lazy_options);
  ASSERT_TRUE(lazy.is_ok()) << lazy.status().to_string();
  EXPECT_TRUE((*lazy)->reads_rows_from_file()) << path;
  EXPECT_FALSE((*full)->reads_rows_from_file()) << path;
  size_t n_rows = 0;
  for (size_t b = 0; b < (*full)->n_read_batches(); ++b) {
    const size_t rows = (*full)->batch_rows(b);
    ASSERT_EQ((*lazy)->batch_rows(b), rows);
    std::vector<std::pair<size_t, size_t>> slices = {{0, rows}, {0, 0}};
    for (size_t r = 0; r < rows; ++r) slices.emplace_back(r, 1);
    if (rows > 5) slices.emplace_back(3, rows - 5);
    for (const auto& [first, n] : slices) {
      auto a = (*lazy)->read_batch_rows(b, first, n);
      auto e = (*full)->read_batch_rows(b, first, n);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      ASSERT_TRUE(e.is_ok()) << e.status().to_string();
      ASSERT_EQ(a->size(), n);
      expect_same_rows(*a, *e, path.string() + " batch " + std::to_string(b) + " rows " + std::to_string(first) +
                                   "+" + std::to_string(n));
    }
    n_rows += rows;
    // Rows read one by one and appended in turn make the batch again (ReadBatch::append_row).
    ReadBatch joined;
    for (size_t r = 0; r < rows; ++r) {
      auto one = (*lazy)->read_batch_rows(b, r, 1);
      ASSERT_TRUE(one.is_ok()) << one.status().to_string();
      joined.append_row(*one, 0);
    }
    auto whole = (*full)->read_batch(b);
    ASSERT_TRUE(whole.is_ok());
    joined.batch_idx = whole->batch_idx;
    joined.first_read_idx = whole->first_read_idx;
    if (rows == 0) joined.signal_offsets = {0};
    expect_same_rows(joined, *whole, path.string() + " batch " + std::to_string(b) + " appended row by row");
    // And each read's stored signal chunks (signal batch views read from the file).
    auto batch = (*full)->read_batch_rows(b, 0, rows);
    ASSERT_TRUE(batch.is_ok());
    expect_signal_refs_equal(**lazy, **full, *batch, b);
    for (size_t i = 0; i < rows; ++i) {
      for (uint64_t row : batch->rows_of(i)) {
        auto a = (*lazy)->signal_chunk(row);
        auto e = (*full)->signal_chunk(row);
        ASSERT_TRUE(a.is_ok()) << a.status().to_string();
        ASSERT_TRUE(e.is_ok()) << e.status().to_string();
        EXPECT_EQ(a->n_samples, e->n_samples);
        EXPECT_EQ(a->read_id, e->read_id);
        ASSERT_EQ(a->bytes.size(), e->bytes.size());
        EXPECT_EQ(std::memcmp(a->bytes.data(), e->bytes.data(), a->bytes.size()), 0) << path << " signal row " << row;
      }
    }
  }
  EXPECT_EQ(n_rows, (*full)->info().n_reads);
  EXPECT_GT(n_rows, 0u);
}

TEST(FileReader, RandomAccessRowsEqualArrowDecoding) {
  expect_random_access_rows_equal(test::shared_data("pod5/multi_fast5_zip_v3.pod5"));
  expect_random_access_rows_equal(test::shared_data("escapepod/drna/yeast_trna_reads.pod5"));
  for (bool vbz : {true, false}) {
    auto path = test::scratch_dir(vbz ? "rows_vbz" : "rows_raw") / "rows.pod5";
    WriterOptions opts;
    opts.vbz = vbz;
    opts.max_chunk_samples = 1000;
    opts.signal_batch_rows = 7;
    opts.read_batch_rows = 11;
    std::vector<std::string> runs = {"acq_a", "acq_b"};
    auto reads = make_reads(60, 5, runs);
    {
      auto writer = FileWriter::create(path, opts);
      ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
      for (const auto& id : runs) ASSERT_TRUE((*writer)->add_run_info(make_run_info(id)).is_ok());
      for (const auto& t : reads) ASSERT_TRUE((*writer)->add_read(t.record, t.signal).is_ok());
      ASSERT_TRUE((*writer)->close().is_ok());
    }
    expect_random_access_rows_equal(path);
  }
}

// How the read-id index opens a file: batches validated when read, with its stored layout.
OpenOptions random_access_options(const BatchLayout& layout) {
  OpenOptions options;
  options.validate_all_batches = false;
  options.layout = &layout;
  return options;
}

// Writes n test reads of one run ("acq_a") in reads batches of 11 rows (several batches from a
// few reads, for the damaged-file tests below) and gives where its reads table lies and its
// batch layout (as the read-id index stores it).
void write_batches_of_11(const std::filesystem::path& path, size_t n, uint32_t seed,
                         FileInfo::TableSpan* reads_table, BatchLayout* layout) {
  WriterOptions opts;
  opts.read_batch_rows = 11;
  auto writer = FileWriter::create(path, opts);
  ASSERT_TRUE(writer.is_ok());
  ASSERT_TRUE((*writer)->add_run_info(make_run_info("acq_a")).is_ok());
  for (const auto& t : make_reads(n, seed, {"acq_a"})) ASSERT_TRUE((*writer)->add_read(t.record, t.signal).is_ok());
  ASSERT_TRUE((*writer)->close().is_ok());
  auto full = FileReader::open(path);
  ASSERT_TRUE(full.is_ok());
  *reads_table = (*full)->info().reads_table;
  auto got = (*full)->batch_layout();
  ASSERT_TRUE(got.is_ok());
  *layout = *got;
}

TEST(FileReader, RandomAccessRowsOfADamagedBatchFailWithTheFileAndBatch) {
  // A reads batch whose header no longer describes it: an open with the batch layout (as the
  // read-id index opens files) reads no batch but the last, so it succeeds, and reading a row
  // of the damaged batch fails with the file and batch named, never crashes.
  auto dir = test::scratch_dir("rows_damaged");
  auto path = dir / "rows.pod5";
  FileInfo::TableSpan reads_table;
  BatchLayout layout;
  ASSERT_NO_FATAL_FAILURE(write_batches_of_11(path, 40, 6, &reads_table, &layout));
  // Overwrite one message of the reads table with garbage, trying each in turn: those the open
  // needs (the schema, the dictionaries, the last batch) fail the open; the first that leaves it
  // working is an earlier record batch.
  const std::string original = test::file_bytes(path);
  const auto table_begin = static_cast<size_t>(reads_table.offset);
  const auto table_end = table_begin + static_cast<size_t>(reads_table.length);
  const OpenOptions lazy_options = random_access_options(layout);
  size_t n_failed = 0;
  for (size_t marker = original.find("\xff\xff\xff\xff", table_begin);
       marker != std::string::npos && marker < table_end && n_failed == 0;
       marker = original.find("\xff\xff\xff\xff", marker + 4)) {
    std::string bytes = original;
    for (size_t i = marker + 8; i < marker + 64; ++i) bytes[i] = static_cast<char>(0x5a);
    test::write_file_bytes(path, bytes);
    auto lazy = FileReader::open(path, lazy_options);
    if (!lazy.is_ok()) {
      EXPECT_NE(lazy.status().message().find(path.string()), std::string::npos) << lazy.status().to_string();
      continue;
    }
    ASSERT_TRUE((*lazy)->reads_rows_from_file());
    for (size_t b = 0; b < (*lazy)->n_read_batches(); ++b) {
      for (size_t r = 0; r < (*lazy)->batch_rows(b); ++r) {
        auto rows = (*lazy)->read_batch_rows(b, r, 1);
        if (rows.is_ok()) continue;
        ++n_failed;
        EXPECT_NE(rows.status().message().find(path.string()), std::string::npos) << rows.status().to_string();
        EXPECT_NE(rows.status().message().find("reads batch " + std::to_string(b)), std::string::npos)
            << rows.status().to_string();
      }
    }
  }
  EXPECT_GT(n_failed, 0u);
}

TEST(FileReader, ADictionaryIndexOutsideItsDictionaryNamesTheBatchRowAndColumn) {
  // One end_reason index of the first reads batch set past the dictionary's end. Arrow's full
  // validation refuses the file at open; a random-access open (as the read-id index opens
  // files) reads no batch but the last, and reading the damaged row fails naming the file and
  // batch (and, straight from the file, the row and column), never indexing past the strings.
  auto dir = test::scratch_dir("dictionary_index");
  auto path = dir / "dict.pod5";
  FileInfo::TableSpan table;
  BatchLayout layout;
  ASSERT_NO_FATAL_FAILURE(write_batches_of_11(path, 30, 8, &table, &layout));
  std::vector<int16_t> stored;  // batch 0's 11 indices, as stored
  {
    auto intact = FileReader::open(path);
    ASSERT_TRUE(intact.is_ok());
    auto batch = (*intact)->read_batch(0);
    ASSERT_TRUE(batch.is_ok());
    stored = batch->end_reason_idx;
  }
  ASSERT_EQ(stored.size(), 11u);
  std::string bytes = test::file_bytes(path);
  // The column's values buffer in the reads table: the first place holding that sequence (batch
  // 0 comes first; a later match can straddle another batch's padding and values). The errors
  // checked below name batch 0, row 4 and the column: they would not if this were elsewhere.
  const std::string pattern(reinterpret_cast<const char*>(stored.data()), 2 * stored.size());
  const auto table_begin = static_cast<size_t>(table.offset);
  const size_t found = bytes.find(pattern, table_begin);
  ASSERT_NE(found, std::string::npos);
  ASSERT_LT(found, table_begin + static_cast<size_t>(table.length));
  const int16_t past_the_end = 0x7fff;
  std::memcpy(bytes.data() + found + 2 * 4, &past_the_end, 2);  // row 4
  test::write_file_bytes(path, bytes);
  EXPECT_FALSE(FileReader::open(path).is_ok());  // every batch validated

  auto lazy = FileReader::open(path, random_access_options(layout));
  ASSERT_TRUE(lazy.is_ok()) << lazy.status().to_string();
  ASSERT_TRUE((*lazy)->reads_rows_from_file());
  const std::string expected = "reads batch 0 row 4: end_reason index 32767 outside its dictionary";
  auto one_row = (*lazy)->read_batch_rows(0, 2, 4);  // rows 2-5, from the file
  ASSERT_FALSE(one_row.is_ok());
  EXPECT_NE(one_row.status().message().find(path.string() + ": " + expected), std::string::npos)
      << one_row.status().to_string();
  auto whole = (*lazy)->read_batch(0);  // through Arrow, whose validation names the position
  ASSERT_FALSE(whole.is_ok());
  EXPECT_NE(whole.status().message().find(path.string() + ": reads batch 0"), std::string::npos)
      << whole.status().to_string();
  EXPECT_NE(whole.status().message().find("32767"), std::string::npos) << whole.status().to_string();
  EXPECT_TRUE((*lazy)->read_batch_rows(0, 5, 6).is_ok());  // the other rows still read
}

}  // namespace
}  // namespace escpod::pod5

// The writer's duplicate guard against std::unordered_set: random, sequential and all-zero ids,
// through several growths.
TEST(ReadIdSet, AgreesWithStdSet) {
  std::mt19937_64 rng(17);
  escpod::pod5::detail::ReadIdSet set;
  std::unordered_set<escpod::pod5::ReadId, escpod::pod5::ReadIdHash> plain;
  std::vector<escpod::pod5::ReadId> inserted;
  for (int i = 0; i < 60000; ++i) {
    escpod::pod5::ReadId id{};
    const int kind = i % 4;
    if (kind == 0 || kind == 1) {  // random
      const uint64_t a = rng(), b = rng();
      std::memcpy(id.bytes.data(), &a, 8);
      std::memcpy(id.bytes.data() + 8, &b, 8);
    } else if (kind == 2) {  // sequential in the last byte pair
      id.bytes[14] = static_cast<uint8_t>(i >> 8);
      id.bytes[15] = static_cast<uint8_t>(i);
    } else if (!inserted.empty()) {  // a repeat
      id = inserted[rng() % inserted.size()];
    }  // else all zero
    const bool fresh = plain.insert(id).second;
    ASSERT_EQ(set.insert(id), fresh) << "insert " << i << " id " << id.to_string();
    if (fresh) inserted.push_back(id);
    ASSERT_EQ(set.size(), plain.size());
  }
  for (const auto& id : inserted) ASSERT_TRUE(set.contains(id));
  escpod::pod5::ReadId absent{};
  absent.bytes[0] = 0xAB;
  absent.bytes[1] = 0xCD;
  EXPECT_EQ(set.contains(absent), plain.count(absent) > 0);
  // Memory per id well under unordered_set's (~64 bytes).
  EXPECT_LE(set.memory_bytes(), 48 * set.size());
}

// ReadIdMap against std::unordered_map: the first value stored for an id stays, through growth,
// reserve, the all-zero id and clear().
TEST(ReadIdMap, AgreesWithStdMap) {
  std::mt19937_64 rng(23);
  escpod::pod5::ReadIdMap<uint32_t> map;
  std::unordered_map<escpod::pod5::ReadId, uint32_t, escpod::pod5::ReadIdHash> plain;
  map.reserve(5000);
  for (uint32_t i = 0; i < 40000; ++i) {
    escpod::pod5::ReadId id{};
    if (i % 3 == 0) {
      const uint64_t a = rng(), b = rng();
      std::memcpy(id.bytes.data(), &a, 8);
      std::memcpy(id.bytes.data() + 8, &b, 8);
    } else if (i % 3 == 1) {
      id.bytes[15] = static_cast<uint8_t>(i % 251);  // repeats, and the all-zero id
    } else {
      id.bytes[0] = static_cast<uint8_t>(i >> 8);
      id.bytes[7] = static_cast<uint8_t>(i);
    }
    const auto [value, fresh] = map.try_emplace(id, i);
    const auto [it, plain_fresh] = plain.emplace(id, i);
    ASSERT_EQ(fresh, plain_fresh) << i;
    ASSERT_EQ(*value, it->second) << i;
    ASSERT_EQ(map.size(), plain.size());
  }
  for (const auto& [id, v] : plain) {
    const uint32_t* found = map.find(id);
    ASSERT_NE(found, nullptr) << id.to_string();
    EXPECT_EQ(*found, v);
  }
  escpod::pod5::ReadId absent{};
  absent.bytes[3] = 0x5A;
  EXPECT_EQ(map.find(absent) != nullptr, plain.count(absent) > 0);
  map.clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.find(plain.begin()->first), nullptr);
}
