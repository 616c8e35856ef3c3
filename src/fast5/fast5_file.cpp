#include "escpod/fast5/fast5_file.hpp"

#include <hdf5.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

// The Debian HDF5 VBZ filter plugin (libvbz-hdf-plugin-dev): HDF5's plugin entry point.
extern "C" const void* H5PLget_plugin_info(void);

namespace escpod::fast5 {
namespace {

constexpr H5Z_filter_t kVbzFilterId = 32020;

const H5Z_class2_t* vbz_filter_class() {
  static const H5Z_class2_t* cls = static_cast<const H5Z_class2_t*>(H5PLget_plugin_info());
  return cls;
}

// Once per process: HDF5 prints nothing (errors come back as values) and knows the VBZ filter
// for the layouts HDF5 decodes itself.
void init_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    if (H5Zfilter_avail(kVbzFilterId) <= 0) (void)H5Zregister(vbz_filter_class());
  });
}

// Owns one HDF5 identifier.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : m_id(id), m_close(close) {}
  Hid(Hid&& o) noexcept : m_id(o.m_id), m_close(o.m_close) { o.m_id = -1; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      m_id = o.m_id;
      m_close = o.m_close;
      o.m_id = -1;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }
  void reset() {
    if (m_id >= 0 && m_close) m_close(m_id);
    m_id = -1;
  }
  hid_t get() const { return m_id; }
  bool valid() const { return m_id >= 0; }

 private:
  hid_t m_id = -1;
  herr_t (*m_close)(hid_t) = nullptr;
};

Hid open_group(hid_t loc, const std::string& name) {
  if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) return {};
  return Hid(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose);
}

// An attribute's value, whatever its stored type.
struct AttrValue {
  enum class Kind { kInt, kUInt, kFloat, kString } kind = Kind::kString;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string s;

  std::optional<double> as_double() const {
    switch (kind) {
      case Kind::kInt: return static_cast<double>(i);
      case Kind::kUInt: return static_cast<double>(u);
      case Kind::kFloat: return d;
      case Kind::kString: {
        char* end = nullptr;
        double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return std::nullopt;
        return v;
      }
    }
    return std::nullopt;
  }
  // Integral value (floats must be whole; strings must parse as integers).
  std::optional<int64_t> as_int() const {
    switch (kind) {
      case Kind::kInt: return i;
      case Kind::kUInt:
        if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<int64_t>(u);
      case Kind::kFloat:
        if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return std::nullopt;
        return static_cast<int64_t>(d);
      case Kind::kString: {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
        return v;
      }
    }
    return std::nullopt;
  }
  std::string as_string() const {
    switch (kind) {
      case Kind::kInt: return std::to_string(i);
      case Kind::kUInt: return std::to_string(u);
      case Kind::kFloat: {
        char buf[64];
        auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);
        return ec == std::errc() ? std::string(buf, p) : std::string();
      }
      case Kind::kString: return s;
    }
    return {};
  }
};

// Reads attribute `attr` (already open). False when its type or shape is unusable.
bool read_attr(hid_t attr, AttrValue& out) {
  Hid space(H5Aget_space(attr), H5Sclose);
  if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) return false;
  Hid type(H5Aget_type(attr), H5Tclose);
  if (!type.valid()) return false;
  H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_ENUM) {
    // Enumerations (newer FAST5 end_reason) are read as their integer base type.
    type = Hid(H5Tget_super(type.get()), H5Tclose);
    if (!type.valid()) return false;
    cls = H5Tget_class(type.get());
  }
  if (cls == H5T_INTEGER) {
    if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
      out.kind = AttrValue::Kind::kUInt;
      unsigned long long v = 0;
      if (H5Aread(attr, H5T_NATIVE_ULLONG, &v) < 0) return false;
      out.u = v;
    } else {
      out.kind = AttrValue::Kind::kInt;
      long long v = 0;
      if (H5Aread(attr, H5T_NATIVE_LLONG, &v) < 0) return false;
      out.i = v;
    }
    return true;
  }
  if (cls == H5T_FLOAT) {
    out.kind = AttrValue::Kind::kFloat;
    return H5Aread(attr, H5T_NATIVE_DOUBLE, &out.d) >= 0;
  }
  if (cls != H5T_STRING) return false;
  out.kind = AttrValue::Kind::kString;
  Hid mem(H5Tcopy(type.get()), H5Tclose);
  if (!mem.valid()) return false;
  if (H5Tis_variable_str(type.get()) > 0) {
    char* p = nullptr;
    if (H5Aread(attr, mem.get(), &p) < 0) return false;
    out.s = p ? p : "";
    if (p) H5free_memory(p);
    return true;
  }
  const size_t n = H5Tget_size(type.get());
  if (n == 0 || n > (1u << 24)) return false;
  out.s.assign(n, '\0');
  if (H5Aread(attr, mem.get(), out.s.data()) < 0) return false;
  // Fixed-length strings are NUL-padded (numpy's bytes drop the padding the same way).
  out.s.resize(std::strlen(out.s.c_str()));
  return true;
}

