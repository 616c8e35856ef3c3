// DeviceTape: descriptor upload, register delivery, one launch per stage (host code; the
// kernel is in tape_kernel.cu).
#include "escpod/gpu/device_tape.hpp"
#include "gpu/device_tape_access.hpp"
#include "gpu/device_tape_impl.hpp"
#include "gpu/tape_interpreter.hpp"

#include <fmt/format.h>

#include <cstring>
#include <utility>
#include <vector>

namespace escpod::gpu {

namespace detail {

Status cuda_status(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return Status::ok();
  std::string message = fmt::format("{}: {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    return Status::unsupported(std::move(message));
  }
  return Status::internal(std::move(message));
}

}  // namespace detail

namespace {

using detail::cuda_status;

constexpr std::size_t kTableAlign = 64;

std::size_t align_up(std::size_t n) { return (n + kTableAlign - 1) / kTableAlign * kTableAlign; }

void copy_registers(const Registers& regs, detail::RawRegisters& out) {
  std::memcpy(out.slot, regs.values().data(), sizeof out.slot);
}

Status check_buffer_is_device_accessible(const std::string& tape, const Buffer& b, int device) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(b.address));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // older runtimes report unregistered host memory as an error
    attr.type = cudaMemoryTypeUnregistered;
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    return Status::invalid_argument(fmt::format(
        "prep tape '{}': buffer '{}' at {:#x} is not device-accessible memory (pageable host "
        "memory cannot be recorded on a device tape)",
        tape, b.name, b.address));
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device) {
    return Status::invalid_argument(
        fmt::format("prep tape '{}': buffer '{}' lives on device {} but the tape is for device {}",
                    tape, b.name, attr.device, device));
  }
  return Status::ok();
}

constexpr int kInitialStagingBlocks = 4;

}  // namespace

bool cuda_enabled_in_build() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

DeviceTape::Impl::~Impl() {
  // cudaFree and cudaFreeHost synchronise, so in-flight runs finish before their memory goes.
  for (StagingBlock& b : pool) {
    if (b.done != nullptr) (void)cudaEventDestroy(b.done);
    if (b.host != nullptr) (void)cudaFreeHost(b.host);
  }
  if (racy_pinned != nullptr) (void)cudaFreeHost(racy_pinned);
  if (d_registers != nullptr) (void)cudaFree(d_registers);
  if (d_tables != nullptr) (void)cudaFree(d_tables);
}

Status DeviceTape::Impl::add_staging_block() {
  StagingBlock b;
  ESCPOD_RETURN_IF_ERROR(cuda_status(
      cudaHostAlloc(reinterpret_cast<void**>(&b.host), sizeof(detail::RawRegisters),
                    cudaHostAllocDefault),
      fmt::format("prep tape '{}': allocating a staging block", program.name())));
  const cudaError_t e = cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    (void)cudaFreeHost(b.host);
    return cuda_status(e, fmt::format("prep tape '{}': staging event", program.name()));
  }
  pool.push_back(b);
  return Status::ok();
}

