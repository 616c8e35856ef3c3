// GraphRunner: persistent buffers, one captured graph per bucket, prep tape before or inside.
#include "escpod/gpu/graph_runner.hpp"
#include "gpu/device_tape_access.hpp"
#include "gpu/device_tape_impl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace escpod::gpu {

using detail::cuda_status;

struct GraphRunner::Impl {
  Impl() = default;
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  struct Bucket {
    std::int64_t rows = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> prep_nodes;  // stage kernels, stage order (kInsideGraph)
  };

  std::string name;
  std::int64_t capacity_rows = 0;
  std::vector<Buffer> buffers;
  std::unique_ptr<DeviceTape> prep;
  PrepPlacement placement = PrepPlacement::kBeforeGraph;
  std::vector<Bucket> buckets;
  cudaStream_t capture_stream = nullptr;

  Bucket* find(std::int64_t rows) {
    for (Bucket& b : buckets) {
      if (b.rows == rows) return &b;
    }
    return nullptr;
  }
};

GraphRunner::Impl::~Impl() {
  // Graphs embed the tape's table addresses and the buffers: destroy them first.
  for (Bucket& b : buckets) {
    if (b.exec != nullptr) (void)cudaGraphExecDestroy(b.exec);
    if (b.graph != nullptr) (void)cudaGraphDestroy(b.graph);
  }
  if (capture_stream != nullptr) (void)cudaStreamDestroy(capture_stream);
  prep.reset();
}

GraphRunner::GraphRunner(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
GraphRunner::~GraphRunner() = default;

Result<std::unique_ptr<GraphRunner>> GraphRunner::create(GraphRunnerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->name = options.name;
  const std::string& name = impl->name;
  if (options.buckets.empty()) {
    return Status::invalid_argument(fmt::format("{}: no buckets", name));
  }
  for (std::size_t i = 0; i < options.buckets.size(); ++i) {
    const std::int64_t rows = options.buckets[i];
    if (rows <= 0) {
      return Status::invalid_argument(fmt::format("{}: bucket {} has {} rows", name, i, rows));
    }
    if (std::count(options.buckets.begin(), options.buckets.end(), rows) != 1) {
      return Status::invalid_argument(fmt::format("{}: bucket size {} appears twice", name, rows));
    }
    Impl::Bucket b;
    b.rows = rows;
    impl->buckets.push_back(b);
    impl->capacity_rows = std::max(impl->capacity_rows, rows);
  }
  int device = 0;
  ESCPOD_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), fmt::format("{}: no CUDA device", name)));
  for (const GraphBufferSpec& spec : options.buffers) {
    const int w = width_bytes(spec.width);
    if (w == 0 || spec.elements_per_row <= 0) {
      return Status::invalid_argument(
          fmt::format("{}: buffer '{}': bad width or elements per row", name, spec.name));
    }
    const std::int64_t capacity = impl->capacity_rows * spec.elements_per_row;
    const auto bytes = static_cast<std::size_t>(capacity * w);
    void* p = nullptr;
    ESCPOD_RETURN_IF_ERROR(
        cuda_status(cudaMalloc(&p, bytes), fmt::format("{}: allocating '{}'", name, spec.name)));
    std::shared_ptr<const void> owner(p, [](const void* q) { (void)cudaFree(const_cast<void*>(q)); });
    ESCPOD_RETURN_IF_ERROR(
        cuda_status(cudaMemset(p, 0, bytes), fmt::format("{}: clearing '{}'", name, spec.name)));
    impl->buffers.push_back(device_buffer(spec.name, p, capacity, spec.width, std::move(owner)));
  }
  return std::unique_ptr<GraphRunner>(new GraphRunner(std::move(impl)));
}

int GraphRunner::n_buffers() const { return static_cast<int>(m_impl->buffers.size()); }
const Buffer& GraphRunner::buffer(int i) const {
  return m_impl->buffers[static_cast<std::size_t>(i)];
}
std::int64_t GraphRunner::capacity_rows() const { return m_impl->capacity_rows; }
DeviceTape* GraphRunner::prep() const { return m_impl->prep.get(); }

Status GraphRunner::set_prep(std::unique_ptr<DeviceTape> prep, PrepPlacement placement) {
  Impl& im = *m_impl;
  for (const Impl::Bucket& b : im.buckets) {
    if (b.exec != nullptr) {
      return Status::invalid_argument(
          fmt::format("{}: set_prep after bucket {} was captured", im.name, b.rows));
    }
  }
  if (prep != nullptr && placement == PrepPlacement::kInsideGraph &&
      prep->delivery() != RegisterDelivery::kKernelArgument) {
    return Status::invalid_argument(fmt::format(
        "{}: a prep tape inside the graph needs RegisterDelivery::kKernelArgument", im.name));
  }
  im.prep = std::move(prep);
  im.placement = placement;
  return Status::ok();
}

