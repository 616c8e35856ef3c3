#include "pod5/arrow_types.hpp"

#include "escpod/pod5/arrow_extensions.hpp"

#include <arrow/device.h>
#include <arrow/extension_type.h>
#include <arrow/memory_pool.h>

#include <atomic>
#include <mutex>

namespace escpod::pod5::detail {
namespace {

// A POD5 extension type: a name over a storage type, with empty serialised metadata (the
// official reader rejects anything else).
class MinknowExtension : public arrow::ExtensionType {
 public:
  MinknowExtension(std::string name, std::shared_ptr<arrow::DataType> storage)
      : arrow::ExtensionType(std::move(storage)), m_name(std::move(name)) {}
  std::string extension_name() const override { return m_name; }
  bool ExtensionEquals(const arrow::ExtensionType& other) const override {
    return other.extension_name() == m_name;
  }
  std::shared_ptr<arrow::Array> MakeArray(std::shared_ptr<arrow::ArrayData> data) const override {
    return std::make_shared<arrow::ExtensionArray>(data);
  }
  arrow::Result<std::shared_ptr<arrow::DataType>> Deserialize(
      std::shared_ptr<arrow::DataType> storage, const std::string& serialized) const override {
    if (!serialized.empty()) return arrow::Status::Invalid(m_name, ": non-empty metadata");
    if (!storage->Equals(*storage_type())) {
      return arrow::Status::Invalid(m_name, ": storage type ", storage->ToString(),
                                    ", expected ", storage_type()->ToString());
    }
    return std::make_shared<MinknowExtension>(m_name, storage);
  }
  std::string Serialize() const override { return ""; }

 private:
  std::string m_name;
};

std::shared_ptr<arrow::KeyValueMetadata> minknow_metadata(const std::string& id,
                                                          const std::string& software,
                                                          const std::string& version) {
  return arrow::key_value_metadata(
      {"MINKNOW:file_identifier", "MINKNOW:software", "MINKNOW:pod5_version"},
      {id, software, version});
}

}  // namespace

std::shared_ptr<arrow::DataType> uuid_type() {
  static const auto type =
      std::make_shared<MinknowExtension>("minknow.uuid", arrow::fixed_size_binary(16));
  return type;
}

std::shared_ptr<arrow::DataType> vbz_type() {
  static const auto type = std::make_shared<MinknowExtension>("minknow.vbz", arrow::large_binary());
  return type;
}

namespace {
std::atomic<bool> g_register_extension_types{true};

// Arrow's primitive type factories (arrow::uint64(), arrow::utf8(), ...) return process-wide
// singletons created on first call behind function-local statics inside libarrow, and every type
// computes its fingerprint (used by Equals) on first use and caches it, also inside libarrow.
// libarrow is not built with ThreadSanitizer, so a thread that finds a singleton or a cached
// fingerprint already there has no order with the thread that made it in TSan's eyes, and its
// first use from our code (a shared_ptr copy, a fingerprint comparison) is reported as racing
// with the allocation on another thread. Making them all here, behind a static of our own
// (instrumented), orders every creation before everything that runs after this call on any
// thread. The order is real either way; this only makes it visible. Types made per call
// (arrow::list(...), fixed_size_binary(16)) are not shared and need nothing.
void create_shared_arrow_types() {
  static const bool created = [] {
    for (const auto& t : {arrow::null(), arrow::boolean(), arrow::int8(), arrow::int16(), arrow::int32(),
                          arrow::int64(), arrow::uint8(), arrow::uint16(), arrow::uint32(), arrow::uint64(),
                          arrow::float16(), arrow::float32(), arrow::float64(), arrow::utf8(),
                          arrow::large_utf8(), arrow::binary(), arrow::large_binary(), arrow::date32(),
                          arrow::date64(), uuid_type(), vbz_type()}) {
      (void)t->fingerprint();
      (void)t->metadata_fingerprint();
    }
    // Our extension types' storage types are instances of their own (fixed_size_binary(16),
    // large_binary held by the extension), compared with every file's parsed storage type when a
    // schema is read (arrow::TypeEquals): their cached fingerprints are shared the same way.
    for (const auto& t : {uuid_type(), vbz_type()}) {
      const auto& storage = static_cast<const arrow::ExtensionType&>(*t).storage_type();
      (void)storage->fingerprint();
      (void)storage->metadata_fingerprint();
    }
    // The CPU device, its memory manager (every buffer, a memory map's included, points to it)
    // and the default memory pool: singletons made on first use in the same way.
    (void)arrow::CPUDevice::Instance();
    (void)arrow::default_cpu_memory_manager();
    (void)arrow::default_memory_pool();
    return true;
  }();
  (void)created;
}
}  // namespace

void register_extension_types() {
  create_shared_arrow_types();
  if (!g_register_extension_types.load()) return;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const auto& t : {uuid_type(), vbz_type()}) {
      auto ext = std::static_pointer_cast<arrow::ExtensionType>(t);
      if (!arrow::GetExtensionType(ext->extension_name())) {
        (void)arrow::RegisterExtensionType(ext);
      }
    }
  });
}

}  // namespace escpod::pod5::detail