DeviceTape::DeviceTape(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
DeviceTape::~DeviceTape() = default;

Status DeviceTape::Impl::upload_stage_tables() {
  const std::string& name = program.name();
  // One blob: per stage, its descriptors then its block prefix table, each 64-byte aligned.
  std::vector<std::size_t> desc_offset, prefix_offset;
  std::vector<std::vector<std::int32_t>> prefixes;
  std::size_t bytes = 0;
  for (int s = 0; s < program.n_stages(); ++s) {
    const auto descs = program.stage_descriptors(s);
    const auto max_elements = program.stage_max_elements(s);
    std::vector<std::int32_t> prefix(1, 0);
    for (std::size_t k = 0; k < descs.size(); ++k) {
      const int log2 = detail::header_dst_log2(descs[k].words[detail::kWordHeader]);
      const std::int64_t blocks = detail::blocks_for_op(max_elements[k], 1 << log2);
      prefix.push_back(prefix.back() + static_cast<std::int32_t>(blocks));
    }
    desc_offset.push_back(bytes);
    bytes = align_up(bytes + descs.size() * sizeof(detail::RawDescriptor));
    prefix_offset.push_back(bytes);
    bytes = align_up(bytes + prefix.size() * sizeof(std::int32_t));
    prefixes.push_back(std::move(prefix));
  }
  if (bytes == 0) return Status::ok();
  std::vector<unsigned char> blob(bytes, 0);
  for (int s = 0; s < program.n_stages(); ++s) {
    const auto descs = program.stage_descriptors(s);
    const auto si = static_cast<std::size_t>(s);
    for (std::size_t k = 0; k < descs.size(); ++k) {
      std::memcpy(blob.data() + desc_offset[si] + k * sizeof(detail::RawDescriptor),
                  descs[k].words.data(), sizeof(detail::RawDescriptor));
    }
    std::memcpy(blob.data() + prefix_offset[si], prefixes[si].data(),
                prefixes[si].size() * sizeof(std::int32_t));
  }
  ESCPOD_RETURN_IF_ERROR(cuda_status(cudaMalloc(&d_tables, bytes),
                                     fmt::format("prep tape '{}': allocating tables", name)));
  ++stats.device_allocations;
  ESCPOD_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(d_tables, blob.data(), bytes, cudaMemcpyHostToDevice),
                  fmt::format("prep tape '{}': uploading descriptors", name)));
  ++stats.descriptor_uploads;
  auto* base = static_cast<unsigned char*>(d_tables);
  for (int s = 0; s < program.n_stages(); ++s) {
    const auto si = static_cast<std::size_t>(s);
    detail::StageTable t;
    t.ops = reinterpret_cast<const detail::RawDescriptor*>(base + desc_offset[si]);
    t.block_prefix = reinterpret_cast<const std::int32_t*>(base + prefix_offset[si]);
    t.n_ops = static_cast<int>(prefixes[si].size()) - 1;
    t.n_blocks = static_cast<unsigned>(prefixes[si].back());
    stages.push_back(t);
  }
  return Status::ok();
}

Result<std::unique_ptr<DeviceTape>> DeviceTape::create(PrepTape tape, DeviceTapeOptions options) {
  const std::string name = tape.name();
  if (!tape.is_finalized()) {
    return Status::invalid_argument(
        fmt::format("prep tape '{}': DeviceTape::create before finalize", name));
  }
  if (tape.space() != MemorySpace::kDevice) {
    return Status::invalid_argument(fmt::format(
        "prep tape '{}': DeviceTape::create on a host tape (use run_on_host)", name));
  }
  int device = 0;
  ESCPOD_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device),
                                     fmt::format("prep tape '{}': no CUDA device", name)));
  for (const Buffer& b : tape.buffers()) {
    ESCPOD_RETURN_IF_ERROR(check_buffer_is_device_accessible(name, b, device));
  }

  auto impl = std::make_unique<Impl>(std::move(tape));
  impl->delivery = options.delivery;
  ESCPOD_RETURN_IF_ERROR(impl->upload_stage_tables());
  if (options.delivery == RegisterDelivery::kFencedStaging) {
    ESCPOD_RETURN_IF_ERROR(
        cuda_status(cudaMalloc(&impl->d_registers, sizeof(detail::RawRegisters)),
                    fmt::format("prep tape '{}': allocating the device register array", name)));
    ++impl->stats.device_allocations;
    // Enough blocks for a few runs in flight, so steady-state runs never allocate.
    for (int i = 0; i < kInitialStagingBlocks; ++i) {
      ESCPOD_RETURN_IF_ERROR(impl->add_staging_block());
    }
  }
  return std::unique_ptr<DeviceTape>(new DeviceTape(std::move(impl)));
}