Status GraphRunner::capture(std::int64_t bucket_rows, const CaptureBody& body) {
  Impl& im = *m_impl;
  Impl::Bucket* bucket = im.find(bucket_rows);
  if (bucket == nullptr) {
    return Status::invalid_argument(fmt::format("{}: capture of unknown bucket {}", im.name, bucket_rows));
  }
  if (bucket->exec != nullptr) {
    return Status::invalid_argument(
        fmt::format("{}: bucket {} is already captured (capture once)", im.name, bucket_rows));
  }
  const std::string what = fmt::format("{}: capturing bucket {}", im.name, bucket_rows);
  if (im.capture_stream == nullptr) {
    ESCPOD_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&im.capture_stream, cudaStreamNonBlocking), what));
  }
  ESCPOD_RETURN_IF_ERROR(cuda_status(
      cudaStreamBeginCapture(im.capture_stream, cudaStreamCaptureModeThreadLocal), what));
  const Status body_status = body(im.capture_stream, bucket_rows);
  cudaGraph_t body_graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(im.capture_stream, &body_graph);
  if (!body_status.is_ok()) {
    if (body_graph != nullptr) (void)cudaGraphDestroy(body_graph);
    return body_status.with_context(what);
  }
  ESCPOD_RETURN_IF_ERROR(cuda_status(end, what));

  cudaGraph_t graph = body_graph;
  std::vector<cudaGraphNode_t> prep_nodes;
  if (im.prep != nullptr && im.placement == PrepPlacement::kInsideGraph) {
    cudaError_t e = cudaGraphCreate(&graph, 0);
    if (e != cudaSuccess) {
      (void)cudaGraphDestroy(body_graph);
      return cuda_status(e, what);
    }
    const Registers zero;  // placeholder arguments; replay sets the real ones before each launch
    cudaGraphNode_t prev = nullptr;
    const int n_stages = im.prep->program().n_stages();
    for (int s = 0; s < n_stages && e == cudaSuccess; ++s) {
      detail::StageLaunch launch;
      unsigned n_blocks = 0;
      detail::DeviceTapeAccess::stage_launch(*im.prep, s, zero, launch, n_blocks);
      void* args[] = {&launch};
      cudaKernelNodeParams params{};
      params.func = const_cast<void*>(detail::stage_kernel_address());
      params.gridDim = dim3(n_blocks);
      params.blockDim = dim3(detail::kThreadsPerBlock);
      params.sharedMemBytes = 0;
      params.kernelParams = args;
      params.extra = nullptr;
      cudaGraphNode_t node = nullptr;
      e = cudaGraphAddKernelNode(&node, graph, prev != nullptr ? &prev : nullptr,
                                 prev != nullptr ? 1 : 0, &params);
      if (e == cudaSuccess) {
        prep_nodes.push_back(node);
        prev = node;
      }
    }
    cudaGraphNode_t child = nullptr;
    if (e == cudaSuccess) {
      e = cudaGraphAddChildGraphNode(&child, graph, prev != nullptr ? &prev : nullptr,
                                     prev != nullptr ? 1 : 0, body_graph);
    }
    (void)cudaGraphDestroy(body_graph);  // the child node holds its own clone
    if (e != cudaSuccess) {
      (void)cudaGraphDestroy(graph);
      return cuda_status(e, what);
    }
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  if (ie != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    return cuda_status(ie, what);
  }
  bucket->graph = graph;
  bucket->exec = exec;
  bucket->prep_nodes = std::move(prep_nodes);
  return Status::ok();
}

Status GraphRunner::replay(std::int64_t bucket_rows, const Registers& regs, CUstream_st* stream) {
  Impl& im = *m_impl;
  Impl::Bucket* bucket = im.find(bucket_rows);
  if (bucket == nullptr || bucket->exec == nullptr) {
    return Status::invalid_argument(
        fmt::format("{}: replay of bucket {}, which was never captured", im.name, bucket_rows));
  }
  const std::string_view what = im.name;
  if (im.prep != nullptr) {
    if (im.placement == PrepPlacement::kBeforeGraph) {
      ESCPOD_RETURN_IF_ERROR(im.prep->run(regs, stream));
    } else {
      ESCPOD_RETURN_IF_ERROR(im.prep->program().check_run(regs));
      for (std::size_t s = 0; s < bucket->prep_nodes.size(); ++s) {
        detail::StageLaunch launch;
        unsigned n_blocks = 0;
        detail::DeviceTapeAccess::stage_launch(*im.prep, static_cast<int>(s), regs, launch, n_blocks);
        void* args[] = {&launch};
        cudaKernelNodeParams params{};
        params.func = const_cast<void*>(detail::stage_kernel_address());
        params.gridDim = dim3(n_blocks);
        params.blockDim = dim3(detail::kThreadsPerBlock);
        params.sharedMemBytes = 0;
        params.kernelParams = args;
        params.extra = nullptr;
        ESCPOD_RETURN_IF_ERROR(cuda_status(
            cudaGraphExecKernelNodeSetParams(bucket->exec, bucket->prep_nodes[s], &params), what));
      }
    }
  }
  return cuda_status(cudaGraphLaunch(bucket->exec, stream), what);
}

Result<GraphNodeCounts> GraphRunner::node_counts(std::int64_t bucket_rows) const {
  Impl& im = *m_impl;
  Impl::Bucket* bucket = im.find(bucket_rows);
  if (bucket == nullptr || bucket->graph == nullptr) {
    return Status::invalid_argument(
        fmt::format("{}: bucket {} was never captured", im.name, bucket_rows));
  }
  std::size_t n = 0;
  ESCPOD_RETURN_IF_ERROR(cuda_status(cudaGraphGetNodes(bucket->graph, nullptr, &n), im.name));
  std::vector<cudaGraphNode_t> nodes(n);
  ESCPOD_RETURN_IF_ERROR(cuda_status(cudaGraphGetNodes(bucket->graph, nodes.data(), &n), im.name));
  GraphNodeCounts counts;
  counts.total = static_cast<int>(n);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    ESCPOD_RETURN_IF_ERROR(cuda_status(cudaGraphNodeGetType(node, &type), im.name));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams params{};
    ESCPOD_RETURN_IF_ERROR(cuda_status(cudaGraphKernelNodeGetParams(node, &params), im.name));
    if (params.func == detail::stage_kernel_address()) ++counts.prep_kernels;
  }
  return counts;
}

}  // namespace escpod::gpu
