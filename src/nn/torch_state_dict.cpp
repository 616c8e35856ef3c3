// Strict PyTorch state_dict reader: a stored-entry zip reader and a restricted pickle machine.
// See escpod/nn/torch_state_dict.hpp for the accepted subset.
#include "escpod/nn/torch_state_dict.hpp"

#include <zlib.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <fmt/format.h>

namespace escpod::nn {
namespace {

static_assert(std::endian::native == std::endian::little, "tensor storages are read as little-endian floats");

// ---- zip ---------------------------------------------------------------------------------------

constexpr uint32_t kEocdSig = 0x06054b50, kZip64LocatorSig = 0x07064b50, kZip64EocdSig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;

struct ZipEntry {
  std::string name;
  std::string_view data;  // stored bytes inside the archive
};

class ByteReader {
 public:
  ByteReader(std::string_view bytes, std::string_view label) : m_bytes(bytes), m_label(label) {}
  bool has(uint64_t at, uint64_t n) const { return at <= m_bytes.size() && n <= m_bytes.size() - at; }
  uint64_t le(uint64_t at, int width) const {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(m_bytes[at + static_cast<uint64_t>(i)]);
    return v;
  }
  std::string_view view(uint64_t at, uint64_t n) const { return m_bytes.substr(at, n); }
  uint64_t size() const { return m_bytes.size(); }
  Status corrupt(std::string_view what) const { return Status::corrupt(fmt::format("{}: not a PyTorch zip archive: {}", m_label, what)); }

 private:
  std::string_view m_bytes;
  std::string_view m_label;
};

struct CentralDirectory {
  uint64_t offset = 0, count = 0;
};

// The end-of-central-directory record, and its zip64 twin when torch wrote one.
Result<CentralDirectory> find_central_directory(const ByteReader& r) {
  if (r.size() < 22) return r.corrupt("shorter than an end-of-central-directory record");
  uint64_t eocd = r.size() - 22;
  const uint64_t floor = r.size() > 22 + 65535 ? r.size() - 22 - 65535 : 0;
  while (r.le(eocd, 4) != kEocdSig) {
    if (eocd == floor) return r.corrupt("no end-of-central-directory record");
    --eocd;
  }
  CentralDirectory cd{r.le(eocd + 16, 4), r.le(eocd + 10, 2)};
  if (eocd >= 20 && r.le(eocd - 20, 4) == kZip64LocatorSig) {
    const uint64_t z64 = r.le(eocd - 20 + 8, 8);
    if (!r.has(z64, 56) || r.le(z64, 4) != kZip64EocdSig) return r.corrupt("bad zip64 end-of-central-directory record");
    cd.count = r.le(z64 + 32, 8);
    cd.offset = r.le(z64 + 48, 8);
  }
  return cd;
}

// Sizes and offset of a central entry, reading the zip64 extra field where the 32-bit ones are
// saturated.
Status apply_zip64_extra(const ByteReader& r, uint64_t extra, uint64_t extra_len, uint64_t& usize,
                         uint64_t& csize, uint64_t& local) {
  for (uint64_t at = extra; at + 4 <= extra + extra_len;) {
    const uint64_t id = r.le(at, 2), len = r.le(at + 2, 2);
    if (!r.has(at + 4, len)) return r.corrupt("truncated extra field");
    if (id == 1) {
      uint64_t p = at + 4;
      for (uint64_t* v : {&usize, &csize, &local}) {
        if (*v != 0xFFFFFFFFu) continue;
        if (p + 8 > at + 4 + len) return r.corrupt("short zip64 extra field");
        *v = r.le(p, 8);
        p += 8;
      }
    }
    at += 4 + len;
  }
  return Status::ok();
}

Result<std::vector<ZipEntry>> read_zip(std::string_view bytes, std::string_view label) {
  const ByteReader r(bytes, label);
  ESCPOD_ASSIGN_OR_RETURN(CentralDirectory cd, find_central_directory(r));
  std::vector<ZipEntry> entries;
  uint64_t at = cd.offset;
  for (uint64_t i = 0; i < cd.count; ++i) {
    if (!r.has(at, 46) || r.le(at, 4) != kCentralSig) return r.corrupt(fmt::format("central directory entry {} is damaged", i));
    const uint64_t method = r.le(at + 10, 2), crc = r.le(at + 16, 4);
    uint64_t csize = r.le(at + 20, 4), usize = r.le(at + 24, 4), local = r.le(at + 42, 4);
    const uint64_t name_len = r.le(at + 28, 2), extra_len = r.le(at + 30, 2), comment_len = r.le(at + 32, 2);
    if (!r.has(at + 46, name_len + extra_len + comment_len)) return r.corrupt("truncated central directory");
    ZipEntry e;
    e.name = std::string(r.view(at + 46, name_len));
    ESCPOD_RETURN_IF_ERROR(apply_zip64_extra(r, at + 46 + name_len, extra_len, usize, csize, local));
    if (method != 0) {
      return Status::unsupported(fmt::format("{}: entry '{}' is compressed (method {}); torch.save stores entries uncompressed",
                                             label, e.name, method));
    }
    if (csize != usize) return r.corrupt(fmt::format("entry '{}': stored sizes differ", e.name));
    if (!r.has(local, 30) || r.le(local, 4) != kLocalSig) return r.corrupt(fmt::format("entry '{}': bad local header", e.name));
    const uint64_t data = local + 30 + r.le(local + 26, 2) + r.le(local + 28, 2);
    if (!r.has(data, usize)) return r.corrupt(fmt::format("entry '{}' runs past the end of the file", e.name));
    e.data = r.view(data, usize);
    const uLong got = crc32_z(0L, reinterpret_cast<const Bytef*>(e.data.data()), e.data.size());
    if (got != crc) return r.corrupt(fmt::format("entry '{}': CRC mismatch", e.name));
    entries.push_back(std::move(e));
    at += 46 + name_len + extra_len + comment_len;
  }
  return entries;
}

// ---- pickle ------------------------------------------------------------------------------------

struct Obj;
using Ref = std::shared_ptr<Obj>;

// The values a state_dict pickle builds. `kGlobal` holds "module name"; `kStorage` the storage
// key and element count; `kTensor` an index into the output tensors.
struct Obj {
  enum class Kind { kMark, kNone, kBool, kInt, kStr, kTuple, kDict, kOrderedDict, kGlobal, kStorage, kTensor };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  std::string s;
  std::vector<Ref> items;                       // tuple items
  std::vector<std::pair<Ref, Ref>> entries;     // dict entries, insertion order
};

Ref make(Obj::Kind k) {
  auto o = std::make_shared<Obj>();
  o->kind = k;
  return o;
}
Ref make_int(int64_t v) {
  Ref o = make(Obj::Kind::kInt);
  o->i = v;
  return o;
}
Ref make_str(Obj::Kind k, std::string s) {
  Ref o = make(k);
  o->s = std::move(s);
  return o;
}

class Unpickler {
 public:
  Unpickler(std::string_view pkl, std::string_view label, const std::map<std::string, std::string_view>& storages,
            TorchStateDict& out)
      : m_pkl(pkl), m_label(label), m_storages(storages), m_out(out) {}

