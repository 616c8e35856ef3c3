// A strict reader of the pickle streams joblib writes (docs/formats.md, "WarpDemuX model files"):
// Python's pickle protocols 2-5 (memo, framing) plus joblib's NumpyArrayWrapper, whose array
// bytes follow it in the stream. It never runs code: the stream is interpreted into a tree of
// plain values, and the only globals it names are an allow-list of the classes a WarpDemuX model
// holds; any other global, an opcode outside the subset below, a malformed argument or a stream
// cut short is kCorrupt naming it and its byte offset.
//
// What each allowed global becomes:
//   warpdemux.models.dtw_svm.DTW_SVM, sklearn.svm._classes.SVC,
//   joblib.numpy_pickle.NumpyArrayWrapper      NEWOBJ with no arguments -> kObject; BUILD with a
//                                              dict sets its fields (once)
//   joblib.numpy_pickle.NumpyArrayWrapper BUILD  reads the array bytes that follow -> kArray,
//                                              which replaces the wrapper on the stack
//   numpy.dtype                                REDUCE (code, align, copy) -> kDtype; BUILD with
//                                              numpy's state tuple sets its byte order
//   numpy.core.multiarray.scalar (or numpy._core.multiarray.scalar)
//                                              REDUCE (dtype, bytes) -> kInt / kFloat / kBool
//   numpy.ndarray                              a value only (the wrapper's `subclass`)
//
// Opcodes: PROTO FRAME STOP MARK POP POP_MARK DUP MEMOIZE BINPUT LONG_BINPUT BINGET LONG_BINGET
// NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 BINFLOAT SHORT_BINUNICODE BINUNICODE
// BINUNICODE8 SHORT_BINBYTES BINBYTES BINBYTES8 EMPTY_TUPLE TUPLE1 TUPLE2 TUPLE3 TUPLE EMPTY_LIST
// APPEND APPENDS EMPTY_DICT SETITEM SETITEMS GLOBAL STACK_GLOBAL NEWOBJ REDUCE BUILD: every one
// joblib writes for these models with any protocol from 2 to 5. Not read: the text protocols'
// opcodes, persistent ids, extension registry codes, out-of-band buffers, NEWOBJ_EX.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::demux::detail {

struct PickleValue {
  enum class Type : uint8_t {
    kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kGlobal, kObject, kDtype, kArray,
  };
  Type type = Type::kNone;
  size_t offset = 0;  // the opcode that made it

  bool boolean = false;
  int64_t integer = 0;
  double number = 0.0;
  // kStr, kBytes: the data; kGlobal, kObject: "module.name" of the class; kDtype: numpy's code
  // ("f8", "i4", ...).
  std::string text;
  std::vector<const PickleValue*> items;                                  // kTuple, kList
  std::vector<std::pair<const PickleValue*, const PickleValue*>> fields;  // kDict, kObject state
  bool built = false;  // kObject: BUILD has set its fields; kDtype: its byte order is set

  // kDtype: the element; kArray: its data, little-endian, C order (F-order arrays are transposed
  // while reading, big-endian ones swapped).
  char kind = 0;        // 'f' float, 'i' signed, 'u' unsigned, 'b' bool
  size_t itemsize = 0;
  char byte_order = '<';
  std::vector<size_t> shape;
  std::vector<uint8_t> data;

  // kDict / kObject: the value stored under the string key `key`, or nullptr.
  const PickleValue* field(std::string_view key) const;
  // Python-ish type name for messages ("int", "str", "numpy array", "SVC", ...).
  std::string type_name() const;
  size_t size() const;  // kArray: number of elements
  // kArray elements converted (the caller has checked kind/itemsize fit).
  double element_double(size_t i) const;
  int64_t element_int(size_t i) const;
};

// The values of one stream, owned together (memo references share them).
struct Pickle {
  std::deque<PickleValue> values;
  const PickleValue* root = nullptr;
  int protocol = 0;
};

// Interprets `bytes` (the whole file, uncompressed); `name` starts every message.
Result<Pickle> read_joblib_pickle(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace escpod::demux::detail
