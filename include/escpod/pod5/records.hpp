// Plain value types for what a POD5 file holds: a read's fields and a run (acquisition) info.
// Independent of the file's table version: old layouts are mapped onto these on reading
// (see docs/formats.md §1.3 for the defaults of fields an old file lacks).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5 {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// End reasons in the official enum order: a file's dictionary index equals the enum value for
// files written by us and by current official writers, but readers always map by name.
inline constexpr std::array<std::string_view, 10> kEndReasonNames = {
    "unknown",          "mux_change",      "unblock_mux_change", "data_service_unblock_mux_change",
    "signal_positive",  "signal_negative", "api_request",        "device_data_error",
    "analysis_config_change", "paused"};

// Index of `name` in kEndReasonNames, or -1 if it is not a known end reason.
int end_reason_index(std::string_view name);

// The official default of end_reason_forced for a reason: false for unknown, signal_positive and
// signal_negative; true for the others.
bool end_reason_forced_default(std::string_view name);

// A 64-bit checksum of a read's samples for comparing copies and implementations:
// sum over i of (uint16(x[i]) + 1) * P^i modulo 2^64, P = 0x100000001b3. Order-sensitive and
// computable with numpy (wrapping uint64 cumprod), so tests can check us against other readers.
uint64_t signal_hash(std::span<const int16_t> samples);

// One read, every field the newest reads-table layout (V7) has. Missing fields of older layouts
// hold the official migration defaults (NaN for unknown floats, 0 for counters).
struct ReadRecord {
  ReadId read_id;
  uint32_t read_number = 0;
  uint64_t start_sample = 0;           // samples acquired on this channel before the read
  float median_before = kNaN;          // pA
  uint64_t num_minknow_events = 0;
  float tracked_scaling_scale = kNaN;  // deprecated fields, kept for lossless round trips
  float tracked_scaling_shift = kNaN;
  float predicted_scaling_scale = kNaN;
  float predicted_scaling_shift = kNaN;
  uint32_t num_reads_since_mux_change = 0;
  float time_since_mux_change = 0.0f;  // seconds
  uint64_t num_samples = 0;            // sum of the read's signal chunk sizes
  uint32_t channel = 0;                // 1-based; the full 32-bit value
  uint8_t well = 0;                    // 1-based
  std::string pore_type;
  float calibration_offset = 0.0f;     // ADC units; pA = (adc + offset) * scale
  float calibration_scale = 0.0f;      // pA per ADC unit
  std::string end_reason = "unknown";
  bool end_reason_forced = false;
  std::string run_info;                // acquisition_id of the read's run info
  float open_pore_level = kNaN;        // pA
  float expected_open_pore_level = kNaN;
  float selected_read_level = kNaN;
  // Global signal-table rows holding this read's samples, in sample order. Filled by readers;
  // writers ignore it (they lay out the signal themselves).
  std::vector<uint64_t> signal_rows;
};

// One acquisition (MinKNOW run). Maps keep their entry order (it is significant to equality).
struct RunInfo {
  std::string acquisition_id;
  int64_t acquisition_start_time_ms = 0;  // since the Unix epoch, UTC
  int16_t adc_max = 0;
  int16_t adc_min = 0;
  std::vector<std::pair<std::string, std::string>> context_tags;
  std::string experiment_name;
  std::string flow_cell_id;
  std::string flow_cell_product_code;
  std::string protocol_name;
  std::string protocol_run_id;
  int64_t protocol_start_time_ms = 0;
  std::string sample_id;
  uint16_t sample_rate = 0;  // samples per second per channel
  std::string sequencing_kit;
  std::string sequencer_position;
  std::string sequencer_position_type;
  std::string software;  // acquisition software, not the file writer
  std::string system_name;
  std::string system_type;
  std::vector<std::pair<std::string, std::string>> tracking_id;

  friend bool operator==(const RunInfo&, const RunInfo&) = default;
};

}  // namespace escpod::pod5