  Status run() {
    while (true) {
      if (m_pos >= m_pkl.size()) return bad("ends before STOP");
      const auto op = static_cast<unsigned char>(m_pkl[m_pos++]);
      if (op == '.') break;
      ESCPOD_RETURN_IF_ERROR(step(op));
    }
    if (m_stack.size() != 1) return bad("stack does not hold exactly the result at STOP");
    return collect(m_stack.back());
  }

 private:
  Status bad(std::string_view what) const {
    return Status::corrupt(fmt::format("{}: data.pkl at byte {}: {}", m_label, m_pos, what));
  }
  Status refuse(std::string_view what) const {
    return Status::unsupported(fmt::format("{}: data.pkl at byte {}: {} is not part of a float32 state_dict; refused",
                                           m_label, m_pos, what));
  }
  Result<uint64_t> arg(int width) {
    if (m_pos + static_cast<size_t>(width) > m_pkl.size()) return bad("truncated argument");
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(m_pkl[m_pos + static_cast<size_t>(i)]);
    m_pos += static_cast<size_t>(width);
    return v;
  }
  Result<std::string> line() {
    const size_t end = m_pkl.find('\n', m_pos);
    if (end == std::string_view::npos) return bad("unterminated GLOBAL");
    std::string s(m_pkl.substr(m_pos, end - m_pos));
    m_pos = end + 1;
    return s;
  }
  Result<Ref> pop() {
    if (m_stack.empty() || m_stack.back()->kind == Obj::Kind::kMark) return bad("stack underflow");
    Ref r = m_stack.back();
    m_stack.pop_back();
    return r;
  }
  // Items above the topmost MARK, which is removed.
  Result<std::vector<Ref>> pop_to_mark() {
    size_t m = m_stack.size();
    while (m > 0 && m_stack[m - 1]->kind != Obj::Kind::kMark) --m;
    if (m == 0) return bad("no MARK on the stack");
    std::vector<Ref> items(m_stack.begin() + static_cast<std::ptrdiff_t>(m), m_stack.end());
    m_stack.resize(m - 1);
    return items;
  }
  Status tuple_of(size_t n) {
    if (m_stack.size() < n) return bad("stack underflow");
    Ref t = make(Obj::Kind::kTuple);
    t->items.assign(m_stack.end() - static_cast<std::ptrdiff_t>(n), m_stack.end());
    for (const Ref& r : t->items) {
      if (r->kind == Obj::Kind::kMark) return bad("MARK inside a fixed-size tuple");
    }
    m_stack.resize(m_stack.size() - n);
    m_stack.push_back(t);
    return Status::ok();
  }
  Status set_items(Ref dict, const std::vector<Ref>& kv) {
    if (dict->kind != Obj::Kind::kDict && dict->kind != Obj::Kind::kOrderedDict) return bad("SETITEM on a non-dict");
    if (kv.size() % 2 != 0) return bad("odd number of items for SETITEMS");
    for (size_t i = 0; i < kv.size(); i += 2) dict->entries.emplace_back(kv[i], kv[i + 1]);
    return Status::ok();
  }
  Status memo_put(uint64_t index) {
    if (m_stack.empty()) return bad("PUT on an empty stack");
    m_memo[index] = m_stack.back();
    return Status::ok();
  }
  Status memo_get(uint64_t index) {
    auto it = m_memo.find(index);
    if (it == m_memo.end()) return bad(fmt::format("GET of unset memo slot {}", index));
    m_stack.push_back(it->second);
    return Status::ok();
  }