std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (n == 0 && err->desc) *s = err->desc;
        return 0;
      },
      &text);
  return text;
}

// ISO 8601: YYYY-MM-DD[(T| )hh:mm[:ss[.frac]]][Z|(+|-)hh[:]mm]. Days from civil date (Hinnant).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

}  // namespace

int64_t parse_iso8601_ms(std::string_view t) {
  size_t pos = 0;
  auto digits = [&](size_t n, int& v) {
    if (pos + n > t.size()) return false;
    v = 0;
    for (size_t k = 0; k < n; ++k) {
      char c = t[pos + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    pos += n;
    return true;
  };
  auto lit = [&](char c) {
    if (pos < t.size() && t[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  };
  int year = 0, month = 1, day = 1, hour = 0, minute = 0, second = 0;
  int64_t micros = 0;
  if (!digits(4, year)) return 0;
  if (lit('-')) {
    if (!digits(2, month)) return 0;
    if (lit('-') && !digits(2, day)) return 0;
  }
  if (pos < t.size() && (t[pos] == 'T' || t[pos] == ' ')) {
    ++pos;
    if (!digits(2, hour)) return 0;
    if (lit(':') && !digits(2, minute)) return 0;
    if (lit(':') && !digits(2, second)) return 0;
    if (pos < t.size() && (t[pos] == '.' || t[pos] == ',')) {
      ++pos;
      int64_t scale = 100000;
      bool any = false;
      while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9') {
        micros += (t[pos] - '0') * scale;
        scale /= 10;
        ++pos;
        any = true;
      }
      if (!any) return 0;
    }
  }
  int64_t tz_minutes = 0;
  if (pos < t.size()) {
    if (t[pos] == 'Z') {
      ++pos;
    } else if (t[pos] == '+' || t[pos] == '-') {
      const int sign = t[pos] == '-' ? -1 : 1;
      ++pos;
      int th = 0, tm = 0;
      if (!digits(2, th)) return 0;
      if (pos < t.size()) {
        lit(':');
        if (!digits(2, tm)) return 0;
      }
      tz_minutes = sign * (th * 60 + tm);
    }
  }
  if (pos != t.size() || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
      minute > 59 || second > 60) {
    return 0;
  }
  const int64_t days = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const int64_t secs = days * 86400 + hour * 3600 + minute * 60 + second - tz_minutes * 60;
  return secs * 1000 + micros / 1000;
}

namespace {

// Paths of the groups holding a read's metadata.
struct ReadPaths {
  std::string raw, channel, context, tracking;
  std::string read_group;  // empty for single-read files
};

}  // namespace

struct Fast5File::Impl {
  std::filesystem::path path;
  std::string name;  // path as text, for messages
  Hid file;
  bool multi_read = true;
  std::vector<std::string> groups;  // read groups (absolute paths)
  std::map<std::string, std::shared_ptr<const pod5::RunInfo>> run_infos;
  std::vector<uint8_t> chunk_scratch;

  ReadPaths paths_of(size_t i) const {
    if (multi_read) {
      const std::string& g = groups[i];
      return {g + "/Raw", g + "/channel_id", g + "/context_tags", g + "/tracking_id", g};
    }
    return {groups[i], "/UniqueGlobalKey/channel_id", "/UniqueGlobalKey/context_tags",
            "/UniqueGlobalKey/tracking_id", ""};
  }
};

Fast5File::Fast5File(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Fast5File::~Fast5File() = default;
const std::filesystem::path& Fast5File::path() const { return m_impl->path; }
bool Fast5File::is_multi_read() const { return m_impl->multi_read; }
size_t Fast5File::n_reads() const { return m_impl->groups.size(); }
const std::string& Fast5File::read_group(size_t i) const { return m_impl->groups[i]; }

namespace {

herr_t collect_names(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

Status list_links(hid_t group, std::vector<std::string>& names) {
  hsize_t idx = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_names, &names) < 0) {
    return Status::corrupt("cannot list its groups (" + hdf5_error_text() + ")");
  }
  return Status::ok();
}

// Attributes of a group in the order the official reader (h5py) lists them: creation order when
// the group tracks it, else by name.
herr_t collect_attr(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto* out = static_cast<std::vector<std::pair<std::string, std::string>>*>(data);
  Hid a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  AttrValue v;
  if (!a.valid() || !read_attr(a.get(), v)) return -1;
  out->emplace_back(name, v.as_string());
  return 0;
}

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Reads the attributes of one read. Errors are kCorrupt, prefixed by `who`: the file and the
// read (its group until its id is known).
class ReadAttributes {
 public:
  explicit ReadAttributes(std::string who) : m_who(std::move(who)) {}
  void set_who(std::string who) { m_who = std::move(who); }
  Status fail(const std::string& what) const { return Status::corrupt(m_who + ": " + what); }

  // Attribute `name` of `obj` (named `where` in messages); nullopt when absent.
  Status optional(hid_t obj, const char* name, const std::string& where, std::optional<AttrValue>& v) const {
    v.reset();
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0) return fail("cannot look up attribute " + where + "/" + name);
    if (exists == 0) return Status::ok();
    Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    AttrValue value;
    if (!a.valid() || !read_attr(a.get(), value)) {
      return fail("attribute " + where + "/" + name + " cannot be read or has an unusable type");
    }
    v = std::move(value);
    return Status::ok();
  }
  Status required(hid_t obj, const char* name, const std::string& where, AttrValue& v) const {
    std::optional<AttrValue> o;
    ESCPOD_RETURN_IF_ERROR(optional(obj, name, where, o));
    if (!o) return fail("missing attribute " + where + "/" + name);
    v = std::move(*o);
    return Status::ok();
  }
  Result<int64_t> integer(const AttrValue& v, const std::string& where, int64_t lo, int64_t hi) const {
    auto i = v.as_int();
    if (!i || *i < lo || *i > hi) {
      return fail("attribute " + where + " = '" + v.as_string() + "' is not an integer in [" +
                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return *i;
  }
  Result<double> number(const AttrValue& v, const std::string& where) const {
    auto d = v.as_double();
    if (!d) return fail("attribute " + where + " = '" + v.as_string() + "' is not a number");
    return *d;
  }
  // Every attribute of group `g` (named `where` in messages) as text, in h5py's order.
  Status list(hid_t g, const std::string& where, KeyValues& dst) const {
    unsigned crt = 0;
    Hid plist(H5Gget_create_plist(g), H5Pclose);
    if (plist.valid()) (void)H5Pget_attr_creation_order(plist.get(), &crt);
    const H5_index_t index = (crt & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    hsize_t n = 0;
    if (H5Aiterate2(g, index, H5_ITER_INC, &n, collect_attr, &dst) < 0) {
      return fail("attributes of " + where + " cannot be read");
    }
    return Status::ok();
  }

 private:
  std::string m_who;
};

// The Raw group's required fields (`raw`, at `raw_path`): read number, start, median before, well.
Status read_raw_required(const ReadAttributes& a, hid_t raw, const std::string& raw_path, pod5::ReadRecord& r) {
  AttrValue v;
  ESCPOD_RETURN_IF_ERROR(a.required(raw, "read_number", raw_path, v));
  ESCPOD_ASSIGN_OR_RETURN(int64_t read_number, a.integer(v, "Raw/read_number", 0, UINT32_MAX));
  r.read_number = static_cast<uint32_t>(read_number);
  ESCPOD_RETURN_IF_ERROR(a.required(raw, "start_time", raw_path, v));
  ESCPOD_ASSIGN_OR_RETURN(int64_t start, a.integer(v, "Raw/start_time", 0, INT64_MAX));
  r.start_sample = static_cast<uint64_t>(start);
  ESCPOD_RETURN_IF_ERROR(a.required(raw, "median_before", raw_path, v));
  ESCPOD_ASSIGN_OR_RETURN(double median_before, a.number(v, "Raw/median_before"));
  r.median_before = static_cast<float>(median_before);
  ESCPOD_RETURN_IF_ERROR(a.required(raw, "start_mux", raw_path, v));
  ESCPOD_ASSIGN_OR_RETURN(int64_t well, a.integer(v, "Raw/start_mux", 0, 255));
  r.well = static_cast<uint8_t>(well);
  return Status::ok();
}

// The Raw group's optional fields (newer FAST5 only; the record's defaults otherwise), and the
// end reason (FAST5's numbering is POD5's plus one; 0 and 1 are unknown).
Status read_raw_optional(const ReadAttributes& a, hid_t raw, const std::string& raw_path, pod5::ReadRecord& r) {
  std::optional<AttrValue> o;
  ESCPOD_RETURN_IF_ERROR(a.optional(raw, "num_minknow_events", raw_path, o));
  if (o) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t n, a.integer(*o, "Raw/num_minknow_events", 0, INT64_MAX));
    r.num_minknow_events = static_cast<uint64_t>(n);
  }
  struct FloatField {
    const char* name;
    float* dst;
  };
  for (FloatField f : {FloatField{"tracked_scaling_shift", &r.tracked_scaling_shift},
                       FloatField{"tracked_scaling_scale", &r.tracked_scaling_scale},
                       FloatField{"predicted_scaling_shift", &r.predicted_scaling_shift},
                       FloatField{"predicted_scaling_scale", &r.predicted_scaling_scale},
                       FloatField{"time_since_mux_change", &r.time_since_mux_change}}) {
    ESCPOD_RETURN_IF_ERROR(a.optional(raw, f.name, raw_path, o));
    if (o) {
      ESCPOD_ASSIGN_OR_RETURN(double d, a.number(*o, std::string("Raw/") + f.name));
      *f.dst = static_cast<float>(d);
    }
  }
  ESCPOD_RETURN_IF_ERROR(a.optional(raw, "num_reads_since_mux_change", raw_path, o));
  if (o) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t n, a.integer(*o, "Raw/num_reads_since_mux_change", 0, UINT32_MAX));
    r.num_reads_since_mux_change = static_cast<uint32_t>(n);
  }
  ESCPOD_RETURN_IF_ERROR(a.optional(raw, "end_reason", raw_path, o));
  int64_t fast5_end_reason = 0;
  if (o) {
    ESCPOD_ASSIGN_OR_RETURN(fast5_end_reason, a.integer(*o, "Raw/end_reason", 0, INT32_MAX));
  }
  if (fast5_end_reason >= 2) {
    const auto idx = static_cast<size_t>(fast5_end_reason - 1);
    if (idx >= pod5::kEndReasonNames.size()) {
      return a.fail("Raw/end_reason " + std::to_string(fast5_end_reason) + " is no known end reason");
    }
    r.end_reason = std::string(pod5::kEndReasonNames[idx]);
  } else {
    r.end_reason = "unknown";
  }
  r.end_reason_forced = pod5::end_reason_forced_default(r.end_reason);
  return Status::ok();
}

// The channel_id group's fields (`channel`, at `channel_path`): the channel and the calibration.
// Returns the digitisation.
Result<double> read_channel_fields(const ReadAttributes& a, hid_t channel, const std::string& channel_path,
                                   pod5::ReadRecord& r) {
  AttrValue v;
  ESCPOD_RETURN_IF_ERROR(a.required(channel, "channel_number", channel_path, v));
  ESCPOD_ASSIGN_OR_RETURN(int64_t ch, a.integer(v, "channel_id/channel_number", 0, UINT32_MAX));
  r.channel = static_cast<uint32_t>(ch);
  ESCPOD_RETURN_IF_ERROR(a.required(channel, "digitisation", channel_path, v));
  ESCPOD_ASSIGN_OR_RETURN(double digitisation, a.number(v, "channel_id/digitisation"));
  ESCPOD_RETURN_IF_ERROR(a.required(channel, "offset", channel_path, v));
  ESCPOD_ASSIGN_OR_RETURN(double offset, a.number(v, "channel_id/offset"));
  ESCPOD_RETURN_IF_ERROR(a.required(channel, "range", channel_path, v));
  ESCPOD_ASSIGN_OR_RETURN(double range, a.number(v, "channel_id/range"));
  if (!(digitisation > 0)) return a.fail("channel_id/digitisation " + v.as_string() + " is not positive");
  r.calibration_offset = static_cast<float>(offset);
  r.calibration_scale = static_cast<float>(range / digitisation);
  return digitisation;
}

// The run info fields the tracking_id and context_tags attributes (already in `ri`) give, as the
// official converter maps them.
void run_info_from_attributes(pod5::RunInfo& ri, bool minion) {
  auto get = [](const KeyValues& kv, std::string_view key) -> const std::string* {
    for (const auto& [k, val] : kv) {
      if (k == key) return &val;
    }
    return nullptr;
  };
  auto str = [&](const KeyValues& kv, std::string_view key, std::string fallback = {}) {
    const std::string* s = get(kv, key);
    return s ? *s : fallback;
  };
  const auto& t = ri.tracking_id;
  if (const std::string* s = get(t, "exp_start_time")) ri.acquisition_start_time_ms = parse_iso8601_ms(*s);
  if (const std::string* s = get(t, "protocol_start_time")) ri.protocol_start_time_ms = parse_iso8601_ms(*s);
  ri.experiment_name = "";
  ri.flow_cell_id = str(t, "flow_cell_id");
  ri.flow_cell_product_code = str(t, "flow_cell_product_code");
  ri.protocol_name = str(t, "exp_script_name");
  ri.protocol_run_id = str(t, "protocol_run_id");
  ri.sample_id = str(t, "sample_id");
  ri.sequencing_kit = str(ri.context_tags, "sequencing_kit");
  ri.sequencer_position = str(t, "device_id");
  ri.sequencer_position_type = str(t, "device_type", minion ? "minion" : "promethion");
  ri.software = "python-pod5-converter";
  ri.system_name = str(t, "host_product_serial_number");
  ri.system_type = str(t, "host_product_code");
}

// A new run info for acquisition `acquisition`, from the read's channel_id (`channel`),
// tracking_id (`tracking`) and context_tags groups of `file` (at `p`), as the official converter
// makes it (MinION ADC range when the digitisation is 8192).
Result<std::shared_ptr<pod5::RunInfo>> new_run_info(const ReadAttributes& a, hid_t file, const ReadPaths& p,
                                                    const std::string& acquisition, hid_t channel, hid_t tracking,
                                                    double digitisation) {
  auto ri = std::make_shared<pod5::RunInfo>();
  ri->acquisition_id = acquisition;
  const bool minion = digitisation == 8192.0;
  ri->adc_min = minion ? -4096 : 0;
  ri->adc_max = minion ? 4095 : 2047;
  AttrValue v;
  ESCPOD_RETURN_IF_ERROR(a.required(channel, "sampling_rate", p.channel, v));
  ESCPOD_ASSIGN_OR_RETURN(double rate, a.number(v, "channel_id/sampling_rate"));
  if (!(rate >= 0 && rate < 65536)) return a.fail("channel_id/sampling_rate " + v.as_string() + " out of range");
  ri->sample_rate = static_cast<uint16_t>(rate);
  Hid context = open_group(file, p.context);
  if (!context.valid()) return a.fail("missing group " + p.context);
  ESCPOD_RETURN_IF_ERROR(a.list(context.get(), p.context, ri->context_tags));
  ESCPOD_RETURN_IF_ERROR(a.list(tracking, p.tracking, ri->tracking_id));
  run_info_from_attributes(*ri, minion);
  return ri;
}

// Reads the signal's one chunk as stored, when `dset` (at `signal_path`, of n int16 LE samples,
// chunked: its creation properties `dcpl`) is one chunk of at least n samples under at most
// one filter, deflate or VBZ (or none). False when the samples must be read through HDF5.
Result<bool> read_stored_chunk(const ReadAttributes& a, hid_t dset, hid_t dcpl, hsize_t n,
                               const std::string& signal_path, StoredSignal& sig) {
  hsize_t chunk = 0;
  const int nfilters = H5Pget_nfilters(dcpl);
  if (H5Pget_chunk(dcpl, 1, &chunk) != 1 || chunk < n || nfilters > 1) return false;
  SignalCoding coding = SignalCoding::kRaw;
  std::vector<unsigned> params;
  if (nfilters == 1) {
    unsigned flags = 0, cfg = 0;
    size_t n_params = 16;
    params.resize(n_params);
    char name[64];
    const H5Z_filter_t f = H5Pget_filter2(dcpl, 0, &flags, &n_params, params.data(), sizeof name, name, &cfg);
    params.resize(std::min<size_t>(n_params, 16));
    coding = f == H5Z_FILTER_DEFLATE ? SignalCoding::kDeflate
             : f == kVbzFilterId     ? SignalCoding::kVbz
                                     : SignalCoding::kSamples;
  }
  const hsize_t origin = 0;
  hsize_t stored = 0;
  if (coding == SignalCoding::kSamples || H5Dget_chunk_storage_size(dset, &origin, &stored) < 0 || stored == 0 ||
      stored >= (hsize_t{1} << 34)) {
    return false;
  }
  sig.bytes.resize(stored);
  uint32_t mask = 0;
  if (H5Dread_chunk(dset, H5P_DEFAULT, &origin, &mask, sig.bytes.data()) < 0) {
    return a.fail("dataset " + signal_path + ": cannot read its chunk (" + hdf5_error_text() + ")");
  }
  sig.coding = mask == 0 ? coding : SignalCoding::kRaw;
  sig.decoded_bytes = chunk * 2;
  sig.filter_params = std::move(params);
  if (sig.coding == SignalCoding::kRaw && sig.bytes.size() < 2 * n) {
    return a.fail("dataset " + signal_path + ": chunk holds " + std::to_string(sig.bytes.size()) +
                  " bytes, fewer than its " + std::to_string(n) + " samples need");
  }
  return true;
}

// The signal of the read whose Raw group is at `raw_path`: as stored when it is one chunk under
// at most one known filter (read_stored_chunk), else its samples.
Status read_signal(const ReadAttributes& a, hid_t file, const std::string& raw_path, StoredSignal& sig) {
  const std::string signal_path = raw_path + "/Signal";
  if (H5Lexists(file, signal_path.c_str(), H5P_DEFAULT) <= 0) {
    return a.fail("missing dataset " + signal_path);
  }
  Hid dset(H5Dopen2(file, signal_path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) return a.fail("cannot open dataset " + signal_path);
  Hid space(H5Dget_space(dset.get()), H5Sclose);
  Hid dtype(H5Dget_type(dset.get()), H5Tclose);
  if (!space.valid() || !dtype.valid() || H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Tget_class(dtype.get()) != H5T_INTEGER) {
    return a.fail("dataset " + signal_path + " is not a one-dimensional integer array");
  }
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  sig.n_samples = n;
  sig.filter_params.clear();
  sig.samples.clear();
  sig.coding = SignalCoding::kSamples;
  sig.decoded_bytes = 0;
  Hid dcpl(H5Dget_create_plist(dset.get()), H5Pclose);
  const bool int16_le = H5Tget_size(dtype.get()) == 2 && H5Tget_sign(dtype.get()) == H5T_SGN_2 &&
                        H5Tget_order(dtype.get()) == H5T_ORDER_LE;
  if (n > 0 && int16_le && dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    ESCPOD_ASSIGN_OR_RETURN(const bool as_stored, read_stored_chunk(a, dset.get(), dcpl.get(), n, signal_path, sig));
    if (as_stored) return Status::ok();
  }
  sig.coding = SignalCoding::kSamples;
  sig.samples.resize(n);
  if (n > 0 && H5Dread(dset.get(), H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, sig.samples.data()) < 0) {
    return a.fail("dataset " + signal_path + " cannot be read (" + hdf5_error_text() + ")");
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Fast5File>> Fast5File::open(const std::filesystem::path& path) {
  init_hdf5();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->name = path.string();
  if (!std::filesystem::is_regular_file(path)) {
    return Status::not_found(impl->name + ": no such file");
  }
  if (H5Fis_hdf5(impl->name.c_str()) <= 0) {
    return Status::corrupt(impl->name + ": not a readable HDF5 (FAST5) file (" +
                           hdf5_error_text() + ")");
  }
  impl->file = Hid(H5Fopen(impl->name.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!impl->file.valid()) {
    return Status::corrupt(impl->name + ": cannot open as HDF5, truncated or damaged (" + hdf5_error_text() + ")");
  }
  std::vector<std::string> top;
  Hid root = open_group(impl->file.get(), "/");
  if (!root.valid()) return Status::corrupt(impl->name + ": cannot open the root group");
  if (Status s = list_links(root.get(), top); !s.is_ok()) {
    return Status::corrupt(impl->name + ": " + s.message());
  }
  for (const auto& n : top) {
    if (n.rfind("read_", 0) == 0) impl->groups.push_back("/" + n);
  }
  bool file_type_multi = false;
  if (H5Aexists(root.get(), "file_type") > 0) {
    Hid a(H5Aopen(root.get(), "file_type", H5P_DEFAULT), H5Aclose);
    AttrValue v;
    file_type_multi = a.valid() && read_attr(a.get(), v) && v.as_string() == "multi-read";
  }
  if (impl->groups.empty() && !file_type_multi && !top.empty()) {
    // Single-read layout.
    Hid reads = open_group(impl->file.get(), "/Raw/Reads");
    if (!reads.valid() || H5Lexists(impl->file.get(), "/UniqueGlobalKey", H5P_DEFAULT) <= 0) {
      return Status::unsupported(impl->name +
                                 ": neither a multi-read FAST5 (no read_* groups) nor a "
                                 "single-read FAST5 (no Raw/Reads and UniqueGlobalKey groups)");
    }
    std::vector<std::string> names;
    if (Status s = list_links(reads.get(), names); !s.is_ok()) {
      return Status::corrupt(impl->name + ": Raw/Reads: " + s.message());
    }
    if (names.size() != 1) {
      return Status::corrupt(impl->name + ": single-read FAST5 with " +
                             std::to_string(names.size()) + " groups in Raw/Reads (expected 1)");
    }
    impl->multi_read = false;
    impl->groups.push_back("/Raw/Reads/" + names[0]);
  }
  return std::unique_ptr<Fast5File>(new Fast5File(std::move(impl)));
}

Status Fast5File::read(size_t read_idx, Fast5Read& out) {
  Impl& m = *m_impl;
  const ReadPaths p = m.paths_of(read_idx);
  out.group = m.groups[read_idx];
  ReadAttributes a(m.name + ": read " + out.group);

  Hid raw = open_group(m.file.get(), p.raw);
  if (!raw.valid()) return a.fail("missing group " + p.raw);
  Hid channel = open_group(m.file.get(), p.channel);
  if (!channel.valid()) return a.fail("missing group " + p.channel);
  Hid read_group;
  if (!p.read_group.empty()) {
    read_group = open_group(m.file.get(), p.read_group);
    if (!read_group.valid()) return a.fail("cannot open group " + p.read_group);
  }

  pod5::ReadRecord& r = out.record;
  r = pod5::ReadRecord{};
  AttrValue v;
  ESCPOD_RETURN_IF_ERROR(a.required(raw.get(), "read_id", p.raw, v));
  auto id = pod5::ReadId::parse(v.as_string());
  if (!id.is_ok()) return a.fail("Raw/read_id '" + v.as_string() + "' is not a UUID");
  r.read_id = id.value();
  a.set_who(m.name + ": read " + r.read_id.to_string() + " (" + out.group + ")");

  ESCPOD_RETURN_IF_ERROR(read_raw_required(a, raw.get(), p.raw, r));
  ESCPOD_RETURN_IF_ERROR(read_raw_optional(a, raw.get(), p.raw, r));
  std::optional<AttrValue> o;
  r.pore_type = "not_set";
  if (read_group.valid()) {
    ESCPOD_RETURN_IF_ERROR(a.optional(read_group.get(), "pore_type", p.read_group, o));
    if (o) r.pore_type = o->as_string();
  }
  ESCPOD_ASSIGN_OR_RETURN(const double digitisation, read_channel_fields(a, channel.get(), p.channel, r));

  // Run info, read once per acquisition.
  std::string acquisition;
  if (read_group.valid()) {
    ESCPOD_RETURN_IF_ERROR(a.optional(read_group.get(), "run_id", p.read_group, o));
    if (o) acquisition = o->as_string();
  }
  Hid tracking = open_group(m.file.get(), p.tracking);
  if (!tracking.valid()) return a.fail("missing group " + p.tracking);
  if (acquisition.empty()) {
    ESCPOD_RETURN_IF_ERROR(a.required(tracking.get(), "run_id", p.tracking, v));
    acquisition = v.as_string();
  }
  r.run_info = acquisition;
  auto it = m.run_infos.find(acquisition);
  if (it == m.run_infos.end()) {
    ESCPOD_ASSIGN_OR_RETURN(auto ri,
                            new_run_info(a, m.file.get(), p, acquisition, channel.get(), tracking.get(), digitisation));
    it = m.run_infos.emplace(acquisition, std::move(ri)).first;
  }
  out.run_info = it->second;
  return read_signal(a, m.file.get(), p.raw, out.signal);
}

Status decode_signal(const StoredSignal& s, std::vector<int16_t>& out, const std::string& what) {
  const size_t n = s.n_samples;
  auto bad = [&](const std::string& why) {
    return Status::corrupt(what + ": signal cannot be decoded: " + why);
  };
  switch (s.coding) {
    case SignalCoding::kSamples:
      if (s.samples.size() != n) return bad("sample count mismatch");
      out.assign(s.samples.begin(), s.samples.end());
      return Status::ok();
    case SignalCoding::kRaw:
      if (s.bytes.size() < 2 * n) return bad("chunk shorter than the samples");
      out.resize(n);
      std::memcpy(out.data(), s.bytes.data(), 2 * n);
      return Status::ok();
    case SignalCoding::kDeflate: {
      if (s.decoded_bytes < 2 * n) return bad("chunk smaller than the samples");
      // Decode the chunk into out's storage (sized to the whole chunk, then cut to n samples).
      out.resize((s.decoded_bytes + 1) / 2);
      uLongf dest_len = static_cast<uLongf>(s.decoded_bytes);
      const int rc = uncompress(reinterpret_cast<Bytef*>(out.data()), &dest_len, s.bytes.data(),
                                static_cast<uLong>(s.bytes.size()));
      if (rc != Z_OK) return bad(std::string("deflate stream damaged (zlib: ") + zError(rc) + ")");
      if (dest_len < 2 * n) {
        return bad("deflate chunk holds " + std::to_string(dest_len) + " bytes, expected " +
                   std::to_string(2 * n));
      }
      out.resize(n);
      return Status::ok();
    }
    case SignalCoding::kVbz: {
      const H5Z_class2_t* cls = vbz_filter_class();
      if (cls == nullptr || cls->filter == nullptr) return bad("the HDF5 VBZ filter is unavailable");
      // The filter allocates what the chunk's 4-byte size header claims; check it first so a
      // damaged header cannot make it allocate gigabytes.
      if (s.bytes.size() < 4) return bad("VBZ chunk of " + std::to_string(s.bytes.size()) + " bytes");
      const uint64_t claimed = static_cast<uint64_t>(s.bytes[0]) | static_cast<uint64_t>(s.bytes[1]) << 8 |
                               static_cast<uint64_t>(s.bytes[2]) << 16 | static_cast<uint64_t>(s.bytes[3]) << 24;
      if (claimed != s.decoded_bytes) {
        return bad("VBZ chunk header claims " + std::to_string(claimed) + " bytes, the dataset's chunk holds " +
                   std::to_string(s.decoded_bytes));
      }
      // Likewise for the zstd frame inside (zstd level option > 0): its recorded content size
      // must fit the StreamVByte stream of that many integers (2-bit keys, at most 4 bytes each).
      const unsigned int_size = s.filter_params.size() > 1 && s.filter_params[1] > 0 ? s.filter_params[1] : 2;
      if (s.filter_params.size() > 3 && s.filter_params[3] > 0) {
        const unsigned long long content = ZSTD_getFrameContentSize(s.bytes.data() + 4, s.bytes.size() - 4);
        const uint64_t n_ints = s.decoded_bytes / int_size;
        if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
            content > (n_ints + 3) / 4 + 4 * n_ints) {
          return bad("VBZ chunk's zstd frame is damaged or claims an impossible size");
        }
      }
      size_t buf_size = s.bytes.size();
      void* buf = std::malloc(std::max<size_t>(buf_size, 1));
      if (buf == nullptr) return Status::internal(what + ": out of memory");
      std::memcpy(buf, s.bytes.data(), s.bytes.size());
      const size_t got = cls->filter(H5Z_FLAG_REVERSE, s.filter_params.size(), s.filter_params.data(),
                                     s.bytes.size(), &buf_size, &buf);
      if (got == 0) {
        std::free(buf);
        return bad("VBZ chunk damaged (the VBZ filter rejected it)");
      }
      if (got < 2 * n) {
        std::free(buf);
        return bad("VBZ chunk holds " + std::to_string(got) + " bytes, expected " +
                   std::to_string(2 * n));
      }
      out.resize(n);
      std::memcpy(out.data(), buf, 2 * n);
      std::free(buf);
      return Status::ok();
    }
  }
  return Status::internal(what + ": unknown signal coding");
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  (void)H5get_libversion(&major, &minor, &release);
  return "HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace escpod::fast5
