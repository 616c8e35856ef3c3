// The strict pickle machine of pickle.hpp: a stack, a mark stack and a memo over values in an
// arena, one function per opcode family. Nothing is constructed but the plain values listed there.
#include "demux/pickle.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace escpod::demux::detail {

namespace {

using Type = PickleValue::Type;

// Bounds that keep a hostile stream from exhausting memory before it fails (the largest shipped
// model holds ~50,000 values and 3.5 MB of arrays).
constexpr size_t kMaxValues = 50'000'000;
constexpr size_t kMaxStack = 10'000'000;
constexpr size_t kMaxMemo = 10'000'000;
constexpr size_t kMaxArrayDims = 32;

std::string hex_byte(uint8_t b) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

// The classes a WarpDemuX model file may name, and what they become.
enum class Global : uint8_t { kModelObject, kArrayWrapper, kNdarray, kDtype, kScalar };

bool allowed_global(const std::string& name, Global& out) {
  static const std::pair<const char*, Global> kAllowed[] = {
      {"warpdemux.models.dtw_svm.DTW_SVM", Global::kModelObject},
      {"sklearn.svm._classes.SVC", Global::kModelObject},
      {"joblib.numpy_pickle.NumpyArrayWrapper", Global::kArrayWrapper},
      {"numpy.ndarray", Global::kNdarray},
      {"numpy.dtype", Global::kDtype},
      {"numpy.core.multiarray.scalar", Global::kScalar},
      {"numpy._core.multiarray.scalar", Global::kScalar},
  };
  for (const auto& [n, g] : kAllowed) {
    if (name == n) {
      out = g;
      return true;
    }
  }
  return false;
}

// numpy's dtype code ("f8", "<i4", "b1", "?") -> kind and item size; false for anything else
// (object, string, structured, complex, datetime dtypes).
bool parse_dtype_code(std::string code, char& kind, size_t& itemsize, char& order) {
  order = '=';
  if (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=')) {
    order = code[0];
    code.erase(0, 1);
  }
  if (code == "?") code = "b1";
  if (code.size() != 2) return false;
  kind = code[0];
  itemsize = static_cast<size_t>(code[1] - '0');
  switch (kind) {
    case 'f': return itemsize == 4 || itemsize == 8;
    case 'i':
    case 'u': return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
    case 'b': return itemsize == 1;
    default: return false;
  }
}

class Machine {
 public:
  Machine(std::span<const uint8_t> bytes, const std::string& name) : m_in(bytes), m_name(name) {}

  Result<Pickle> run() {
    while (true) {
      if (m_pos >= m_in.size()) return fail(m_pos, "the stream ends before its STOP opcode (file cut short?)");
      const size_t at = m_pos;
      ESCPOD_ASSIGN_OR_RETURN(const uint8_t op, read_u8(at));
      if (op == '.') break;
      ESCPOD_RETURN_IF_ERROR(step(op, at));
    }
    if (m_stack.size() != 1 || !m_marks.empty())
      return fail(m_pos - 1, "STOP with " + std::to_string(m_stack.size()) +
                                 " values on the stack (expected exactly one)");
    if (m_frame_end > m_pos) return fail(m_pos, "STOP inside a frame with bytes left in it");
    if (m_pos != m_in.size())
      return fail(m_pos, std::to_string(m_in.size() - m_pos) + " bytes after the pickle's STOP");
    m_out.root = m_stack.back();
    return std::move(m_out);
  }

 private:
  Status fail(size_t at, const std::string& what) const {
    return Status::corrupt(m_name + ": not a WarpDemuX model pickle: " + what + " (byte offset " +
                           std::to_string(at) + ")");
  }

  // ---- input ----------------------------------------------------------------------------------