  Status step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(1));
        if (v != 2) return refuse(fmt::format("pickle protocol {}", v));
        return Status::ok();
      }
      case 'c': return global();
      case '(': m_stack.push_back(make(Obj::Kind::kMark)); return Status::ok();
      case 'q': { ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(1)); return memo_put(v); }
      case 'r': { ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(4)); return memo_put(v); }
      case 'h': { ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(1)); return memo_get(v); }
      case 'j': { ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(4)); return memo_get(v); }
      case 'K': { ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(1)); m_stack.push_back(make_int(static_cast<int64_t>(v))); return Status::ok(); }
      case 'M': { ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(2)); m_stack.push_back(make_int(static_cast<int64_t>(v))); return Status::ok(); }
      case 'J': {
        ESCPOD_ASSIGN_OR_RETURN(uint64_t v, arg(4));
        m_stack.push_back(make_int(static_cast<int32_t>(static_cast<uint32_t>(v))));
        return Status::ok();
      }
      case 'X': {
        ESCPOD_ASSIGN_OR_RETURN(uint64_t n, arg(4));
        if (n > m_pkl.size() - m_pos) return bad("truncated string");
        m_stack.push_back(make_str(Obj::Kind::kStr, std::string(m_pkl.substr(m_pos, n))));
        m_pos += n;
        return Status::ok();
      }
      case 'N': m_stack.push_back(make(Obj::Kind::kNone)); return Status::ok();
      case 0x88:
      case 0x89: {
        Ref b = make(Obj::Kind::kBool);
        b->i = op == 0x88 ? 1 : 0;
        m_stack.push_back(b);
        return Status::ok();
      }
      case ')': m_stack.push_back(make(Obj::Kind::kTuple)); return Status::ok();
      case 't': {
        ESCPOD_ASSIGN_OR_RETURN(std::vector<Ref> items, pop_to_mark());
        Ref t = make(Obj::Kind::kTuple);
        t->items = std::move(items);
        m_stack.push_back(t);
        return Status::ok();
      }
      case 0x85: return tuple_of(1);
      case 0x86: return tuple_of(2);
      case 0x87: return tuple_of(3);
      case '}': m_stack.push_back(make(Obj::Kind::kDict)); return Status::ok();
      case 's': {
        ESCPOD_ASSIGN_OR_RETURN(Ref v, pop());
        ESCPOD_ASSIGN_OR_RETURN(Ref k, pop());
        if (m_stack.empty()) return bad("SETITEM without a dict");
        return set_items(m_stack.back(), {k, v});
      }
      case 'u': {
        ESCPOD_ASSIGN_OR_RETURN(std::vector<Ref> kv, pop_to_mark());
        if (m_stack.empty()) return bad("SETITEMS without a dict");
        return set_items(m_stack.back(), kv);
      }
      case 'Q': return persistent_id();
      case 'R': return reduce();
      case 'b': return build();
      default: break;
    }
    --m_pos;
    return refuse(fmt::format("pickle opcode 0x{:02x}{}", op,
                              op >= 0x20 && op < 0x7f ? fmt::format(" ('{}')", static_cast<char>(op)) : std::string()));
  }

  Status global() {
    ESCPOD_ASSIGN_OR_RETURN(std::string module, line());
    ESCPOD_ASSIGN_OR_RETURN(std::string name, line());
    const std::string full = module + "." + name;
    if (full != "collections.OrderedDict" && full != "torch._utils._rebuild_tensor_v2" && full != "torch.FloatStorage") {
      return refuse(fmt::format("global {}", full));
    }
    m_stack.push_back(make_str(Obj::Kind::kGlobal, full));
    return Status::ok();
  }

  // ('storage', torch.FloatStorage, key, location, numel) -> a storage reference.
  Status persistent_id() {
    ESCPOD_ASSIGN_OR_RETURN(Ref pid, pop());
    const auto& it = pid->items;
    if (pid->kind != Obj::Kind::kTuple || it.size() != 5 || it[0]->kind != Obj::Kind::kStr || it[0]->s != "storage" ||
        it[1]->kind != Obj::Kind::kGlobal || it[2]->kind != Obj::Kind::kStr || it[3]->kind != Obj::Kind::kStr ||
        it[4]->kind != Obj::Kind::kInt) {
      return bad("persistent id is not ('storage', type, key, location, numel)");
    }
    if (it[1]->s != "torch.FloatStorage") return refuse(fmt::format("storage type {}", it[1]->s));
    auto entry = m_storages.find(it[2]->s);
    if (entry == m_storages.end()) return bad(fmt::format("storage '{}' has no data/{} entry", it[2]->s, it[2]->s));
    if (it[4]->i < 0 || entry->second.size() != static_cast<uint64_t>(it[4]->i) * sizeof(float)) {
      return bad(fmt::format("storage '{}' holds {} bytes, its record says {} floats", it[2]->s, entry->second.size(), it[4]->i));
    }
    Ref s = make_str(Obj::Kind::kStorage, it[2]->s);
    s->i = it[4]->i;
    m_stack.push_back(s);
    return Status::ok();
  }

  Status reduce() {
    ESCPOD_ASSIGN_OR_RETURN(Ref args, pop());
    ESCPOD_ASSIGN_OR_RETURN(Ref fn, pop());
    if (fn->kind != Obj::Kind::kGlobal || args->kind != Obj::Kind::kTuple) return bad("REDUCE of a non-callable");
    if (fn->s == "collections.OrderedDict") {
      if (!args->items.empty()) return refuse("OrderedDict(...) with arguments");
      m_stack.push_back(make(Obj::Kind::kOrderedDict));
      return Status::ok();
    }
    if (fn->s == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(*args);
    return refuse(fmt::format("calling {}", fn->s));
  }

  static Result<std::vector<int64_t>> int_tuple(const Ref& t) {
    if (t->kind != Obj::Kind::kTuple) return Status::corrupt("not a tuple");
    std::vector<int64_t> v;
    for (const Ref& r : t->items) {
      if (r->kind != Obj::Kind::kInt || r->i < 0) return Status::corrupt("not a tuple of non-negative integers");
      v.push_back(r->i);
    }
    return v;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata]):
  // gathers the strided view into a contiguous tensor after checking it stays inside the storage.
  Status rebuild_tensor(const Obj& args) {
    const auto& a = args.items;
    if (a.size() < 6 || a.size() > 7 || a[0]->kind != Obj::Kind::kStorage || a[1]->kind != Obj::Kind::kInt ||
        a[4]->kind != Obj::Kind::kBool || a[5]->kind != Obj::Kind::kOrderedDict || !a[5]->entries.empty()) {
      return bad("_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, requires_grad, {})");
    }
    if (a.size() == 7 && a[6]->kind != Obj::Kind::kNone && !(a[6]->kind == Obj::Kind::kDict && a[6]->entries.empty())) {
      return refuse("tensor metadata");
    }
    auto size = int_tuple(a[2]);
    auto stride = int_tuple(a[3]);
    if (!size.is_ok() || !stride.is_ok() || size->size() != stride->size()) return bad("bad tensor size/stride tuples");
    const int64_t offset = a[1]->i, numel_storage = a[0]->i;
    int64_t last = offset, count = 1;
    for (size_t d = 0; d < size->size(); ++d) {
      // Bounded before multiplying: no view of a state_dict is larger than its storage.
      if ((*size)[d] > numel_storage || (*stride)[d] > numel_storage ||
          ((*size)[d] > 0 && count > numel_storage / (*size)[d])) {
        return bad(fmt::format("tensor view of size/stride beyond its storage of {} floats", numel_storage));
      }
      count *= (*size)[d];
      if ((*size)[d] > 0) last += ((*size)[d] - 1) * (*stride)[d];
    }
    if (offset < 0 || (count > 0 && last >= numel_storage)) {
      return bad(fmt::format("tensor view (offset {}, last element {}) reaches outside its storage of {} floats", offset, last,
                             numel_storage));
    }
    TorchTensor t;
    t.shape = *size;
    t.values.resize(static_cast<size_t>(count));
    const char* base = m_storages.at(a[0]->s).data();
    std::vector<int64_t> idx(size->size(), 0);
    for (int64_t k = 0; k < count; ++k) {
      int64_t src = offset;
      for (size_t d = 0; d < idx.size(); ++d) src += idx[d] * (*stride)[d];
      std::memcpy(&t.values[static_cast<size_t>(k)], base + src * static_cast<int64_t>(sizeof(float)), sizeof(float));
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < (*size)[d]) break;
        idx[d] = 0;
      }
    }
    m_out.tensors.push_back(std::move(t));
    Ref r = make(Obj::Kind::kTensor);
    r->i = static_cast<int64_t>(m_out.tensors.size()) - 1;
    m_stack.push_back(r);
    return Status::ok();
  }

  // BUILD on the state_dict sets its `_metadata` attribute (module versions): accepted and dropped.
  Status build() {
    ESCPOD_ASSIGN_OR_RETURN(Ref state, pop());
    if (m_stack.empty() || m_stack.back()->kind != Obj::Kind::kOrderedDict || state->kind != Obj::Kind::kDict) {
      return refuse("BUILD other than setting a state_dict's _metadata");
    }
    for (const auto& [k, v] : state->entries) {
      if (k->kind != Obj::Kind::kStr || k->s != "_metadata") return refuse(fmt::format("state_dict attribute '{}'", k->s));
    }
    return Status::ok();
  }

  // The result must be an OrderedDict of str -> tensor; names the tensors in key order.
  Status collect(const Ref& root) {
    if (root->kind != Obj::Kind::kOrderedDict) return bad("the pickled object is not an OrderedDict (a state_dict)");
    std::vector<TorchTensor> ordered;
    for (const auto& [k, v] : root->entries) {
      if (k->kind != Obj::Kind::kStr || v->kind != Obj::Kind::kTensor) return bad("a state_dict entry is not str -> tensor");
      TorchTensor t = m_out.tensors[static_cast<size_t>(v->i)];
      t.name = k->s;
      ordered.push_back(std::move(t));
    }
    m_out.tensors = std::move(ordered);
    return Status::ok();
  }

  std::string_view m_pkl;
  std::string_view m_label;
  const std::map<std::string, std::string_view>& m_storages;
  TorchStateDict& m_out;
  size_t m_pos = 0;
  std::vector<Ref> m_stack;
  std::map<uint64_t, Ref> m_memo;
};

}  // namespace