namespace escpod::pod5 {
void set_register_arrow_extension_types(bool enabled) { detail::g_register_extension_types = enabled; }
}  // namespace escpod::pod5

namespace escpod::pod5::detail {

std::shared_ptr<arrow::Array> storage_of(const std::shared_ptr<arrow::Array>& array) {
  if (array->type_id() == arrow::Type::EXTENSION) {
    return std::static_pointer_cast<arrow::ExtensionArray>(array)->storage();
  }
  return array;
}

std::string extension_name(const arrow::Field& field) {
  if (field.type()->id() == arrow::Type::EXTENSION) {
    return static_cast<const arrow::ExtensionType&>(*field.type()).extension_name();
  }
  if (field.metadata()) {
    auto v = field.metadata()->Get("ARROW:extension:name");
    if (v.ok()) return *v;
  }
  return "";
}

std::shared_ptr<arrow::Schema> signal_schema(bool vbz, const std::string& id,
                                             const std::string& software,
                                             const std::string& version) {
  auto signal_type = vbz ? vbz_type() : arrow::large_list(arrow::field("item", arrow::int16()));
  return arrow::schema({arrow::field("read_id", uuid_type()), arrow::field("signal", signal_type),
                        arrow::field("samples", arrow::uint32())},
                       minknow_metadata(id, software, version));
}

std::shared_ptr<arrow::Schema> reads_schema(const std::string& id, const std::string& software,
                                            const std::string& version) {
  auto dict = arrow::dictionary(arrow::int16(), arrow::utf8());
  return arrow::schema(
      {
          arrow::field("read_id", uuid_type()),
          arrow::field("signal", arrow::list(arrow::field("item", arrow::uint64()))),
          arrow::field("read_number", arrow::uint32()),
          arrow::field("start", arrow::uint64()),
          arrow::field("median_before", arrow::float32()),
          arrow::field("num_minknow_events", arrow::uint64()),
          arrow::field("tracked_scaling_scale", arrow::float32()),
          arrow::field("tracked_scaling_shift", arrow::float32()),
          arrow::field("predicted_scaling_scale", arrow::float32()),
          arrow::field("predicted_scaling_shift", arrow::float32()),
          arrow::field("num_reads_since_mux_change", arrow::uint32()),
          arrow::field("time_since_mux_change", arrow::float32()),
          arrow::field("num_samples", arrow::uint64()),
          arrow::field("channel", arrow::uint16()),
          arrow::field("well", arrow::uint8()),
          arrow::field("pore_type", dict),
          arrow::field("calibration_offset", arrow::float32()),
          arrow::field("calibration_scale", arrow::float32()),
          arrow::field("end_reason", dict),
          arrow::field("end_reason_forced", arrow::boolean()),
          arrow::field("run_info", dict),
          arrow::field("open_pore_level", arrow::float32()),
          arrow::field("expected_open_pore_level", arrow::float32()),
          arrow::field("selected_read_level", arrow::float32()),
          arrow::field("channel_32bit", arrow::uint32()),
      },
      minknow_metadata(id, software, version));
}

std::shared_ptr<arrow::Schema> run_info_schema(const std::string& id, const std::string& software,
                                               const std::string& version) {
  auto ts = arrow::timestamp(arrow::TimeUnit::MILLI, "UTC");
  // Map entries: struct<key: utf8 not null, value: utf8> not null, keys not sorted.
  auto map = std::make_shared<arrow::MapType>(arrow::field("key", arrow::utf8(), false),
                                              arrow::field("value", arrow::utf8(), true), false);
  return arrow::schema(
      {
          arrow::field("acquisition_id", arrow::utf8()),
          arrow::field("acquisition_start_time", ts),
          arrow::field("adc_max", arrow::int16()),
          arrow::field("adc_min", arrow::int16()),
          arrow::field("context_tags", map),
          arrow::field("experiment_name", arrow::utf8()),
          arrow::field("flow_cell_id", arrow::utf8()),
          arrow::field("flow_cell_product_code", arrow::utf8()),
          arrow::field("protocol_name", arrow::utf8()),
          arrow::field("protocol_run_id", arrow::utf8()),
          arrow::field("protocol_start_time", ts),
          arrow::field("sample_id", arrow::utf8()),
          arrow::field("sample_rate", arrow::uint16()),
          arrow::field("sequencing_kit", arrow::utf8()),
          arrow::field("sequencer_position", arrow::utf8()),
          arrow::field("sequencer_position_type", arrow::utf8()),
          arrow::field("software", arrow::utf8()),
          arrow::field("system_name", arrow::utf8()),
          arrow::field("system_type", arrow::utf8()),
          arrow::field("tracking_id", map),
      },
      minknow_metadata(id, software, version));
}

}  // namespace escpod::pod5::detail
