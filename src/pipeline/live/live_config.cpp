// Reads WarpDemuX's live-balancing TOML config natively (docs/live_config.md §2-§4). Every key is
// read through a SectionReader, which knows the file, the section and where each value sits, so
// every error names all three; keys no reader asked for are errors (typos are caught, §2.2).
#include "escpod/pipeline/live/balancing.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <iterator>
#include <utility>

#include "escpod/core/text.hpp"
#include "pipeline/live/channel_plan.hpp"

namespace escpod::pipeline::live {
namespace {

namespace fs = std::filesystem;

constexpr double kNoLimit = std::numeric_limits<double>::infinity();
constexpr double kFinite = std::numeric_limits<double>::max();  // upper bound meaning "finite"
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

std::string_view kind_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

std::string location(const std::string& file, const toml::source_region& region) {
  if (region.begin.line == 0) return file;
  return fmt::format("{}:{}:{}", file, region.begin.line, region.begin.column);
}

using KeySet = std::set<std::string, std::less<>>;

// Where a key lives when it is written in the wrong section: the hint for an unknown key.
std::string_view home_of(std::string_view key) {
  static const std::array<std::pair<std::string_view, std::string_view>, 14> kHomes{{
      {"model_name", "[model]"}, {"flowcell_type", "[flowcell]"}, {"min_channel", "[flowcell]"},
      {"max_channel", "[flowcell]"}, {"nproc_segmentation", "[processing]"},
      {"nproc_classification", "[processing]"}, {"max_missed_start_offset", "[acquisition]"},
      {"max_chunk_size", "[acquisition]"}, {"min_chunk_size", "[acquisition]"},
      {"min_adapter_length", "[acquisition]"}, {"max_signal_after_polya", "[balancing]"},
      {"save_path", "[reporting]"}, {"save_every_sec", "[reporting]"}, {"balance_type", "[[balancers]]"},
  }};
  for (const auto& [name, home] : kHomes) {
    if (name == key) return home;
  }
  if (key.starts_with("repeated_unblock_")) return "[acquisition]";
  return {};
}

// " (did you mean 'x'?)" for a key within two edits of a known one, or where the key belongs.
std::string unknown_key_hint(std::string_view key, const KeySet& known) {
  std::string_view best;
  size_t best_distance = 3;
  for (const std::string& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  if (!best.empty()) return fmt::format(" (did you mean '{}'?)", best);
  std::string_view home = home_of(key);
  return home.empty() ? std::string() : fmt::format(" (it belongs in {})", home);
}

std::string range_rule(double lo, double hi, bool lo_open) {
  std::string low = fmt::format("{} {:g}", lo_open ? ">" : ">=", lo);
  if (hi == kNoLimit) return low;
  if (hi == kFinite) return "a finite number " + low;
  return fmt::format("{} and <= {:g}", low, hi);
}

// Reads one table's keys, checking type and range, and remembering which keys were asked for so
// that finish() can reject the rest. Each getter leaves `out` unchanged when the key is absent.
class SectionReader {
 public:
  SectionReader(const toml::table* table, const std::string& file, std::string section)
      : m_table(table), m_file(file), m_section(std::move(section)) {}

  bool has(std::string_view key) const { return m_table != nullptr && m_table->contains(key); }
  void accept(std::string_view key) { m_known.emplace(key); }

  Status error(std::string_view key, std::string_view problem) const {
    return Status::invalid_argument(fmt::format("{}: {} {}: {}", where(key), m_section, key, problem));
  }
  Status section_error(std::string_view problem) const {
    toml::source_region region = m_table != nullptr ? m_table->source() : toml::source_region{};
    return Status::invalid_argument(fmt::format("{}: {}: {}", location(m_file, region), m_section, problem));
  }
  std::string warning(std::string_view key, std::string_view text) const {
    return fmt::format("{}: {} {}: {}", where(key), m_section, key, text);
  }

  Status number(std::string_view key, double& out, double lo, double hi, bool lo_open = false) {
    const toml::node* n = find(key);
    if (n == nullptr) return Status::ok();
    if (const auto* i = n->as_integer()) {
      out = static_cast<double>(i->get());
    } else if (const auto* f = n->as_floating_point()) {
      out = f->get();
    } else {
      return wrong_type(key, *n, "a number");
    }
    bool ok = (lo_open ? out > lo : out >= lo) && out <= hi;
    if (ok) return Status::ok();
    return error(key, fmt::format("must be {}, got {:g}", range_rule(lo, hi, lo_open), out));
  }
  Status number(std::string_view key, std::optional<double>& out, double lo, double hi, bool lo_open = false) {
    if (!has(key)) {
      accept(key);
      return Status::ok();
    }
    double value = 0;
    ESCPOD_RETURN_IF_ERROR(number(key, value, lo, hi, lo_open));
    out = value;
    return Status::ok();
  }

  template <typename Int>
  Status integer(std::string_view key, Int& out, int64_t lo, int64_t hi) {
    const toml::node* n = find(key);
    if (n == nullptr) return Status::ok();
    const auto* i = n->as_integer();
    if (i == nullptr) return wrong_type(key, *n, "an integer");
    int64_t v = i->get();
    if (v < lo || v > hi) {
      std::string rule = hi == kMaxInt64 || hi == kMaxInt ? fmt::format(">= {}", lo) : fmt::format(">= {} and <= {}", lo, hi);
      return error(key, fmt::format("must be {}, got {}", rule, v));
    }
    out = static_cast<Int>(v);
    return Status::ok();
  }

  Status boolean(std::string_view key, bool& out) {
    const toml::node* n = find(key);
    if (n == nullptr) return Status::ok();
    const auto* b = n->as_boolean();
    if (b == nullptr) return wrong_type(key, *n, "true or false");
    out = b->get();
    return Status::ok();
  }

  Status text(std::string_view key, std::string& out) {
    const toml::node* n = find(key);
    if (n == nullptr) return Status::ok();
    const auto* s = n->as_string();
    if (s == nullptr) return wrong_type(key, *n, "a string");
    if (s->get().empty()) return error(key, "must not be empty");
    out = s->get();
    return Status::ok();
  }

  // Fails on the first key (in key order) that no getter asked for and accept() did not take.
  Status finish() const {
    if (m_table == nullptr) return Status::ok();
    for (auto&& [key, node] : *m_table) {
      if (m_known.find(key.str()) != m_known.end()) continue;
      return Status::invalid_argument(fmt::format("{}: {} {}: unknown key{}", location(m_file, key.source()),
                                                  m_section, key.str(), unknown_key_hint(key.str(), m_known)));
    }
    return Status::ok();
  }

 private:
  const toml::node* find(std::string_view key) {
    m_known.emplace(key);
    return m_table != nullptr ? m_table->get(key) : nullptr;
  }
  std::string where(std::string_view key) const {
    const toml::node* n = m_table != nullptr ? m_table->get(key) : nullptr;
    if (n != nullptr) return location(m_file, n->source());
    return location(m_file, m_table != nullptr ? m_table->source() : toml::source_region{});
  }
  Status wrong_type(std::string_view key, const toml::node& n, std::string_view expected) const {
    return error(key, fmt::format("expected {}, got {}", expected, kind_name(n)));
  }

  const toml::table* m_table;
  const std::string& m_file;
  std::string m_section;
  KeySet m_known;
};

Result<toml::table> parse_toml(std::string_view text, const std::string& where) {
  try {
    return toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    return Status::corrupt(fmt::format("{}: not valid TOML: {}", location(where, e.source()), e.description()));
  }
}

constexpr std::array<std::string_view, 6> kTableSections{"model",     "flowcell",  "processing",
                                                         "acquisition", "balancing", "reporting"};

// Every top-level key is a known section of the right shape.
Status check_sections(const toml::table& root, const std::string& file) {
  KeySet known(kTableSections.begin(), kTableSections.end());
  known.emplace("balancers");
  for (auto&& [key, node] : root) {
    std::string where = location(file, key.source());
    if (key.str() == "balancers") {
      if (node.is_array_of_tables() || (node.is_array() && node.as_array()->empty())) continue;
      return Status::invalid_argument(fmt::format("{}: balancers: expected [[balancers]] entries (an array of tables), got {}",
                                                  where, kind_name(node)));
    }
    if (known.find(key.str()) == known.end()) {
      return Status::invalid_argument(fmt::format("{}: [{}]: unknown section{}", where, key.str(),
                                                  unknown_key_hint(key.str(), known)));
    }
    if (!node.is_table()) {
      return Status::invalid_argument(fmt::format("{}: {}: expected a [{}] table, got {}", where, key.str(), key.str(),
                                                  kind_name(node)));
    }
  }
  return Status::ok();
}

Status read_model(const toml::table* t, const std::string& file, LiveConfig& c) {
  SectionReader r(t, file, "[model]");
  ESCPOD_RETURN_IF_ERROR(r.text("model_name", c.model_name));
  // WarpDemuX derives num_bcs from the model; written here it must agree (§2.5).
  size_t num_bcs = c.num_barcodes;
  ESCPOD_RETURN_IF_ERROR(r.integer("num_bcs", num_bcs, 1, kMaxInt));
  if (num_bcs != c.num_barcodes) {
    return r.error("num_bcs", fmt::format("is {}, but the classifier has {} barcodes", num_bcs, c.num_barcodes));
  }
  return r.finish();
}

int flowcell_channel_count(std::string_view type) {
  if (type == "flongle") return 126;
  if (type == "minion") return 512;
  if (type == "promethion") return 2675;
  return 0;
}

Status read_flowcell(const toml::table* t, const std::string& file, LiveConfig& c) {
  if (t == nullptr) {
    return Status::invalid_argument(fmt::format("{}: [flowcell]: section missing; it must name flowcell_type "
                                                "(flongle, minion or promethion)", file));
  }
  SectionReader r(t, file, "[flowcell]");
  if (!r.has("flowcell_type")) return r.section_error("flowcell_type is required (flongle, minion or promethion)");
  ESCPOD_RETURN_IF_ERROR(r.text("flowcell_type", c.flowcell_type));
  c.flowcell_channels = flowcell_channel_count(c.flowcell_type);
  if (c.flowcell_channels == 0) {
    return r.error("flowcell_type", fmt::format("unknown flowcell type '{}' (flongle, minion or promethion)", c.flowcell_type));
  }
  int channel_num = c.flowcell_channels;  // derived from the type; written here it must agree (§2.5)
  ESCPOD_RETURN_IF_ERROR(r.integer("channel_num", channel_num, 1, kMaxInt));
  if (channel_num != c.flowcell_channels) {
    return r.error("channel_num", fmt::format("is {}, but a {} flowcell has {} channels", channel_num, c.flowcell_type,
                                              c.flowcell_channels));
  }
  c.max_channel = c.flowcell_channels;
  ESCPOD_RETURN_IF_ERROR(r.integer("min_channel", c.min_channel, 1, c.flowcell_channels));
  ESCPOD_RETURN_IF_ERROR(r.integer("max_channel", c.max_channel, 1, c.flowcell_channels));
  if (c.min_channel > c.max_channel) {
    return r.error("max_channel", fmt::format("{} is below min_channel {}", c.max_channel, c.min_channel));
  }
  return r.finish();
}

Status read_processing(const toml::table* t, const std::string& file, LiveConfig& c) {
  SectionReader r(t, file, "[processing]");
  ESCPOD_RETURN_IF_ERROR(r.integer("nproc_segmentation", c.nproc_segmentation, 1, kMaxInt));
  ESCPOD_RETURN_IF_ERROR(r.integer("nproc_classification", c.nproc_classification, 1, kMaxInt));
  return r.finish();
}

Status read_acquisition(const toml::table* t, const std::string& file, LiveConfig& c) {
  SectionReader r(t, file, "[acquisition]");
  ESCPOD_RETURN_IF_ERROR(r.integer("max_missed_start_offset", c.max_missed_start_offset, 0, kMaxInt64));
  ESCPOD_RETURN_IF_ERROR(r.integer("max_chunk_size", c.max_chunk_size, 1, kMaxInt64));
  ESCPOD_RETURN_IF_ERROR(r.integer("min_chunk_size", c.min_chunk_size, 1, kMaxInt64));
  if (c.min_chunk_size > c.max_chunk_size) {
    return r.error("min_chunk_size", fmt::format("{} is above max_chunk_size {}", c.min_chunk_size, c.max_chunk_size));
  }
  c.min_adapter_length = c.min_chunk_size;
  ESCPOD_RETURN_IF_ERROR(r.integer("min_adapter_length", c.min_adapter_length, 1, kMaxInt64));
  ESCPOD_RETURN_IF_ERROR(r.number("repeated_unblock_time_window", c.repeated_unblock_time_window, 0, kFinite));
  ESCPOD_RETURN_IF_ERROR(r.number("repeated_unblock_duration_2", c.repeated_unblock_duration_2, 0, kFinite, true));
  ESCPOD_RETURN_IF_ERROR(r.number("repeated_unblock_duration_3", c.repeated_unblock_duration_3, 0, kFinite, true));
  return r.finish();
}

Status read_balancing(const toml::table* t, const std::string& file, LiveConfig& c) {
  SectionReader r(t, file, "[balancing]");
  ESCPOD_RETURN_IF_ERROR(r.number("pred_conf_threshold", c.pred_conf_threshold, 0, 1));
  ESCPOD_RETURN_IF_ERROR(r.number("reject_duration", c.reject_duration, 0, kFinite, true));
  ESCPOD_RETURN_IF_ERROR(r.integer("max_signal_after_polya", c.max_signal_after_polya, 0, kMaxInt64));
  return r.finish();
}

Status read_reporting(const toml::table* t, const std::string& file, LiveConfig& c) {
  SectionReader r(t, file, "[reporting]");
  ESCPOD_RETURN_IF_ERROR(r.text("save_path", c.save_path));
  ESCPOD_RETURN_IF_ERROR(r.number("save_every_sec", c.save_every_sec, 0, kFinite, true));
  return r.finish();
}

// ---- [[balancers]] ----

Status read_balancer_kind(SectionReader& r, BalancerConfig& b) {
  std::string type_text(balance_type_name(b.type));
  ESCPOD_RETURN_IF_ERROR(r.text("balance_type", type_text));
  std::optional<BalanceType> type = parse_balance_type(type_text);
  if (!type) {
    const char* why = type_text == "block_safety" ? " (WarpDemuX does not implement it either)" : "";
    return r.error("balance_type", fmt::format("unknown balance type '{}'{}: one of none, reject_all, adapter_count, "
                                               "read_count, base_normalization", type_text, why));
  }
  b.type = *type;
  b.name = type_text;
  return r.text("name", b.name);
}

Status read_balancer_numbers(SectionReader& r, BalancerConfig& b) {
  ESCPOD_RETURN_IF_ERROR(r.number("balance_threshold", b.balance_threshold, 0, kFinite));
  ESCPOD_RETURN_IF_ERROR(r.number("min_stat", b.min_stat, 0, kNoLimit));
  ESCPOD_RETURN_IF_ERROR(r.number("reject_duration", b.reject_duration, 0, kFinite, true));
  ESCPOD_RETURN_IF_ERROR(r.boolean("watch_for_missing", b.watch_for_missing));
  ESCPOD_RETURN_IF_ERROR(r.number("wait_to_see", b.wait_to_see, 0, kFinite));
  std::string watch_dir;
  ESCPOD_RETURN_IF_ERROR(r.text("pod5_watch_dir", watch_dir));
  if (!watch_dir.empty()) b.pod5_watch_dir = watch_dir;
  ESCPOD_RETURN_IF_ERROR(r.number("pod5_check_interval", b.pod5_check_interval, 0, kFinite, true));
  double unused_threshold = 0;  // read for its type and range only (§3.5)
  return r.number("pred_conf_threshold", unused_threshold, 0, 1);
}

Status read_balancer_channels(SectionReader& r, BalancerConfig& b) {
  ESCPOD_RETURN_IF_ERROR(r.number("channel_frac", b.channel_frac, 0, 1));
  std::optional<int> channel_num;
  if (r.has("channel_num")) {
    int value = 0;
    ESCPOD_RETURN_IF_ERROR(r.integer("channel_num", value, 0, kMaxInt));
    channel_num = value;
  } else {
    r.accept("channel_num");
  }
  if (channel_num && b.channel_frac) return r.error("channel_num", "give channel_frac or channel_num, not both");
  b.channel_num = channel_num;
  if (!b.channel_num && !b.channel_frac) b.channel_frac = defaults::kChannelFrac;
  return Status::ok();
}

enum class BarcodeKeyKind { kWatch, kBlacklist, kMax };
constexpr std::array<std::pair<std::string_view, BarcodeKeyKind>, 3> kBarcodeKeys{{
    {"watch_barcode", BarcodeKeyKind::kWatch},
    {"blacklist_barcode", BarcodeKeyKind::kBlacklist},
    {"max_barcode", BarcodeKeyKind::kMax},
}};

// The prefix and kind of a per-barcode key, if `key` is one.
std::optional<std::pair<std::string_view, BarcodeKeyKind>> barcode_key_kind(std::string_view key) {
  for (const auto& entry : kBarcodeKeys) {
    if (key.starts_with(entry.first)) return entry;
  }
  return std::nullopt;
}

// The barcode index of e.g. "max_barcode03": two digits (WarpDemuX's {:02d}), below num_barcodes.
Result<size_t> barcode_index(const SectionReader& r, std::string_view key, std::string_view prefix, size_t num_barcodes) {
  std::string_view digits = key.substr(prefix.size());
  size_t index = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || digits.size() > 6) {
    return r.error(key, fmt::format("expected a two-digit barcode index after '{}' (e.g. {}03)", prefix, prefix));
  }
  std::string canonical = fmt::format("{:02d}", index);
  if (digits != canonical) {
    return r.error(key, fmt::format("write the barcode index as WarpDemuX does: {}{}", prefix, canonical));
  }
  if (index >= num_barcodes) {
    return r.error(key, fmt::format("barcode index {} is out of range: the classifier has {} barcodes, indices "
                                    "00..{:02d} (0-based)", canonical, num_barcodes, num_barcodes - 1));
  }
  return index;
}

Status read_barcode_key(SectionReader& r, std::string_view key, size_t num_barcodes, BalancerConfig& b) {
  auto kind = barcode_key_kind(key);
  if (!kind) return Status::ok();  // not a per-barcode key: finish() judges it
  ESCPOD_ASSIGN_OR_RETURN(size_t index, barcode_index(r, key, kind->first, num_barcodes));
  if (kind->second == BarcodeKeyKind::kWatch) {
    bool watch = true;
    ESCPOD_RETURN_IF_ERROR(r.boolean(key, watch));
    b.ignorelist[index] = !watch;
  } else if (kind->second == BarcodeKeyKind::kBlacklist) {
    bool black = false;
    ESCPOD_RETURN_IF_ERROR(r.boolean(key, black));
    b.blacklist[index] = black;
  } else {
    ESCPOD_RETURN_IF_ERROR(r.number(key, b.max_stats[index], 0, kNoLimit));
  }
  return Status::ok();
}

Status read_barcode_keys(SectionReader& r, const toml::table& t, size_t num_barcodes, BalancerConfig& b) {
  b.blacklist.assign(num_barcodes, false);
  b.ignorelist.assign(num_barcodes, false);
  b.max_stats.assign(num_barcodes, kNoLimit);
  for (auto&& [key, node] : t) ESCPOD_RETURN_IF_ERROR(read_barcode_key(r, key.str(), num_barcodes, b));
  for (size_t i = 0; i < num_barcodes; ++i) {
    if (b.blacklist[i] && b.ignorelist[i]) {
      return r.error(fmt::format("blacklist_barcode{:02d}", i),
                     fmt::format("barcode {:02d} is both blacklisted and not watched (watch_barcode{:02d} = false)", i, i));
    }
  }
  return Status::ok();
}

// Per-barcode keys that the balancer's type ignores (WarpDemuX README notes, §3).
bool barcode_key_ignored(BalanceType type, BarcodeKeyKind kind) {
  if (type == BalanceType::kNone) return kind != BarcodeKeyKind::kBlacklist;
  if (type == BalanceType::kRejectAll) return kind != BarcodeKeyKind::kWatch;
  return false;
}

void add_balancer_warnings(const SectionReader& r, const toml::table& t, const BalancerConfig& b,
                           std::vector<std::string>& out) {
  std::string no_effect = fmt::format("has no effect for balance_type {}", balance_type_name(b.type));
  auto warn_if_set = [&](std::string_view key) {
    if (r.has(key)) out.push_back(r.warning(key, no_effect));
  };
  if (r.has("pred_conf_threshold")) {
    out.push_back(r.warning("pred_conf_threshold", "not used: [balancing] pred_conf_threshold applies to every channel"));
  }
  bool watcher = b.type == BalanceType::kReadCount || b.type == BalanceType::kBaseNormalization;
  if (!watcher) {
    warn_if_set("pod5_watch_dir");
    warn_if_set("pod5_check_interval");
  }
  if (b.type == BalanceType::kNone || b.type == BalanceType::kRejectAll) {
    if (b.watch_for_missing && r.has("watch_for_missing")) warn_if_set("watch_for_missing");
    warn_if_set("wait_to_see");
  }
  for (auto&& [key, node] : t) {
    auto kind = barcode_key_kind(key.str());
    if (kind && barcode_key_ignored(b.type, kind->second)) out.push_back(r.warning(key.str(), no_effect));
  }
}

Result<BalancerConfig> read_balancer(const toml::table& t, size_t index, const std::string& file, size_t num_barcodes,
                                     std::vector<std::string>& warnings) {
  SectionReader r(&t, file, fmt::format("[[balancers]] #{}", index + 1));
  BalancerConfig b;
  ESCPOD_RETURN_IF_ERROR(read_balancer_kind(r, b));
  ESCPOD_RETURN_IF_ERROR(read_balancer_numbers(r, b));
  ESCPOD_RETURN_IF_ERROR(read_balancer_channels(r, b));
  ESCPOD_RETURN_IF_ERROR(read_barcode_keys(r, t, num_barcodes, b));
  ESCPOD_RETURN_IF_ERROR(r.finish());
  add_balancer_warnings(r, t, b, warnings);
  return b;
}

Status read_balancers(const toml::table& root, const std::string& file, LiveConfig& c) {
  const toml::array* list = root.get_as<toml::array>("balancers");
  if (list == nullptr || list->empty()) {
    return Status::invalid_argument(fmt::format("{}: [[balancers]]: no balancer configured; a live config needs at least "
                                                "one [[balancers]] entry (e.g. balance_type = \"adapter_count\")", file));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    ESCPOD_ASSIGN_OR_RETURN(BalancerConfig b, read_balancer(*(*list)[i].as_table(), i, file, c.num_barcodes, c.warnings));
    c.balancers.push_back(std::move(b));
  }
  return Status::ok();
}

}  // namespace

std::string_view balance_type_name(BalanceType type) {
  switch (type) {
    case BalanceType::kNone: return "none";
    case BalanceType::kRejectAll: return "reject_all";
    case BalanceType::kAdapterCount: return "adapter_count";
    case BalanceType::kReadCount: return "read_count";
    case BalanceType::kBaseNormalization: return "base_normalization";
  }
  return "?";
}

std::optional<BalanceType> parse_balance_type(std::string_view text) {
  for (BalanceType t : {BalanceType::kNone, BalanceType::kRejectAll, BalanceType::kAdapterCount, BalanceType::kReadCount,
                        BalanceType::kBaseNormalization}) {
    if (balance_type_name(t) == text) return t;
  }
  return std::nullopt;
}

std::vector<int> LiveConfig::channels() const {
  std::vector<int> out;
  for (int ch = min_channel; ch <= max_channel; ++ch) out.push_back(ch);
  return out;
}

Result<LiveConfig> parse_live_config(std::string_view toml_text, const std::string& where, size_t num_barcodes) {
  if (num_barcodes == 0) {
    return Status::invalid_argument(fmt::format("{}: the classifier's barcode count is 0", where));
  }
  ESCPOD_ASSIGN_OR_RETURN(toml::table root, parse_toml(toml_text, where));
  ESCPOD_RETURN_IF_ERROR(check_sections(root, where));
  LiveConfig c;
  c.source = where;
  c.num_barcodes = num_barcodes;
  ESCPOD_RETURN_IF_ERROR(read_model(root.get_as<toml::table>("model"), where, c));
  ESCPOD_RETURN_IF_ERROR(read_flowcell(root.get_as<toml::table>("flowcell"), where, c));
  ESCPOD_RETURN_IF_ERROR(read_processing(root.get_as<toml::table>("processing"), where, c));
  ESCPOD_RETURN_IF_ERROR(read_acquisition(root.get_as<toml::table>("acquisition"), where, c));
  ESCPOD_RETURN_IF_ERROR(read_balancing(root.get_as<toml::table>("balancing"), where, c));
  ESCPOD_RETURN_IF_ERROR(read_reporting(root.get_as<toml::table>("reporting"), where, c));
  ESCPOD_RETURN_IF_ERROR(read_balancers(root, where, c));
  ESCPOD_RETURN_IF_ERROR(detail::plan_channels(c.balancers, c.channels().size(), where));
  ESCPOD_RETURN_IF_ERROR(detail::check_balancer_names(c.balancers, where));
  return c;
}

Result<LiveConfig> read_live_config(const std::filesystem::path& toml_file, size_t num_barcodes) {
  std::error_code ec;
  if (!fs::is_regular_file(toml_file, ec)) {
    return Status::not_found(fmt::format("{}: no such live config file", toml_file.string()));
  }
  std::ifstream in(toml_file, std::ios::binary);
  std::string text;
  if (in) text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    return Status::io_error(fmt::format("{}: cannot read the live config file", toml_file.string()));
  }
  return parse_live_config(text, toml_file.string(), num_barcodes);
}

}  // namespace escpod::pipeline::live
