#pragma once
// Locating record batches and their buffers in an Arrow IPC file without Arrow's reader: the
// footer's blocks, one message's RecordBatch header, and how many field nodes and buffers a
// column of a given type takes (Arrow's IPC format, Message.fbs / File.fbs). Random access to a
// few rows of a POD5 table reads only those bytes (pod5/reads_rows.hpp, the signal batch views
// of FileReader), with pread.

#include <arrow/type_fwd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::pod5::detail {

struct IpcBlock {
  uint64_t offset = 0;     // of the message, in the IPC file
  uint32_t meta_size = 0;  // continuation marker, length, flatbuffer and padding
  uint64_t body_size = 0;  // the body follows the metadata
};

// The record batch blocks listed in the footer of the IPC file held in [file, file + size).
// False when the footer is damaged or a block lies outside the file.
bool read_ipc_blocks(const uint8_t* file, uint64_t size, std::vector<IpcBlock>* out);

struct RecordBatchHeader {
  int64_t length = 0;                                  // rows
  std::vector<int64_t> node_length;                    // values of each field node
  std::vector<std::pair<uint64_t, uint64_t>> buffers;  // (offset in the body, length)
};

// Parses one message's metadata as stored (continuation marker, length, flatbuffer) into the
// RecordBatch header it must hold, each buffer checked to lie in a body of `body_size` bytes.
// On failure *why says what is wrong. A compressed body is refused (POD5 writes none).
bool parse_record_batch_header(const uint8_t* meta, size_t size, uint64_t body_size, RecordBatchHeader* out,
                               std::string* why);

// The stored type of an extension type (the type itself otherwise).
const arrow::DataType& storage_type(const arrow::DataType& type);
// Adds the field nodes and buffers a column of `type` takes in a RecordBatch message to *nodes
// and *buffers. False for types a POD5 table never holds.
bool count_ipc_layout(const arrow::DataType& type, int* nodes, int* buffers);

// pread of exactly n bytes (errors name `where` and the offset).
Status pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& where);

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : m_fd(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : m_fd(std::exchange(o.m_fd, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return m_fd; }

 private:
  int m_fd = -1;
};

}  // namespace escpod::pod5::detail