  // Bytes inside the current frame may not be read past its end (Python's rule).
  Status take(size_t n, size_t at, const uint8_t*& out) {
    if (n > m_in.size() - m_pos) return fail(at, "the stream ends inside an opcode's argument (file cut short?)");
    if (m_pos < m_frame_end && n > m_frame_end - m_pos)
      return fail(at, "an opcode's argument runs past the end of its frame");
    out = m_in.data() + m_pos;
    m_pos += n;
    return Status::ok();
  }
  Result<uint8_t> read_u8(size_t at) {
    const uint8_t* p = nullptr;
    ESCPOD_RETURN_IF_ERROR(take(1, at, p));
    return *p;
  }
  Result<uint64_t> read_le(size_t n, size_t at) {
    const uint8_t* p = nullptr;
    ESCPOD_RETURN_IF_ERROR(take(n, at, p));
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
  }
  Result<std::string> read_text(size_t n, size_t at) {
    const uint8_t* p = nullptr;
    ESCPOD_RETURN_IF_ERROR(take(n, at, p));
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  Result<std::string> read_line(size_t at) {
    const uint8_t* start = m_in.data() + m_pos;
    const size_t limit = (m_pos < m_frame_end ? m_frame_end : m_in.size()) - m_pos;
    const void* nl = std::memchr(start, '\n', limit);
    if (nl == nullptr) return fail(at, "a GLOBAL name without its newline");
    const size_t n = static_cast<size_t>(static_cast<const uint8_t*>(nl) - start);
    m_pos += n + 1;
    return std::string(reinterpret_cast<const char*>(start), n);
  }

  // ---- values ---------------------------------------------------------------------------------

  Result<PickleValue*> make(Type t, size_t at) {
    if (m_out.values.size() >= kMaxValues) return fail(at, "more values than any model holds");
    PickleValue& v = m_out.values.emplace_back();
    v.type = t;
    v.offset = at;
    return &v;
  }
  Status push(const PickleValue* v, size_t at) {
    if (m_stack.size() >= kMaxStack) return fail(at, "the stack grows past any model's size");
    m_stack.push_back(v);
    return Status::ok();
  }
  Status push_new(Type t, size_t at, PickleValue** out = nullptr) {
    ESCPOD_ASSIGN_OR_RETURN(PickleValue * v, make(t, at));
    if (out) *out = v;
    return push(v, at);
  }
  Result<const PickleValue*> pop(size_t at, const char* op) {
    if (m_stack.size() <= stack_floor())
      return fail(at, std::string(op) + " on an empty stack (or above a MARK it may not pass)");
    const PickleValue* v = m_stack.back();
    m_stack.pop_back();
    return v;
  }
  Result<const PickleValue*> top(size_t at, const char* op) const {
    if (m_stack.size() <= stack_floor()) return fail(at, std::string(op) + " on an empty stack");
    return m_stack.back();
  }
  size_t stack_floor() const { return m_marks.empty() ? 0 : m_marks.back(); }
  // The values above the last MARK, removing them and the mark.
  Result<std::vector<const PickleValue*>> pop_mark(size_t at, const char* op) {
    if (m_marks.empty()) return fail(at, std::string(op) + " without a MARK");
    const size_t k = m_marks.back();
    m_marks.pop_back();
    std::vector<const PickleValue*> items(m_stack.begin() + static_cast<std::ptrdiff_t>(k), m_stack.end());
    m_stack.resize(k);
    return items;
  }
  // Values are mutated only through the stack/memo, which hold them const; the arena owns them.
  static PickleValue* mut(const PickleValue* v) { return const_cast<PickleValue*>(v); }

  // ---- opcodes --------------------------------------------------------------------------------

  Status step(uint8_t op, size_t at) {
    switch (op) {
      case 0x80: return protocol(at);
      case 0x95: return frame(at);
      case '(': return mark(at);
      case '0': return pop(at, "POP").status();
      case '1': return pop_mark(at, "POP_MARK").status();
      case '2': return dup(at);
      case 0x94: return memo_put(m_memo_next, at);
      case 'q': return memo_put_arg(1, at);
      case 'r': return memo_put_arg(4, at);
      case 'h': return memo_get(1, at);
      case 'j': return memo_get(4, at);
      case 'N': return push_new(Type::kNone, at);
      case 0x88:
      case 0x89: return boolean(op == 0x88, at);
      case 'J': return small_int(4, true, at);
      case 'K': return small_int(1, false, at);
      case 'M': return small_int(2, false, at);
      case 0x8a: return long1(at);
      case 'G': return binfloat(at);
      case 0x8c: return text(Type::kStr, 1, at);
      case 'X': return text(Type::kStr, 4, at);
      case 0x8d: return text(Type::kStr, 8, at);
      case 'C': return text(Type::kBytes, 1, at);
      case 'B': return text(Type::kBytes, 4, at);
      case 0x8e: return text(Type::kBytes, 8, at);
      case ')': return push_new(Type::kTuple, at);
      case 0x85: return tuple_n(1, at);
      case 0x86: return tuple_n(2, at);
      case 0x87: return tuple_n(3, at);
      case 't': return tuple_mark(at);
      case ']': return push_new(Type::kList, at);
      case 'a': return append(at);
      case 'e': return appends(at);
      case '}': return push_new(Type::kDict, at);
      case 's': return setitem(at);
      case 'u': return setitems(at);
      case 'c': return global_text(at);
      case 0x93: return stack_global(at);
      case 0x81: return newobj(at);
      case 'R': return reduce(at);
      case 'b': return build(at);
      default:
        return fail(at, "opcode " + hex_byte(op) + " is not one joblib writes for a model (unknown or not allowed)");
    }
  }

  Status protocol(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint8_t v, read_u8(at));
    if (at != 0) return fail(at, "PROTO is not the first opcode");
    if (v < 2 || v > 5) return fail(at, "pickle protocol " + std::to_string(v) + " (joblib writes 2 to 5)");
    m_out.protocol = v;
    return Status::ok();
  }
  Status frame(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint64_t n, read_le(8, at));
    if (m_pos < m_frame_end) return fail(at, "a FRAME inside a frame");
    if (n > m_in.size() - m_pos) return fail(at, "a frame longer than the rest of the file (file cut short?)");
    m_frame_end = m_pos + n;
    return Status::ok();
  }
  Status mark(size_t at) {
    if (m_marks.size() >= kMaxStack) return fail(at, "too many MARKs");
    m_marks.push_back(m_stack.size());
    return Status::ok();
  }
  Status dup(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* v, top(at, "DUP"));
    return push(v, at);
  }
  Status memo_put(uint64_t index, size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* v, top(at, "MEMOIZE"));
    if (m_memo.size() >= kMaxMemo && !m_memo.count(index)) return fail(at, "the memo grows past any model's size");
    m_memo[index] = v;
    if (index == m_memo_next) ++m_memo_next;
    return Status::ok();
  }
  Status memo_put_arg(size_t width, size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint64_t index, read_le(width, at));
    return memo_put(index, at);
  }
  Status memo_get(size_t width, size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint64_t index, read_le(width, at));
    auto it = m_memo.find(index);
    if (it == m_memo.end()) return fail(at, "memo entry " + std::to_string(index) + " fetched before it was stored");
    return push(it->second, at);
  }
  Status boolean(bool value, size_t at) {
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kBool, at, &v));
    v->boolean = value;
    return Status::ok();
  }
  Status small_int(size_t width, bool is_signed, size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint64_t raw, read_le(width, at));
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kInt, at, &v));
    v->integer = is_signed ? static_cast<int64_t>(static_cast<int32_t>(raw)) : static_cast<int64_t>(raw);
    return Status::ok();
  }
  Status long1(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint8_t n, read_u8(at));
    if (n > 8) return fail(at, "an integer of " + std::to_string(n) + " bytes (more than 64 bits)");
    ESCPOD_ASSIGN_OR_RETURN(uint64_t raw, read_le(n, at));
    if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t{0} << (8 * n);  // sign-extend
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kInt, at, &v));
    v->integer = static_cast<int64_t>(raw);
    return Status::ok();
  }
  Status binfloat(size_t at) {
    const uint8_t* p = nullptr;
    ESCPOD_RETURN_IF_ERROR(take(8, at, p));
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];  // big-endian
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kFloat, at, &v));
    v->number = std::bit_cast<double>(bits);
    return Status::ok();
  }
  Status text(Type t, size_t width, size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const uint64_t n, read_le(width, at));
    ESCPOD_ASSIGN_OR_RETURN(std::string s, read_text(n, at));
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(t, at, &v));
    v->text = std::move(s);
    return Status::ok();
  }
  Status tuple_n(size_t n, size_t at) {
    if (m_stack.size() < stack_floor() + n) return fail(at, "TUPLE" + std::to_string(n) + " with too few values");
    PickleValue* v = nullptr;
    ESCPOD_ASSIGN_OR_RETURN(v, make(Type::kTuple, at));
    v->items.assign(m_stack.end() - static_cast<std::ptrdiff_t>(n), m_stack.end());
    m_stack.resize(m_stack.size() - n);
    return push(v, at);
  }
  Status tuple_mark(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(std::vector<const PickleValue*> items, pop_mark(at, "TUPLE"));
    PickleValue* v = nullptr;
    ESCPOD_ASSIGN_OR_RETURN(v, make(Type::kTuple, at));
    v->items = std::move(items);
    return push(v, at);
  }
  Result<PickleValue*> container(Type t, size_t at, const char* op) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* c, top(at, op));
    if (c->type != t) return fail(at, std::string(op) + " on a " + c->type_name());
    return mut(c);
  }
  Status append(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* item, pop(at, "APPEND"));
    ESCPOD_ASSIGN_OR_RETURN(PickleValue * list, container(Type::kList, at, "APPEND"));
    list->items.push_back(item);
    return Status::ok();
  }
  Status appends(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(std::vector<const PickleValue*> items, pop_mark(at, "APPENDS"));
    ESCPOD_ASSIGN_OR_RETURN(PickleValue * list, container(Type::kList, at, "APPENDS"));
    list->items.insert(list->items.end(), items.begin(), items.end());
    return Status::ok();
  }
  // Python replaces an existing key; keys here are str or int (compared by value). The index
  // keeps a hostile dict of many keys linear, not quadratic.
  void set_key(PickleValue* dict, const PickleValue* key, const PickleValue* value) {
    std::string id = key->type == Type::kStr ? "s" + key->text : "i" + std::to_string(key->integer);
    auto [it, fresh] = m_dict_index[dict].try_emplace(std::move(id), dict->fields.size());
    if (fresh) dict->fields.emplace_back(key, value);
    else dict->fields[it->second].second = value;
  }
  Status check_key(const PickleValue* key, size_t at) const {
    if (key->type == Type::kStr || key->type == Type::kInt) return Status::ok();
    return fail(at, "a dict key of type " + key->type_name() + " (models use str and int keys)");
  }
  Status setitem(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* value, pop(at, "SETITEM"));
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* key, pop(at, "SETITEM"));
    ESCPOD_RETURN_IF_ERROR(check_key(key, at));
    ESCPOD_ASSIGN_OR_RETURN(PickleValue * dict, container(Type::kDict, at, "SETITEM"));
    set_key(dict, key, value);
    return Status::ok();
  }
  Status setitems(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(std::vector<const PickleValue*> items, pop_mark(at, "SETITEMS"));
    if (items.size() % 2 != 0) return fail(at, "SETITEMS with an odd number of values");
    ESCPOD_ASSIGN_OR_RETURN(PickleValue * dict, container(Type::kDict, at, "SETITEMS"));
    for (size_t i = 0; i < items.size(); i += 2) {
      ESCPOD_RETURN_IF_ERROR(check_key(items[i], at));
      set_key(dict, items[i], items[i + 1]);
    }
    return Status::ok();
  }

  Status push_global(const std::string& module, const std::string& name, size_t at) {
    const std::string full = module + "." + name;
    Global g{};
    if (!allowed_global(full, g))
      return fail(at, "forbidden global '" + full +
                          "' (a model file names only WarpDemuX's DTW_SVM, scikit-learn's SVC, "
                          "joblib's array wrapper and numpy's ndarray, dtype and scalar)");
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kGlobal, at, &v));
    v->text = full;
    return Status::ok();
  }
  Status global_text(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(std::string module, read_line(at));
    ESCPOD_ASSIGN_OR_RETURN(std::string name, read_line(at));
    return push_global(module, name, at);
  }
  Status stack_global(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* name, pop(at, "STACK_GLOBAL"));
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* module, pop(at, "STACK_GLOBAL"));
    if (name->type != Type::kStr || module->type != Type::kStr)
      return fail(at, "STACK_GLOBAL with a non-string module or name");
    return push_global(module->text, name->text, at);
  }
  Result<Global> global_of(const PickleValue* v, size_t at, const char* op) const {
    Global g{};
    if (v->type != Type::kGlobal || !allowed_global(v->text, g))
      return fail(at, std::string(op) + " on a " + v->type_name() + ", not a class");
    return g;
  }

  Status newobj(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* args, pop(at, "NEWOBJ"));
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* cls, pop(at, "NEWOBJ"));
    ESCPOD_ASSIGN_OR_RETURN(const Global g, global_of(cls, at, "NEWOBJ"));
    if (g != Global::kModelObject && g != Global::kArrayWrapper)
      return fail(at, "NEWOBJ of " + cls->text + " (only DTW_SVM, SVC and joblib's array wrapper are made so)");
    if (args->type != Type::kTuple || !args->items.empty())
      return fail(at, "NEWOBJ of " + cls->text + " with arguments");
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kObject, at, &v));
    v->text = cls->text;
    return Status::ok();
  }

  Status reduce(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* args, pop(at, "REDUCE"));
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* callable, pop(at, "REDUCE"));
    ESCPOD_ASSIGN_OR_RETURN(const Global g, global_of(callable, at, "REDUCE"));
    if (args->type != Type::kTuple) return fail(at, "REDUCE of " + callable->text + " without an argument tuple");
    if (g == Global::kDtype) return make_dtype(args, at);
    if (g == Global::kScalar) return make_scalar(args, at);
    return fail(at, "REDUCE of " + callable->text + " (only numpy.dtype and numpy scalars are made so)");
  }
  Status make_dtype(const PickleValue* args, size_t at) {
    const auto& a = args->items;
    if (a.size() != 3 || a[0]->type != Type::kStr || a[1]->type != Type::kBool || a[2]->type != Type::kBool)
      return fail(at, "numpy.dtype with arguments other than (code, align, copy)");
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kDtype, at, &v));
    if (!parse_dtype_code(a[0]->text, v->kind, v->itemsize, v->byte_order))
      return fail(at, "numpy dtype '" + a[0]->text + "' (models hold only bool, integer and float arrays)");
    v->text = a[0]->text;
    if (v->byte_order == '=' || v->byte_order == '|') v->byte_order = '<';
    return Status::ok();
  }
  Status make_scalar(const PickleValue* args, size_t at) {
    const auto& a = args->items;
    if (a.size() != 2 || a[0]->type != Type::kDtype || a[1]->type != Type::kBytes)
      return fail(at, "numpy scalar with arguments other than (dtype, bytes)");
    const PickleValue& dt = *a[0];
    if (a[1]->text.size() != dt.itemsize) return fail(at, "numpy scalar whose bytes do not match its dtype");
    PickleValue tmp;
    tmp.type = Type::kArray;
    tmp.kind = dt.kind;
    tmp.itemsize = dt.itemsize;
    tmp.data.assign(a[1]->text.begin(), a[1]->text.end());
    if (dt.byte_order == '>') std::reverse(tmp.data.begin(), tmp.data.end());
    PickleValue* v = nullptr;
    ESCPOD_RETURN_IF_ERROR(push_new(Type::kInt, at, &v));
    if (dt.kind == 'f') {
      v->type = Type::kFloat;
      v->number = tmp.element_double(0);
    } else if (dt.kind == 'b') {
      v->type = Type::kBool;
      v->boolean = tmp.data[0] != 0;
    } else {
      v->integer = tmp.element_int(0);
    }
    return Status::ok();
  }

  Status build(size_t at) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* state, pop(at, "BUILD"));
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* target, top(at, "BUILD"));
    PickleValue* obj = mut(target);
    if (obj->built) return fail(at, "BUILD of a " + obj->type_name() + " that was already built");
    if (obj->type == Type::kDtype) return build_dtype(obj, state, at);
    if (obj->type != Type::kObject) return fail(at, "BUILD of a " + obj->type_name());
    if (state->type != Type::kDict) return fail(at, "BUILD of " + obj->text + " with a " + state->type_name() + " state");
    for (const auto& [k, v] : state->fields)
      if (k->type != Type::kStr) return fail(at, "a field name of " + obj->text + " that is not a string");
    obj->fields = state->fields;
    obj->built = true;
    if (obj->text == "joblib.numpy_pickle.NumpyArrayWrapper") return read_array(obj, at);
    return Status::ok();
  }
  // numpy's dtype state: (version, byte order, subarray, names, fields, elsize, alignment, flags).
  Status build_dtype(PickleValue* dt, const PickleValue* state, size_t at) {
    if (state->type != Type::kTuple || state->items.size() < 2 || state->items[1]->type != Type::kStr)
      return fail(at, "numpy dtype state is not (version, byte order, ...)");
    for (size_t i = 2; i < std::min<size_t>(state->items.size(), 5); ++i)
      if (state->items[i]->type != Type::kNone)
        return fail(at, "numpy dtype with a subarray, names or fields (structured dtypes are not model arrays)");
    const std::string& order = state->items[1]->text;
    if (order == ">") dt->byte_order = '>';
    else if (order == "<" || order == "|" || order == "=") dt->byte_order = '<';
    else return fail(at, "numpy dtype byte order '" + order + "'");
    dt->built = true;
    return Status::ok();
  }

  // The NumpyArrayWrapper just built: its array's bytes follow in the stream, after the frame
  // that holds the wrapper and an optional alignment pad (one length byte, then that many bytes).
  Status read_array(const PickleValue* wrapper, size_t at) {
    const PickleValue* subclass = wrapper->field("subclass");
    const PickleValue* shape = wrapper->field("shape");
    const PickleValue* order = wrapper->field("order");
    const PickleValue* dtype = wrapper->field("dtype");
    const PickleValue* align = wrapper->field("numpy_array_alignment_bytes");
    if (!subclass || subclass->type != Type::kGlobal || subclass->text != "numpy.ndarray")
      return fail(at, "an array wrapper whose subclass is not numpy.ndarray");
    if (!shape || shape->type != Type::kTuple || shape->items.size() > kMaxArrayDims)
      return fail(at, "an array wrapper without a shape tuple");
    if (!order || order->type != Type::kStr || (order->text != "C" && order->text != "F"))
      return fail(at, "an array wrapper whose order is not 'C' or 'F'");
    if (!dtype || dtype->type != Type::kDtype || !dtype->built)
      return fail(at, "an array wrapper without a numpy dtype (object arrays are not read)");
    if (m_pos != m_frame_end && m_pos < m_frame_end)
      return fail(at, "array data inside a pickle frame (joblib ends the frame before an array)");
    ESCPOD_ASSIGN_OR_RETURN(PickleValue * arr, make(Type::kArray, m_pos));
    arr->kind = dtype->kind;
    arr->itemsize = dtype->itemsize;
    arr->text = dtype->text;
    size_t count = 1;
    for (const PickleValue* d : shape->items) {
      if (d->type != Type::kInt || d->integer < 0) return fail(at, "an array dimension that is not a count");
      const auto n = static_cast<uint64_t>(d->integer);
      if (n != 0 && count > (m_in.size() / n)) return fail(at, "an array larger than the file");
      count *= static_cast<size_t>(n);
      arr->shape.push_back(static_cast<size_t>(n));
    }
    if (align && align->type != Type::kNone) {
      if (align->type != Type::kInt) return fail(at, "numpy_array_alignment_bytes is not an integer");
      ESCPOD_ASSIGN_OR_RETURN(const uint8_t pad, read_u8(m_pos));
      const uint8_t* skipped = nullptr;
      ESCPOD_RETURN_IF_ERROR(take(pad, m_pos, skipped));
    }
    const size_t data_at = m_pos;
    if (count > (m_in.size() - m_pos) / arr->itemsize)
      return fail(data_at, "array of shape " + shape_text(arr->shape) + " (" + arr->text + ") needs " +
                               std::to_string(count * arr->itemsize) + " bytes but the file has " +
                               std::to_string(m_in.size() - m_pos) + " left (file cut short?)");
    const uint8_t* p = nullptr;
    ESCPOD_RETURN_IF_ERROR(take(count * arr->itemsize, data_at, p));
    arr->data.assign(p, p + count * arr->itemsize);
    if (dtype->byte_order == '>') swap_elements(*arr);
    if (order->text == "F") to_c_order(*arr);
    m_stack.back() = arr;  // the array replaces its wrapper
    return Status::ok();
  }
  static std::string shape_text(const std::vector<size_t>& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
  }
  static void swap_elements(PickleValue& a) {
    for (size_t i = 0; i + a.itemsize <= a.data.size(); i += a.itemsize)
      std::reverse(a.data.begin() + static_cast<std::ptrdiff_t>(i),
                   a.data.begin() + static_cast<std::ptrdiff_t>(i + a.itemsize));
  }
  // Fortran order holds the transpose's C-order bytes: walk the F index for each C index.
  static void to_c_order(PickleValue& a) {
    const size_t nd = a.shape.size(), n = a.size(), w = a.itemsize;
    if (nd < 2 || n == 0) return;
    std::vector<uint8_t> out(a.data.size());
    std::vector<size_t> idx(nd, 0);
    for (size_t c = 0; c < n; ++c) {
      size_t f = 0, stride = 1;
      for (size_t d = 0; d < nd; ++d) {
        f += idx[d] * stride;
        stride *= a.shape[d];
      }
      std::memcpy(out.data() + c * w, a.data.data() + f * w, w);
      for (size_t d = nd; d-- > 0;) {
        if (++idx[d] < a.shape[d]) break;
        idx[d] = 0;
      }
    }
    a.data = std::move(out);
  }

  std::span<const uint8_t> m_in;
  const std::string& m_name;
  size_t m_pos = 0;
  size_t m_frame_end = 0;  // first byte after the current frame (<= m_pos: no frame open)
  std::vector<const PickleValue*> m_stack;
  std::vector<size_t> m_marks;
  std::unordered_map<uint64_t, const PickleValue*> m_memo;
  std::unordered_map<const PickleValue*, std::unordered_map<std::string, size_t>> m_dict_index;
  uint64_t m_memo_next = 0;
  Pickle m_out;
};

}  // namespace

