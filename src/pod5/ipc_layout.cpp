#include "pod5/ipc_layout.hpp"

#include <arrow/extension_type.h>
#include <arrow/type.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pod5/flat_view.hpp"

namespace escpod::pod5::detail {
namespace {

constexpr uint8_t kRecordBatchHeader = 3;  // MessageHeader union: Schema 1, DictionaryBatch 2, RecordBatch 3

}  // namespace

bool read_ipc_blocks(const uint8_t* file, uint64_t size, std::vector<IpcBlock>* out) {
  out->clear();
  if (!file || size < 18 || std::memcmp(file + size - 6, "ARROW1", 6) != 0) return false;
  const FlatView f(file, size);
  int32_t footer_len;
  if (!f.read(size - 10, &footer_len) || footer_len <= 0 || static_cast<uint64_t>(footer_len) > size - 10) return false;
  size_t root, pos, vec;
  uint32_t n_blocks;
  if (!f.root(size - 10 - static_cast<size_t>(footer_len), &root) || !f.field(root, 3, &pos) || pos == 0 ||
      !f.deref(pos, &vec) || !f.read(vec, &n_blocks)) {
    return false;
  }
  for (uint32_t b = 0; b < n_blocks; ++b) {
    const size_t at = vec + 4 + 24 * static_cast<size_t>(b);  // {int64 offset, int32 meta, pad, int64 body}
    int64_t offset, body;
    int32_t meta;
    if (!f.read(at, &offset) || !f.read(at + 8, &meta) || !f.read(at + 16, &body)) return false;
    if (offset < 0 || meta < 8 || body < 0 || static_cast<uint64_t>(offset) > size ||
        static_cast<uint64_t>(meta) + static_cast<uint64_t>(body) > size - static_cast<uint64_t>(offset)) {
      return false;
    }
    out->push_back({static_cast<uint64_t>(offset), static_cast<uint32_t>(meta), static_cast<uint64_t>(body)});
  }
  return true;
}

bool parse_record_batch_header(const uint8_t* meta, size_t size, uint64_t body_size, RecordBatchHeader* out,
                               std::string* why) {
  const FlatView f(meta, size);
  uint32_t word = 0;
  f.read(0, &word);
  const size_t start = word == 0xFFFFFFFFu ? 8 : 4;  // continuation marker, then the length
  size_t message, type_pos, header_pos, rb, len_pos, nodes_pos, buffers_pos, compression_pos, nodes, buffers;
  uint8_t type = 0;
  uint32_t n_nodes = 0, n_buffers = 0;
  if (!f.root(start, &message) || !f.field(message, 1, &type_pos) || type_pos == 0 || !f.read(type_pos, &type) ||
      type != kRecordBatchHeader || !f.field(message, 2, &header_pos) || header_pos == 0 ||
      !f.deref(header_pos, &rb) || !f.field(rb, 0, &len_pos) || len_pos == 0 || !f.read(len_pos, &out->length) ||
      !f.field(rb, 1, &nodes_pos) || nodes_pos == 0 || !f.deref(nodes_pos, &nodes) || !f.read(nodes, &n_nodes) ||
      !f.field(rb, 2, &buffers_pos) || buffers_pos == 0 || !f.deref(buffers_pos, &buffers) ||
      !f.read(buffers, &n_buffers) || !f.field(rb, 3, &compression_pos) || out->length < 0) {
    *why = "damaged record batch header";
    return false;
  }
  if (compression_pos != 0) {
    *why = "compressed IPC body (POD5 stores none)";
    return false;
  }
  out->node_length.resize(n_nodes);
  for (uint32_t i = 0; i < n_nodes; ++i) {
    if (!f.read(nodes + 4 + 16 * static_cast<size_t>(i), &out->node_length[i]) || out->node_length[i] < 0) {
      *why = "damaged field node " + std::to_string(i);
      return false;
    }
  }
  out->buffers.resize(n_buffers);
  for (uint32_t i = 0; i < n_buffers; ++i) {
    int64_t off, len;
    const size_t at = buffers + 4 + 16 * static_cast<size_t>(i);
    if (!f.read(at, &off) || !f.read(at + 8, &len) || off < 0 || len < 0 || static_cast<uint64_t>(off) > body_size ||
        static_cast<uint64_t>(len) > body_size - static_cast<uint64_t>(off)) {
      *why = "buffer " + std::to_string(i) + " outside the batch body";
      return false;
    }
    out->buffers[i] = {static_cast<uint64_t>(off), static_cast<uint64_t>(len)};
  }
  return true;
}

const arrow::DataType& storage_type(const arrow::DataType& type) {
  if (type.id() == arrow::Type::EXTENSION) return *static_cast<const arrow::ExtensionType&>(type).storage_type();
  return type;
}

bool count_ipc_layout(const arrow::DataType& type, int* nodes, int* buffers) {
  const arrow::DataType& t = storage_type(type);
  *nodes += 1;
  switch (t.id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      *buffers += 3;
      return true;
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::MAP:
      *buffers += 2;
      return count_ipc_layout(*t.field(0)->type(), nodes, buffers);
    case arrow::Type::FIXED_SIZE_LIST:
      *buffers += 1;
      return count_ipc_layout(*t.field(0)->type(), nodes, buffers);
    case arrow::Type::STRUCT:
      *buffers += 1;
      for (const auto& f : t.fields()) {
        if (!count_ipc_layout(*f->type(), nodes, buffers)) return false;
      }
      return true;
    case arrow::Type::BOOL:
    case arrow::Type::DICTIONARY:
      *buffers += 2;
      return true;
    default:
      if (!dynamic_cast<const arrow::FixedWidthType*>(&t)) return false;
      *buffers += 2;
      return true;
  }
}

Status pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& where) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::io_error(where + ": cannot read at offset " + std::to_string(offset) +
                              (got < 0 ? std::string(": ") + std::strerror(errno) : std::string(": the file shrank")));
    }
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return Status::ok();
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(o.m_fd, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (m_fd >= 0) ::close(m_fd);
}

}  // namespace escpod::pod5::detail
