// Reading legacy FAST5 files (HDF5) as POD5 records: multi-read files (one `read_<id>` group per
// read, each with Raw, channel_id, context_tags and tracking_id) and single-read files
// (Raw/Reads/Read_N plus UniqueGlobalKey/{channel_id,context_tags,tracking_id}).
//
// Field mapping (the official `pod5 convert fast5` mapping; see convert_fast5 in pipeline/):
//   read_id, read_number, start_sample (Raw start_time), median_before, well (Raw start_mux),
//   num_minknow_events (default 0), tracked/predicted scaling shift and scale (default NaN),
//   num_reads_since_mux_change (0), time_since_mux_change (0) from the Raw group's attributes;
//   end_reason from Raw end_reason (FAST5 0 unknown, 1 partial -> unknown; n >= 2 -> POD5 enum
//   n - 1, forced flag at its default); pore_type from the read group (default "not_set");
//   channel from channel_id channel_number; calibration offset = channel_id offset, scale =
//   range / digitisation; open-pore levels NaN. Run info keyed by the read group's run_id (else
//   tracking_id run_id): adc -4096..4095 when digitisation is 8192, else 0..2047; sample_rate
//   from sampling_rate; start times from tracking_id exp_start_time / protocol_start_time
//   (ISO 8601, epoch when absent or unparsable); protocol_name = exp_script_name,
//   sequencer_position = device_id, sequencer_position_type = device_type (else minion/promethion
//   from the digitisation), system_name/type = host_product_serial_number/code, sequencing_kit
//   from context_tags; software "python-pod5-converter" (what the official converter records, so
//   converted runs compare equal); context_tags and tracking_id in stored attribute order.
//
// Signal is read as stored (the HDF5 chunk, still deflate- or VBZ-compressed) so that decoding
// can run on worker threads outside HDF5; layouts other than one filtered chunk per read are
// decoded by HDF5 itself (VBZ through the Debian HDF5 VBZ filter, registered at first open).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/records.hpp"

namespace escpod::fast5 {

enum class SignalCoding {
  kSamples,  // `samples` holds the decoded signal (contiguous, unfiltered or unusual layouts)
  kRaw,      // `bytes` is one unfiltered chunk: little-endian int16, at least n_samples
  kDeflate,  // `bytes` is one zlib (HDF5 deflate filter) chunk of decoded_bytes bytes
  kVbz,      // `bytes` is one HDF5 VBZ-filter chunk (filter id 32020) with `filter_params`
};

// A read's signal as stored in the file, ready for decode_signal().
struct StoredSignal {
  SignalCoding coding = SignalCoding::kSamples;
  uint64_t n_samples = 0;
  uint64_t decoded_bytes = 0;  // size of the whole decoded chunk (>= 2 * n_samples)
  std::vector<uint8_t> bytes;
  std::vector<unsigned> filter_params;
  std::vector<int16_t> samples;
};

// One read: every POD5 field (record.run_info holds the acquisition id) and its stored signal.
struct Fast5Read {
  pod5::ReadRecord record;
  std::shared_ptr<const pod5::RunInfo> run_info;  // shared by every read of the acquisition
  std::string group;                              // HDF5 path of the read, for messages
  StoredSignal signal;
};

// One open FAST5 file. Not thread-safe (HDF5 calls; the HDF5 library serialises them anyway):
// one thread reads a file. Errors name the file, the read (id, else group) and what is wrong.
class Fast5File {
 public:
  ~Fast5File();
  Fast5File(const Fast5File&) = delete;
  Fast5File& operator=(const Fast5File&) = delete;

  // Opens `path` and lists its reads (multi-read: groups named read_* in name order;
  // single-read: the one Raw/Reads/Read_* group). kCorrupt when it is not a readable HDF5 file,
  // kUnsupported when it is HDF5 but neither FAST5 layout.
  static Result<std::unique_ptr<Fast5File>> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  bool is_multi_read() const;
  size_t n_reads() const;
  const std::string& read_group(size_t read_idx) const;

  // Reads read `read_idx` (< n_reads()) into `out` (its buffers reused). kCorrupt naming the
  // file, read and attribute or dataset when one is missing or has an unusable type or value.
  Status read(size_t read_idx, Fast5Read& out);

 private:
  struct Impl;
  explicit Fast5File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// Decodes a stored signal into `out` (resized to n_samples). Thread-safe, calls no HDF5
// function (deflate through zlib, VBZ through the HDF5 VBZ filter plugin's own filter function,
// the code HDF5 would run). kCorrupt, with `what` (e.g. "file.fast5: read <id>") leading the
// message, when the bytes do not decode to at least n_samples samples.
Status decode_signal(const StoredSignal& signal, std::vector<int16_t>& out, const std::string& what);

// Parses an ISO 8601 date-time as the official converter does (iso8601.parse_date): returns
// milliseconds since the Unix epoch, or 0 when the text is not a date-time.
int64_t parse_iso8601_ms(std::string_view text);

// "HDF5 1.10.8": the version of the HDF5 library loaded (escpod --version).
std::string hdf5_version();

}  // namespace escpod::fast5