Status DeviceTape::run(const Registers& regs, CUstream_st* stream) {
  Impl& im = *m_impl;
  ESCPOD_RETURN_IF_ERROR(im.program.check_run(regs));
  detail::StageLaunch launch;
  copy_registers(regs, launch.regs);
  launch.regs_device = nullptr;
  launch.reserved = 0;

  const bool staged = im.racy || im.delivery == RegisterDelivery::kFencedStaging;
  if (staged && !im.stages.empty()) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    ESCPOD_RETURN_IF_ERROR(detail::cuda_check(cudaStreamIsCapturing(stream, &capture),
                                              "prep tape '{}': run", im.program.name()));
    if (capture != cudaStreamCaptureStatusNone) {
      return Status::invalid_argument(fmt::format(
          "prep tape '{}': run under stream capture needs RegisterDelivery::kKernelArgument (a "
          "captured upload would read its staging block at replay time)",
          im.program.name()));
    }
    detail::RawRegisters* host = nullptr;
    cudaEvent_t done = nullptr;
    if (im.racy) {
      host = im.racy_pinned;  // the bug under test: rewritten while earlier uploads are queued
    } else {
      const std::size_t n = im.pool.size();
      for (std::size_t k = 0; k < n && host == nullptr; ++k) {
        const std::size_t at = (im.pool_cursor + k) % n;
        const cudaError_t q = cudaEventQuery(im.pool[at].done);
        if (q == cudaSuccess) {
          host = im.pool[at].host;
          done = im.pool[at].done;
          im.pool_cursor = (at + 1) % n;
        } else if (q != cudaErrorNotReady) {
          return detail::cuda_check(q, "prep tape '{}': staging event", im.program.name());
        }
      }
      if (host == nullptr) {  // every block is still being read: grow, never wait
        ESCPOD_RETURN_IF_ERROR(im.add_staging_block());
        host = im.pool.back().host;
        done = im.pool.back().done;
      }
    }
    std::memcpy(host, &launch.regs, sizeof(detail::RawRegisters));
    ESCPOD_RETURN_IF_ERROR(detail::cuda_check(
        cudaMemcpyAsync(im.d_registers, host, sizeof(detail::RawRegisters), cudaMemcpyHostToDevice,
                        stream),
        "prep tape '{}': register upload", im.program.name()));
    ++im.stats.register_uploads;
    if (done != nullptr) {
      ESCPOD_RETURN_IF_ERROR(detail::cuda_check(cudaEventRecord(done, stream),
                                                "prep tape '{}': staging event", im.program.name()));
    }
    launch.regs_device = im.d_registers;
  }

  for (std::size_t s = 0; s < im.stages.size(); ++s) {
    const detail::StageTable& t = im.stages[s];
    launch.ops = t.ops;
    launch.block_prefix = t.block_prefix;
    launch.n_ops = t.n_ops;
    void* args[] = {&launch};
    ESCPOD_RETURN_IF_ERROR(detail::cuda_check(
        cudaLaunchKernel(detail::stage_kernel_address(), dim3(t.n_blocks),
                         dim3(detail::kThreadsPerBlock), args, 0, stream),
        "prep tape '{}': launching stage {}", im.program.name(), s));
    ++im.stats.kernel_launches;
  }
  ++im.stats.runs;
  return Status::ok();
}

const PrepTape& DeviceTape::program() const { return m_impl->program; }
RegisterDelivery DeviceTape::delivery() const { return m_impl->delivery; }

DeviceTapeStats DeviceTape::stats() const {
  DeviceTapeStats s = m_impl->stats;
  s.staging_blocks = static_cast<std::int64_t>(m_impl->pool.size()) +
                     (m_impl->racy_pinned != nullptr ? 1 : 0);
  return s;
}

namespace detail {

Status DeviceTapeAccess::use_racy_persistent_staging(DeviceTape& tape) {
  DeviceTape::Impl& im = *tape.m_impl;
  const std::string& name = im.program.name();
  if (im.d_registers == nullptr) {
    ESCPOD_RETURN_IF_ERROR(cuda_status(cudaMalloc(&im.d_registers, sizeof(RawRegisters)),
                                       fmt::format("prep tape '{}': racy staging", name)));
    ++im.stats.device_allocations;
  }
  if (im.racy_pinned == nullptr) {
    ESCPOD_RETURN_IF_ERROR(cuda_status(
        cudaHostAlloc(reinterpret_cast<void**>(&im.racy_pinned), sizeof(RawRegisters),
                      cudaHostAllocDefault),
        fmt::format("prep tape '{}': racy staging", name)));
  }
  im.racy = true;
  return Status::ok();
}

std::int64_t DeviceTapeAccess::staging_blocks(const DeviceTape& tape) {
  return tape.stats().staging_blocks;
}

void DeviceTapeAccess::stage_launch(const DeviceTape& tape, int stage_idx, const Registers& regs,
                                    StageLaunch& out, unsigned& n_blocks) {
  const StageTable& t = tape.m_impl->stages[static_cast<std::size_t>(stage_idx)];
  out.ops = t.ops;
  out.block_prefix = t.block_prefix;
  out.n_ops = t.n_ops;
  out.reserved = 0;
  out.regs_device = nullptr;
  copy_registers(regs, out.regs);
  n_blocks = t.n_blocks;
}

}  // namespace detail

}  // namespace escpod::gpu