const TorchTensor* TorchStateDict::find(std::string_view name) const {
  for (const TorchTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<TorchStateDict> parse_torch_state_dict(std::string_view bytes, std::string_view label) {
  ESCPOD_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, read_zip(bytes, label));
  // The archive folder is the one holding data.pkl (torch names it after the file stem).
  std::string prefix;
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : entries) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash) == "/data.pkl") {
      if (pkl) return Status::corrupt(fmt::format("{}: more than one data.pkl", label));
      pkl = &e;
      prefix = e.name.substr(0, slash + 1);
    }
  }
  if (!pkl) return Status::corrupt(fmt::format("{}: no <archive>/data.pkl entry (not a torch.save zip file)", label));
  std::map<std::string, std::string_view> storages;
  const std::string data_dir = prefix + "data/";
  for (const ZipEntry& e : entries) {
    if (e.name.rfind(data_dir, 0) == 0) storages.emplace(e.name.substr(data_dir.size()), e.data);
  }
  TorchStateDict out;
  out.source = std::string(label);
  Unpickler u(pkl->data, label, storages, out);
  ESCPOD_RETURN_IF_ERROR(u.run());
  return out;
}

Result<TorchStateDict> load_torch_state_dict(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Status::not_found(fmt::format("{}: no such file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::io_error(fmt::format("{}: read failed", path.string()));
  const std::string bytes = buf.str();
  return parse_torch_state_dict(bytes, path.string());
}

}  // namespace escpod::nn
