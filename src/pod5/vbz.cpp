// VBZ = one zstd frame (content size recorded) around an svb16 stream (docs/formats.md §1.4).
// Every size the frame claims is checked against the sample count before anything is allocated
// or decoded, so a hostile cell cannot make us allocate more than svb16_max_size(n).
#include "escpod/pod5/vbz.hpp"

#include <zstd.h>

#include <algorithm>
#include <string>

#include "pod5/svb16.hpp"

namespace escpod::pod5 {

size_t vbz_max_compressed_size(size_t n_samples) {
  return ZSTD_compressBound(svb16_max_size(n_samples));
}

namespace {

constexpr uint8_t kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* ctx) const { ZSTD_freeCCtx(ctx); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* ctx) const { ZSTD_freeDCtx(ctx); }
};

std::string hex_prefix(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string text;
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    if (i > 0) text += ' ';
    text += kDigits[bytes[i] >> 4];
    text += kDigits[bytes[i] & 0xF];
  }
  return text.empty() ? "nothing" : text;
}

// Checks what the frame header claims against n_samples; returns the svb16 (content) size.
Result<size_t> checked_content_size(std::span<const uint8_t> compressed, size_t n_samples) {
  if (compressed.size() < sizeof(kZstdMagic) ||
      !std::equal(std::begin(kZstdMagic), std::end(kZstdMagic), compressed.begin())) {
    // Also rejects skippable frames, which zstd would report as 0 bytes of content.
    return Status::corrupt("VBZ cell is not a zstd frame: expected magic 28 B5 2F FD, found " +
                           hex_prefix(compressed));
  }
  const size_t max_svb16 = svb16_max_size(n_samples);
  const size_t max_compressed = ZSTD_compressBound(max_svb16);
  if (compressed.size() > max_compressed) {
    return Status::corrupt("VBZ cell has " + std::to_string(compressed.size()) +
                           " bytes, more than the " + std::to_string(max_compressed) +
                           " any zstd frame of " + std::to_string(n_samples) + " samples can take");
  }
  const unsigned long long content = ZSTD_getFrameContentSize(compressed.data(), compressed.size());
  if (content == ZSTD_CONTENTSIZE_ERROR) {
    return Status::corrupt("VBZ zstd frame header is malformed or truncated (cell of " +
                           std::to_string(compressed.size()) + " bytes)");
  }
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
    return Status::corrupt("VBZ zstd frame does not record its content size (POD5 requires it)");
  }
  const size_t min_svb16 = detail::svb16_key_bytes(n_samples) + n_samples;
  if (content < min_svb16 || content > max_svb16) {
    return Status::corrupt("VBZ zstd frame content size is " + std::to_string(content) +
                           " bytes, but the svb16 stream of " + std::to_string(n_samples) +
                           " samples takes " + std::to_string(min_svb16) + " to " +
                           std::to_string(max_svb16));
  }
  return static_cast<size_t>(content);
}

Status zstd_corrupt(const char* what, size_t zstd_code) {
  return Status::corrupt(std::string("VBZ zstd ") + what + ": " + ZSTD_getErrorName(zstd_code));
}

}  // namespace

struct VbzCodec::Impl {
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx;
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx;
  std::unique_ptr<uint8_t[]> scratch;  // svb16 stream; uninitialised, grown only
  size_t scratch_capacity = 0;

  uint8_t* scratch_for(size_t n_bytes) {
    if (n_bytes > scratch_capacity) {
      // Grow by at least half so that slowly growing chunk sizes do not reallocate every call.
      const size_t capacity = std::max(n_bytes, scratch_capacity + scratch_capacity / 2);
      scratch = std::make_unique_for_overwrite<uint8_t[]>(capacity);
      scratch_capacity = capacity;
    }
    return scratch.get();
  }

  Result<ZSTD_DCtx*> decompression_context() {
    if (!dctx) dctx.reset(ZSTD_createDCtx());
    if (!dctx) return Status::internal("out of memory creating a zstd decompression context");
    return dctx.get();
  }

  // Decodes the validated svb16 stream of out.size() samples in `svb16`.
  static Status decode_svb16(std::span<const uint8_t> svb16, std::span<int16_t> out) {
    const detail::Svb16Kernels& kernels = detail::svb16_best_kernels();
    const size_t n_keys = detail::svb16_key_bytes(out.size());
    // checked_content_size() guaranteed svb16.size() >= n_keys.
    const size_t n_data = kernels.data_bytes(svb16.data(), out.size());
    if (svb16.size() - n_keys != n_data) {
      return Status::corrupt("VBZ svb16 stream has " + std::to_string(svb16.size()) +
                             " bytes, but the keys of its " + std::to_string(out.size()) +
                             " samples call for " + std::to_string(n_keys + n_data));
    }
    kernels.decode(svb16.data(), svb16.data() + n_keys, n_data, out.data(), out.size());
    return Status::ok();
  }
};

VbzCodec::VbzCodec() : m_impl(std::make_unique<Impl>()) {}
VbzCodec::~VbzCodec() = default;
VbzCodec::VbzCodec(VbzCodec&&) noexcept = default;
VbzCodec& VbzCodec::operator=(VbzCodec&&) noexcept = default;

