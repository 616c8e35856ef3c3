// A strict reader of PyTorch state_dict files as `torch.save(model.state_dict(), path)` writes
// them (the zip format PyTorch has used since 1.6): a zip archive of stored (uncompressed)
// entries `<archive>/data.pkl`, `<archive>/data/<key>` (one per tensor storage) and
// `<archive>/version`.
//
// `data.pkl` is interpreted by a minimal pickle (protocol 2) machine that knows only what a
// state_dict of float32 tensors uses: the opcodes PROTO, GLOBAL, MARK, (BIN/LONG_BIN)PUT/GET,
// BININT/BININT1/BININT2, BINUNICODE, NONE/NEWTRUE/NEWFALSE, (EMPTY_)TUPLE/TUPLE1-3, EMPTY_DICT,
// SETITEM(S), BINPERSID, REDUCE, BUILD, STOP; and the globals collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 and torch.FloatStorage (as a persistent-id storage tag only).
// Anything else is refused with an error naming the opcode or global. Nothing is ever called
// or imported: REDUCE is understood only for those two callables, with the argument shapes a
// state_dict has. No copy of the weights is written anywhere.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::nn {

// One tensor of the state_dict, gathered to a contiguous C-order float32 array.
struct TorchTensor {
  std::string name;            // state_dict key, e.g. "encoder.0.conv.weight"
  std::vector<int64_t> shape;  // sizes as saved
  std::vector<float> values;   // product(shape) values, C order
};

struct TorchStateDict {
  std::string source;                // file path (for messages)
  std::vector<TorchTensor> tensors;  // in the file's key order

  // The tensor named `name`, or null.
  const TorchTensor* find(std::string_view name) const;
};

// Reads `path`. Fails with kNotFound / kIoError when the file cannot be read, kCorrupt when the
// zip or pickle is malformed (truncated, bad CRC, a storage entry of the wrong size, a tensor
// view reaching outside its storage), and kUnsupported, naming it, for a compressed entry, an
// opcode or global outside the list above, or a storage type other than float32.
Result<TorchStateDict> load_torch_state_dict(const std::filesystem::path& path);

// Same, from the file's bytes; `label` names the file in messages.
Result<TorchStateDict> parse_torch_state_dict(std::string_view bytes, std::string_view label);

}  // namespace escpod::nn
