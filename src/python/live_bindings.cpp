// Live (read-until) decisions from Python: the streaming classifier and the balancing policy of
// `escpod live replay` (pipeline/demux/live_classifier.hpp, pipeline/live/balancing.hpp), for
// read-until clients (python/escpod/live). One classifier per process is shared by its threads;
// feed() releases the GIL and uses a scratch per calling thread.
#include "live_bindings.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "escpod/pipeline/demux/live_classifier.hpp"
#include "escpod/pipeline/live/balancing.hpp"
#include "py_support.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace escpod::python {
namespace {

using Samples = nb::ndarray<const int16_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A classifier with one scratch per thread that feeds it.
class PyLiveClassifier {
 public:
  PyLiveClassifier(const std::string& model, const std::optional<std::string>& method,
                   const std::optional<std::string>& cnn_model, const std::optional<std::string>& config,
                   const pipeline::LiveOptions& options) {
    demux::HeadOptions head;
    head.model_file.warpdemux_config = config.value_or("");
    auto spec = pipeline::resolve_model_spec(model, std::move(head), method.value_or(""), cnn_model.value_or(""));
    if (!spec.is_ok()) raise_status(spec.status());
    auto c = pipeline::LiveClassifier::create(*spec, options);
    if (!c.is_ok()) raise_status(c.status());
    m_classifier = std::make_unique<pipeline::LiveClassifier>(std::move(c).value());
  }

  pipeline::LiveDecision feed(pipeline::LiveRead& read, const Samples& raw, bool end) {
    const std::span<const int16_t> chunk(raw.data(), raw.shape(0));
    nb::gil_scoped_release release;
    return m_classifier->feed(read, chunk, end, scratch());
  }

  const pipeline::LiveClassifier& get() const { return *m_classifier; }

 private:
  pipeline::LiveClassifier::Scratch& scratch() {
    std::lock_guard lock(m_mutex);
    auto& s = m_scratch[std::this_thread::get_id()];
    if (!s) s = std::make_unique<pipeline::LiveClassifier::Scratch>(m_classifier->make_scratch());
    return *s;
  }

