// Writer round trips: what we write, we read back field for field and sample for sample.
#include "escpod/pod5/file_writer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <unordered_set>

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
