// Default signal-processing block of trained models: the effective RNA004 configuration
// (shared/docs/warpdemux-algorithm.md section 3.0), verbatim from WDX4_rna004_v1_0.json.
#pragma once

namespace escpod::demux::detail {

inline constexpr const char* kRna004SignalProcessingJson = R"SP(
{
 "core": {
  "min_obs_adapter": 1000,
  "max_obs_adapter": 6500,
  "min_obs_polya": 100,
  "downscale_factor": 10,
  "max_obs_trace": 10000,
  "sig_norm_outlier_thresh": 5.0
 },
 "cnn_boundaries": {
  "cnn_detect": true,
  "model_name": "rna004_130bps@v0.2.4.pth",
  "polya_cand_k": 5,
  "fallback_to_llr_short_reads": true,
  "fallback_to_llr": true
 },
 "llr_boundaries": {
  "llr_detect": false,
  "adapter_peak_prominence": 1.0,
  "adapter_peak_rel_height": 1.0,
  "adapter_peak_width": 1000,
  "polya_peak_prominence": 1.0,
  "polya_peak_rel_height": 0.5,
  "polya_peak_width": 50
 },
 "mvs_polya": {
  "mvs_detect_check": true,
  "mvs_detect_overwrite": false,
  "search_window": 500,
  "pA_mean_window": 20,
  "pA_mean_range": [
   null,
   null
  ],
  "pA_var_window": 100,
  "pA_var_range": [
   null,
   30.0
  ],
  "median_shift_range": [
   5.0,
   null
  ],
  "median_shift_window": 1000,
  "polyA_window": 300,
  "polyA_med_range": [
   null,
   null
  ],
  "polyA_local_range": [
   null,
   null
  ],
  "pA_mean_adapter_med_scale_range": [
   1.3,
   null
  ]
 },
 "real_range": {
  "detect_open_pores": true,
  "real_signal_check": true,
  "mean_window": 300,
  "mean_start_range": [
   null,
   null
  ],
  "mean_end_range": [
   null,
   null
  ],
  "max_obs_local_range": 5000,
  "local_range": [
   7.0,
   35.0
  ],
  "adapter_mad_range": [
   3.0,
   12.0
  ]
 },
 "med_shift": {
  "detect_med_shift": false,
  "med_shift_window": 2000,
  "med_shift_range": [
   5.0,
   null
  ]
 },
 "rna_start_peak": {
  "detect_rna_start_peak": false,
  "downscale_factor": 10,
  "start_peak_max_idx": 150,
  "offset1": 10,
  "offset2": 100,
  "open_pore_pa": 195.0,
  "min_start_peak_pa": 83.0,
  "adapter_med_polya_mean_scale": 1.3,
  "min_len_polya": 10,
  "detect_polya": false,
  "detect_polya_min_len": 10,
  "detect_polya_max_len": 80,
  "detect_polya_std_scale": 2.5,
  "fallback_to_llr": true
 },
 "sig_extract": {
  "padding": 100,
  "normalization": "none"
 },
 "segmentation": {
  "min_obs_per_base": 6,
  "running_stat_width": 12,
  "num_events": 110,
  "accept_less_cpts": false,
  "consensus_refinement": false,
  "consensus_model": "",
  "consensus_subseq_match_normalization": "mean",
  "consensus_subseq_match_penalty": 1.5,
  "consensus_subseq_match_psi": [
   5,
   0,
   40,
   0
  ],
  "consensus_subseq_match_ub_start": 18,
  "consensus_subseq_match_lb_end": 69,
  "consensus_subseq_match_ub_end": 97,
  "refinement_optimal_cpts": false,
  "normalization": "mean",
  "barcode_num_events": 25
 },
 "derived": {
  "primary_method": "cnn",
  "sig_preload_size": 11500,
  "note": "derived exactly as ADAPTed SigProcConfig.__post_init__ does"
 },
 "provenance": {
  "warpdemux_toml": "warpdemux/config/config_files/rna004_130bps@v1.0.toml @ bc81c0b8d40dda4a0271eabcbc9095ce1d5c83ee",
  "adapted_toml": "adapted/config/config_files/rna004_130bps@v0.2.4.toml @ dev (7f9e4bbe7bec8ac77d28c5db9bb01ae8bbed2812)",
  "adapted_pinned_submodule": "158544840a520fabad29bcf0c8469ecc678b4c11",
  "merge_rule": "dataclass defaults <- ADAPTed TOML <- WarpDemuX TOML, key by key within each section",
  "ranges": "[lo, hi]; null = unbounded (TOML inf / Python None)"
 }
})SP";

inline constexpr const char* kRna004SignalProcessingConfigName = "rna004_130bps@v1.0";
inline constexpr const char* kRna004Chemistry = "RNA004";

}  // namespace escpod::demux::detail
