// A tour of the escapepod POD5 library: write a small file, then read it back.
//   write_and_read OUT.pod5 [N_READS]
// Writes N_READS reads (default 20) of synthetic signal with one run info, reopens the file,
// and prints each read's id, length and mean current in picoamps.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/file_writer.hpp"
#include "escpod/signal/calibration.hpp"

using namespace escpod;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.pod5 [N_READS]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int n_reads = argc > 2 ? std::atoi(argv[2]) : 20;

  pod5::WriterOptions options;
  options.software = "escpod example";
  options.overwrite = true;
  auto writer = pod5::FileWriter::create(path, options);
  if (!writer.is_ok()) {
    std::fprintf(stderr, "%s\n", writer.status().to_string().c_str());
    return 1;
  }
  pod5::RunInfo run;
  run.acquisition_id = "example-acquisition";
  run.adc_min = -4096;
  run.adc_max = 4095;
  run.sample_rate = 4000;
  run.sequencing_kit = "sqk-rna004";
  run.tracking_id = {{"run_id", "example"}};
  Status s = (*writer)->add_run_info(run);

  std::mt19937 rng(42);
  std::normal_distribution<float> noise(0.0f, 12.0f);
  for (int k = 0; k < n_reads && s.is_ok(); ++k) {
    pod5::ReadRecord read;
    read.read_id = pod5::ReadId::random();
    read.read_number = static_cast<uint32_t>(k);
    read.channel = static_cast<uint32_t>(1 + k % 512);
    read.well = 1;
    read.pore_type = "not_set";
    read.calibration_offset = -240.0f;
    read.calibration_scale = 0.1462f;
    read.end_reason = "signal_positive";
    read.run_info = run.acquisition_id;
    // A few levels with noise: the shape of a nanopore read, not a real one.
    std::vector<int16_t> signal(4000 + 500 * static_cast<size_t>(k % 7));
    for (size_t i = 0; i < signal.size(); ++i) {
      const float level = 900.0f + 150.0f * std::sin(static_cast<float>(i / 40) * 0.7f);
      signal[i] = static_cast<int16_t>(std::lround(level + noise(rng)));
    }
    s = (*writer)->add_read(read, signal);
  }
  if (s.is_ok()) s = (*writer)->close();  // the file appears at `path` only now
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }

  auto file = pod5::FileReader::open(path);
  if (!file.is_ok()) {
    std::fprintf(stderr, "%s\n", file.status().to_string().c_str());
    return 1;
  }
  pod5::VbzCodec codec;  // one per thread: owns the zstd context
  std::vector<int16_t> samples;
  std::vector<float> pa;
  for (size_t b = 0; b < (*file)->n_read_batches(); ++b) {
    auto batch = (*file)->read_batch(b);
    if (!batch.is_ok()) return 1;
    for (size_t i = 0; i < batch->size(); ++i) {
      samples.resize(batch->num_samples[i]);
      if (!(*file)->read_signal(batch->rows_of(i), samples, codec).is_ok()) return 1;
      pa.resize(samples.size());
      signal::calibrate_to_pa(samples, {batch->calibration_offset[i], batch->calibration_scale[i]}, pa);
      double sum = 0;
      for (float v : pa) sum += v;
      std::printf("%s\t%zu samples\tmean %.2f pA\n", batch->read_id[i].to_string().c_str(),
                  samples.size(), sum / static_cast<double>(pa.size()));
    }
  }
  return 0;
}