  std::unique_ptr<pipeline::LiveClassifier> m_classifier;
  std::mutex m_mutex;
  std::unordered_map<std::thread::id, std::unique_ptr<pipeline::LiveClassifier::Scratch>> m_scratch;
};

pipeline::live::BalancingPolicy make_policy(const std::string& config, const std::vector<std::string>& names,
                                            const std::optional<std::vector<int>>& channels, uint64_t seed) {
  auto parsed = pipeline::live::read_live_config(config, names.size());
  if (!parsed.is_ok()) raise_status(parsed.status());
  auto p = channels ? pipeline::live::BalancingPolicy::create(*parsed, *channels, seed)
                    : pipeline::live::BalancingPolicy::create(*parsed, seed);
  if (!p.is_ok()) raise_status(p.status());
  return std::move(p).value();
}

void bind_decision(nb::module_& m) {
  nb::class_<pipeline::LiveRead>(m, "LiveRead", "One read's state between chunks (opaque)")
      .def_prop_ro("samples_seen", &pipeline::LiveRead::samples_seen)
      .def_prop_ro("state_bytes", &pipeline::LiveRead::state_bytes);
  nb::class_<pipeline::LiveDecision>(m, "LiveDecision", "What the classifier says of a read so far")
      .def_prop_ro("state", [](const pipeline::LiveDecision& d) { return std::string(pipeline::live_state_name(d.state)); })
      .def_ro("label", &pipeline::LiveDecision::label)
      .def_ro("barcode", &pipeline::LiveDecision::barcode)
      .def_ro("confidence", &pipeline::LiveDecision::confidence)
      .def_ro("reason", &pipeline::LiveDecision::reason)
      .def_ro("samples_seen", &pipeline::LiveDecision::samples_seen)
      .def_ro("adapter_end", &pipeline::LiveDecision::adapter_end)
      .def_ro("early", &pipeline::LiveDecision::early)
      .def_prop_ro("final", &pipeline::LiveDecision::final)
      .def("__repr__", [](const pipeline::LiveDecision& d) {
        return "LiveDecision(" + std::string(pipeline::live_state_name(d.state)) + ", label='" + d.label +
               "', confidence=" + std::to_string(d.confidence) + ", samples_seen=" + std::to_string(d.samples_seen) +
               (d.reason.empty() ? std::string() : ", reason='" + d.reason + "'") + ")";
      });
}

void bind_classifier(nb::module_& m) {
  nb::class_<PyLiveClassifier>(m, "LiveClassifier",
                               "Streaming barcode classifier: feed a read's raw int16 chunks as they arrive")
      .def("__init__",
           [](PyLiveClassifier* self, const std::string& model, std::optional<std::string> method,
              std::optional<std::string> cnn_model, std::optional<std::string> config, double min_confidence,
              uint64_t first_attempt, uint64_t attempt_every, uint64_t min_adapter_samples, std::optional<uint64_t> decide_by) {
             pipeline::LiveOptions o;
             o.min_confidence = min_confidence;
             o.first_attempt = first_attempt;
             o.attempt_every = attempt_every;
             o.min_adapter_samples = min_adapter_samples;
             o.decide_by = decide_by;
             new (self) PyLiveClassifier(model, method, cnn_model, config, o);
           },
           "model"_a, "method"_a = nb::none(), "cnn_model"_a = nb::none(), "config"_a = nb::none(),
           "min_confidence"_a = pipeline::LiveOptions{}.min_confidence,
           "first_attempt"_a = pipeline::LiveOptions{}.first_attempt,
           "attempt_every"_a = pipeline::LiveOptions{}.attempt_every,
           "min_adapter_samples"_a = pipeline::LiveOptions{}.min_adapter_samples,
           "decide_by"_a = nb::none())
      .def_prop_ro("barcode_names",
                   [](const PyLiveClassifier& c) {
                     const auto names = c.get().barcode_names();
                     return std::vector<std::string>(names.begin(), names.end());
                   })
      .def_prop_ro("decisive_samples", [](const PyLiveClassifier& c) { return c.get().decisive_samples(); })
      .def("describe", [](const PyLiveClassifier& c) { return c.get().describe(); })
      .def("new_read",
           [](const PyLiveClassifier& c, const std::string& /*read_id*/, float offset, float scale) {
             return c.get().new_read(offset, scale);
           },
           "read_id"_a, "offset"_a, "scale"_a,
           "A read's state; pA = (adc + offset) * scale. read_id keys the read for the caller (a\n"
           "client's stand-in classifier may use it); the classifier needs only the calibration")
      .def("feed", &PyLiveClassifier::feed, "read"_a, "raw"_a, "end"_a = false,
           "Feeds the next chunk (new int16 samples only); returns the read's decision so far");
}

void bind_policy(nb::module_& m) {
  nb::class_<pipeline::live::PolicyAction>(m, "PolicyAction", "The policy's answer for one read")
      .def_ro("unblock", &pipeline::live::PolicyAction::unblock)
      .def_ro("unblock_seconds", &pipeline::live::PolicyAction::unblock_seconds)
      .def_ro("reason", &pipeline::live::PolicyAction::reason)
      .def_ro("balancer", &pipeline::live::PolicyAction::balancer)
      .def_ro("registered", &pipeline::live::PolicyAction::registered,
              "True when the policy counted this accepted read: pass it to record_sequenced when it ends");
  nb::class_<pipeline::live::BalancingPolicy>(m, "BalancingPolicy",
                                              "Barcode balancing from a WarpDemuX live config (TOML)")
      .def("__init__",
           [](pipeline::live::BalancingPolicy* self, const std::string& config, const std::vector<std::string>& names,
              std::optional<std::vector<int>> channels, uint64_t seed) {
             new (self) pipeline::live::BalancingPolicy(make_policy(config, names, channels, seed));
           },
           "config"_a, "barcode_names"_a, "channels"_a = nb::none(), "seed"_a = 0)
      .def("decide",
           [](pipeline::live::BalancingPolicy& p, int channel, const pipeline::LiveDecision& d, double now,
              uint64_t samples_after_adapter) {
             return p.decide(channel, pipeline::policy_read_call(d), d.barcode, d.confidence, now, samples_after_adapter);
           },
           "channel"_a, "decision"_a, "now"_a, "samples_after_adapter"_a)
      .def("record_sequenced", &pipeline::live::BalancingPolicy::record_sequenced, "channel"_a, "barcode"_a,
           "kbases"_a);
}

}  // namespace

void bind_live(nb::module_& m) {
  bind_decision(m);
  bind_classifier(m);
  bind_policy(m);
}

}  // namespace escpod::python