const PickleValue* PickleValue::field(std::string_view key) const {
  if (type != Type::kDict && type != Type::kObject) return nullptr;
  for (const auto& [k, v] : fields)
    if (k->type == Type::kStr && k->text == key) return v;
  return nullptr;
}

std::string PickleValue::type_name() const {
  switch (type) {
    case Type::kNone: return "None";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kStr: return "str";
    case Type::kBytes: return "bytes";
    case Type::kTuple: return "tuple";
    case Type::kList: return "list";
    case Type::kDict: return "dict";
    case Type::kGlobal: return "class " + text;
    case Type::kObject: return text.substr(text.rfind('.') + 1) + " object";
    case Type::kDtype: return "numpy dtype";
    case Type::kArray: return "numpy array (" + text + ")";
  }
  return "?";
}

size_t PickleValue::size() const {
  if (type != Type::kArray || itemsize == 0) return 0;
  return data.size() / itemsize;
}

double PickleValue::element_double(size_t i) const {
  const uint8_t* p = data.data() + i * itemsize;
  if (kind == 'f' && itemsize == 8) return std::bit_cast<double>(static_cast<uint64_t>(element_int(i)));
  if (kind == 'f' && itemsize == 4) {
    uint32_t bits = 0;
    std::memcpy(&bits, p, 4);
    return static_cast<double>(std::bit_cast<float>(bits));
  }
  return static_cast<double>(element_int(i));
}

int64_t PickleValue::element_int(size_t i) const {
  const uint8_t* p = data.data() + i * itemsize;
  uint64_t raw = 0;
  for (size_t b = 0; b < itemsize; ++b) raw |= static_cast<uint64_t>(p[b]) << (8 * b);
  if (kind == 'i' && itemsize < 8 && ((raw >> (8 * itemsize - 1)) & 1)) raw |= ~uint64_t{0} << (8 * itemsize);
  return static_cast<int64_t>(raw);
}

Result<Pickle> read_joblib_pickle(std::span<const uint8_t> bytes, const std::string& name) {
  return Machine(bytes, name).run();
}

}  // namespace escpod::demux::detail