Status VbzCodec::compress(std::span<const int16_t> samples, std::vector<uint8_t>& out,
                          int zstd_level) {
  if (!m_impl) m_impl = std::make_unique<Impl>();
  Impl& impl = *m_impl;
  if (!impl.cctx) impl.cctx.reset(ZSTD_createCCtx());
  if (!impl.cctx) return Status::internal("out of memory creating a zstd compression context");
  uint8_t* svb16 = impl.scratch_for(svb16_max_size(samples.size()));
  const size_t svb16_size = detail::svb16_encode(samples, svb16);
  out.resize(ZSTD_compressBound(svb16_size));
  // One-shot compression knows the source size, so the frame records its content size.
  const size_t written =
      ZSTD_compressCCtx(impl.cctx.get(), out.data(), out.size(), svb16, svb16_size, zstd_level);
  if (ZSTD_isError(written)) {
    out.clear();
    return Status::internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(written));
  }
  out.resize(written);
  return Status::ok();
}

Status VbzCodec::decompress(std::span<const uint8_t> compressed, std::span<int16_t> out) {
  if (!m_impl) m_impl = std::make_unique<Impl>();
  Impl& impl = *m_impl;
  ESCPOD_ASSIGN_OR_RETURN(const size_t svb16_size, checked_content_size(compressed, out.size()));
  const size_t frame_size = ZSTD_findFrameCompressedSize(compressed.data(), compressed.size());
  if (ZSTD_isError(frame_size)) return zstd_corrupt("frame is truncated or malformed", frame_size);
  if (frame_size != compressed.size()) {
    return Status::corrupt("VBZ cell has " + std::to_string(compressed.size()) +
                           " bytes, but its zstd frame ends after " + std::to_string(frame_size) +
                           " (trailing bytes)");
  }
  ESCPOD_ASSIGN_OR_RETURN(ZSTD_DCtx* const dctx, impl.decompression_context());
  uint8_t* svb16 = impl.scratch_for(svb16_size);
  const size_t produced =
      ZSTD_decompressDCtx(dctx, svb16, svb16_size, compressed.data(), compressed.size());
  if (ZSTD_isError(produced)) return zstd_corrupt("decompression failed", produced);
  if (produced != svb16_size) {
    return Status::corrupt("VBZ zstd frame declares " + std::to_string(svb16_size) +
                           " bytes of content but holds " + std::to_string(produced));
  }
  return Impl::decode_svb16({svb16, svb16_size}, out);
}

Status VbzCodec::decompress_prefix(std::span<const uint8_t> compressed, size_t n_samples,
                                   std::span<int16_t> out) {
  const size_t n_prefix = out.size();
  if (n_prefix > n_samples) {
    return Status::invalid_argument("VBZ prefix of " + std::to_string(n_prefix) +
                                    " samples asked from a cell of " + std::to_string(n_samples));
  }
  if (n_prefix == n_samples) return decompress(compressed, out);
  if (n_prefix == 0) return Status::ok();
  if (!m_impl) m_impl = std::make_unique<Impl>();
  Impl& impl = *m_impl;
  ESCPOD_ASSIGN_OR_RETURN(const size_t svb16_size, checked_content_size(compressed, n_samples));
  ESCPOD_ASSIGN_OR_RETURN(ZSTD_DCtx* const dctx, impl.decompression_context());

  // The data of the first samples begins only after the keys of all n_samples samples, so the
  // whole key region is decompressed, then as many data bytes as the prefix's keys call for.
  const size_t n_keys = detail::svb16_key_bytes(n_samples);
  uint8_t* svb16 = impl.scratch_for(std::min(svb16_size, n_keys + 2 * n_prefix));
  ZSTD_inBuffer input{compressed.data(), compressed.size(), 0};
  ZSTD_outBuffer output{svb16, 0, 0};
  const auto decompress_until = [&](size_t end) -> Status {
    output.size = end;
    while (output.pos < end) {
      const size_t in_before = input.pos;
      const size_t out_before = output.pos;
      const size_t hint = ZSTD_decompressStream(dctx, &output, &input);
      if (ZSTD_isError(hint)) return zstd_corrupt("decompression failed", hint);
      if (output.pos < end && (hint == 0 || (input.pos == in_before && output.pos == out_before))) {
        return Status::corrupt("VBZ zstd frame ends after " + std::to_string(output.pos) +
                               " bytes of content, but the first " + std::to_string(n_prefix) +
                               " of " + std::to_string(n_samples) + " samples need " +
                               std::to_string(end));
      }
    }
    return Status::ok();
  };
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ESCPOD_RETURN_IF_ERROR(decompress_until(n_keys));
  const detail::Svb16Kernels& kernels = detail::svb16_best_kernels();
  const size_t n_data = kernels.data_bytes(svb16, n_prefix);
  if (n_keys + n_data > svb16_size) {
    return Status::corrupt("VBZ zstd frame content size is " + std::to_string(svb16_size) +
                           " bytes, but the keys of the first " + std::to_string(n_prefix) +
                           " samples already call for " + std::to_string(n_keys + n_data));
  }
  ESCPOD_RETURN_IF_ERROR(decompress_until(n_keys + n_data));
  kernels.decode(svb16, svb16 + n_keys, n_data, out.data(), n_prefix);
  return Status::ok();
}

}  // namespace escpod::pod5
