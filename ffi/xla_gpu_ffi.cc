//===- xla_gpu_ffi.cc - the runtime side of XLA's FFI for xla_gpu ---------===//
//
// libXlaGpuFfi.so: the function table that XLA FFI handlers call back into
// (errors, stream, execution context and user data, per-instance state,
// device memory, the cpu thread pool, futures, type ids, run id, device
// ordinal), a registry of handlers by (target name, platform), attributes
// built from a compact encoding the Python side writes, and the call:
// buffers, attributes and execution context packed into a call frame and
// handed to the handler of one execution stage.
//
// Standalone on purpose: no MLIR, no CUDA at link time (device memory on
// cuda goes through libcuda.so.1, opened when first needed), no exceptions,
// so that a saved program runs with numpy + cuda-python and this library.
// Python reaches it through ctypes (xla_gpu/ffi/_native.py); handler
// libraries reach it through the table (`call_frame->api`) or, when they
// register themselves at load time, through `XLA_FFI_GetApi`.
//
//===----------------------------------------------------------------------===//

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xla_gpu_ffi_abi.h"

#define XLA_GPU_FFI_EXPORT extern "C" __attribute__((visibility("default")))

namespace xla_gpu_ffi {
namespace {

using namespace abi;  // NOLINT: the ABI's names are the vocabulary here

// --- errors ---------------------------------------------------------------

struct ErrorObject {
  ErrorCode code;
  std::string message;
};

std::string Format(const char* format, ...)
    __attribute__((format(printf, 1, 2)));

std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char small[512];
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(small, sizeof(small), format, copy);
  va_end(copy);
  std::string out;
  if (n < 0) {
    out = format;
  } else if (static_cast<size_t>(n) < sizeof(small)) {
    out.assign(small, n);
  } else {
    out.resize(n + 1);
    std::vsnprintf(&out[0], n + 1, format, args);
    out.resize(n);
  }
  va_end(args);
  return out;
}

Error* MakeError(ErrorCode code, std::string message) {
  auto* error = new (std::nothrow) ErrorObject{code, std::move(message)};
  return reinterpret_cast<Error*>(error);
}

ErrorObject* AsObject(Error* error) {
  return reinterpret_cast<ErrorObject*>(error);
}

// The struct_size check of every entry point: the caller's struct must
// cover every field the runtime reads.
Error* CheckSize(const char* what, size_t actual, size_t expected) {
  if (actual < expected) {
    return MakeError(kInvalidArgument,
                     Format("Unexpected %s size: expected at least %zu, got "
                            "%zu. The handler was built against an XLA FFI "
                            "version that xla_gpu (API %d.%d) does not know.",
                            what, expected, actual, kApiMajor, kApiMinor));
  }
  return nullptr;
}

#define RETURN_IF_ERROR(expr)            \
  do {                                   \
    if (Error* _error = (expr)) return _error; \
  } while (false)

Error* ErrorCreate(ErrorCreateArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Error_Create_Args", args->struct_size,
                            kErrorCreateArgsSize));
  return MakeError(args->errc, args->message ? args->message : "");
}

void ErrorGetMessage(ErrorGetMessageArgs* args) {
  // A void entry point cannot report a bad size; the fields it touches are
  // the ones every version had.
  args->message = args->error ? AsObject(args->error)->message.c_str() : "";
}

void ErrorDestroy(ErrorDestroyArgs* args) { delete AsObject(args->error); }

// --- platforms --------------------------------------------------------------

enum Platform : int32_t { kCpu = 0, kCuda = 1, kUnknownPlatform = -1 };

// XLA's canonical platform names, as jax and handler libraries spell them.
Platform CanonicalPlatform(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(c));
  if (name == "cpu" || name == "host") return kCpu;
  if (name == "cuda" || name == "gpu") return kCuda;
  return kUnknownPlatform;
}

const char* PlatformName(Platform p) { return p == kCuda ? "cuda" : "cpu"; }

// --- futures ----------------------------------------------------------------

struct FutureObject {
  std::mutex mu;
  std::condition_variable ready_cv;
  bool ready = false;
  Error* error = nullptr;  // owned
};

Error* FutureCreate(FutureCreateArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Future_Create_Args", args->struct_size,
                            kFutureCreateArgsSize));
  args->future = reinterpret_cast<Future*>(new (std::nothrow) FutureObject);
  if (!args->future) return MakeError(kResourceExhausted, "out of memory");
  return nullptr;
}

Error* CompleteFuture(Future* future, Error* error) {
  if (!future) {
    delete AsObject(error);
    return MakeError(kInvalidArgument, "future is null");
  }
  auto* f = reinterpret_cast<FutureObject*>(future);
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->ready) {
    delete AsObject(error);
    return MakeError(kFailedPrecondition, "future is already completed");
  }
  f->error = error;
  f->ready = true;
  f->ready_cv.notify_all();
  return nullptr;
}

Error* FutureSetAvailable(FutureSetAvailableArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Future_SetAvailable_Args",
                            args->struct_size, kFutureSetAvailableArgsSize));
  return CompleteFuture(args->future, nullptr);
}

Error* FutureSetError(FutureSetErrorArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Future_SetError_Args", args->struct_size,
                            kFutureSetErrorArgsSize));
  if (!args->error || AsObject(args->error)->code == kOk) {
    return MakeError(kInvalidArgument, "Error must not be null or OK");
  }
  return CompleteFuture(args->future, args->error);
}

// Blocks until `future` completes; returns its error (owned) and frees it.
Error* AwaitFuture(Future* future) {
  auto* f = reinterpret_cast<FutureObject*>(future);
  Error* error;
  {
    std::unique_lock<std::mutex> lock(f->mu);
    f->ready_cv.wait(lock, [f] { return f->ready; });
    error = f->error;
  }
  delete f;
  return error;
}

// --- user types -----------------------------------------------------------------

struct TypeRecord {
  std::string name;
  void (*deleter)(void*) = nullptr;
};

struct TypeRegistry {
  std::mutex mu;
  std::map<std::string, int64_t> ids;       // name -> id
  std::map<int64_t, TypeRecord> types;      // id -> record
  int64_t next_id = 1;
};

TypeRegistry& Types() {
  static auto* registry = new TypeRegistry;  // never destroyed: handlers may
  return *registry;                          // outlive static destructors
}

Error* RegisterType(const std::string& name, TypeId* type_id,
                    void (*deleter)(void*)) {
  TypeRegistry& r = Types();
  std::lock_guard<std::mutex> lock(r.mu);
  auto named = r.ids.find(name);
  if (type_id->type_id == 0) {
    if (named != r.ids.end()) {
      // The same library registered twice (two loads of one handler .so):
      // hand back the id it got the first time.
      type_id->type_id = named->second;
      r.types[named->second].deleter = deleter;
      return nullptr;
    }
    while (r.types.count(r.next_id)) ++r.next_id;
    int64_t id = r.next_id++;
    r.ids[name] = id;
    r.types[id] = TypeRecord{name, deleter};
    type_id->type_id = id;
    return nullptr;
  }
  int64_t id = type_id->type_id;
  if (named != r.ids.end()) {
    if (named->second != id) {
      return MakeError(kInvalidArgument,
                       Format("Type name %s is already registered with type "
                              "id %lld, not %lld",
                              name.c_str(), (long long)named->second,
                              (long long)id));
    }
    r.types[id].deleter = deleter;
    return nullptr;
  }
  auto taken = r.types.find(id);
  if (taken != r.types.end()) {
    return MakeError(kInvalidArgument,
                     Format("Type id %lld is already registered for type %s",
                            (long long)id, taken->second.name.c_str()));
  }
  r.ids[name] = id;
  r.types[id] = TypeRecord{name, deleter};
  return nullptr;
}

Error* TypeRegister(TypeRegisterArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Type_Register_Args", args->struct_size,
                            kTypeRegisterArgsSize));
  if (!args->type_id) return MakeError(kInvalidArgument, "type_id is null");
  std::string name(args->name.ptr ? args->name.ptr : "", args->name.len);
  void (*deleter)(void*) =
      args->type_info ? args->type_info->deleter : nullptr;
  return RegisterType(name, args->type_id, deleter);
}

bool LookupType(int64_t id, TypeRecord* out) {
  TypeRegistry& r = Types();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.types.find(id);
  if (it == r.types.end()) return false;
  *out = it->second;
  return true;
}

// User data of the execution context: one object per type id for every
// execution in the process (xla_gpu runs one program at a time on one
// device, so there is nothing finer to scope it to).
struct UserDataTable {
  std::mutex mu;
  std::map<int64_t, void*> data;
};

UserDataTable& UserData() {
  static auto* table = new UserDataTable;
  return *table;
}

// --- attributes -----------------------------------------------------------------
//
// The Python side decodes the custom call's backend_config and encodes it
// as (little-endian):
//   dictionary: 'D' u32 count, count x (u32 name_len, name, value)
//   scalar:     'S' i32 dtype, the value's bytes (1/2/4/8 by dtype)
//   array:      'A' i32 dtype, u64 count, count x element bytes
//   string:     'T' u64 len, bytes
// The tree built from it owns every struct a call frame points at.

size_t ScalarBytes(DataType dtype) {
  switch (dtype) {
    case kPred: case kS8: case kU8: return 1;
    case kS16: case kU16: case kF16: case kBF16: return 2;
    case kS32: case kU32: case kF32: return 4;
    case kS64: case kU64: case kF64: case kC64: return 8;
    case kC128: return 16;
    default: return 0;
  }
}

struct AttributeTree {
  // Stable storage: deques never move their elements.
  std::deque<std::string> strings;
  std::deque<ByteSpan> spans;
  std::deque<Scalar> scalars;
  std::deque<Array> arrays;
  std::deque<std::vector<uint8_t>> payloads;
  std::deque<Attrs> dictionaries;
  std::deque<std::vector<AttrType>> type_lists;
  std::deque<std::vector<ByteSpan*>> name_lists;
  std::deque<std::vector<void*>> value_lists;
  Attrs* root = nullptr;
};

class AttributeReader {
 public:
  AttributeReader(const uint8_t* data, size_t size, AttributeTree* tree)
      : data_(data), size_(size), tree_(tree) {}

  bool ReadRoot(std::string* error) {
    if (!Take(1) || data_[pos_ - 1] != 'D') {
      *error = "attributes: the encoding does not start with a dictionary";
      return false;
    }
    tree_->root = ReadDictionary(0, error);
    if (tree_->root && pos_ != size_) {
      *error = "attributes: trailing bytes after the dictionary";
      return false;
    }
    return tree_->root != nullptr;
  }

 private:
  bool Take(size_t n) {
    if (n > size_ - pos_) return false;
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Read(T* out) {
    if (!Take(sizeof(T))) return false;
    std::memcpy(out, data_ + pos_ - sizeof(T), sizeof(T));
    return true;
  }

  Attrs* ReadDictionary(int depth, std::string* error) {
    if (depth > 64) {
      *error = "attributes: dictionaries nest deeper than 64";
      return nullptr;
    }
    uint32_t count;
    if (!Read(&count)) return Truncated(error);
    struct Entry {
      std::string name;
      AttrType type;
      void* value;
    };
    std::vector<Entry> entries;
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t len;
      if (!Read(&len) || !Take(len)) return Truncated(error);
      std::string name(reinterpret_cast<const char*>(data_ + pos_ - len), len);
      uint8_t tag;
      if (!Read(&tag)) return Truncated(error);
      Entry entry{std::move(name), kAttrScalar, nullptr};
      if (tag == 'D') {
        entry.type = kAttrDictionary;
        entry.value = ReadDictionary(depth + 1, error);
      } else if (tag == 'S') {
        entry.type = kAttrScalar;
        entry.value = ReadScalar(error);
      } else if (tag == 'A') {
        entry.type = kAttrArray;
        entry.value = ReadArray(error);
      } else if (tag == 'T') {
        entry.type = kAttrString;
        entry.value = ReadString(error);
      } else {
        *error = Format("attributes: unknown tag %d", tag);
        return nullptr;
      }
      if (!entry.value) return nullptr;
      entries.push_back(std::move(entry));
    }
    // Handlers rely on the order: sorted by name, byte by byte.
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) {
                       return a.name < b.name;
                     });
    for (size_t i = 1; i < entries.size(); ++i) {
      if (entries[i].name == entries[i - 1].name) {
        *error = "attributes: duplicate name '" + entries[i].name + "'";
        return nullptr;
      }
    }
    auto& types = tree_->type_lists.emplace_back();
    auto& names = tree_->name_lists.emplace_back();
    auto& values = tree_->value_lists.emplace_back();
    for (Entry& e : entries) {
      const std::string& stored = tree_->strings.emplace_back(std::move(e.name));
      ByteSpan& span = tree_->spans.emplace_back(ByteSpan{stored.data(), stored.size()});
      types.push_back(e.type);
      names.push_back(&span);
      values.push_back(e.value);
    }
    Attrs& dict = tree_->dictionaries.emplace_back();
    dict.struct_size = kAttrsSize;
    dict.extension_start = nullptr;
    dict.size = static_cast<int64_t>(entries.size());
    dict.types = types.data();
    dict.names = names.data();
    dict.attrs = values.data();
    return &dict;
  }

  Scalar* ReadScalar(std::string* error) {
    int32_t dtype;
    if (!Read(&dtype)) return Truncated<Scalar>(error);
    size_t bytes = ScalarBytes(static_cast<DataType>(dtype));
    if (bytes == 0) {
      *error = Format("attributes: unsupported scalar type %d", dtype);
      return nullptr;
    }
    if (!Take(bytes)) return Truncated<Scalar>(error);
    auto& payload = tree_->payloads.emplace_back(data_ + pos_ - bytes, data_ + pos_);
    return &tree_->scalars.emplace_back(
        Scalar{static_cast<DataType>(dtype), payload.data()});
  }

  Array* ReadArray(std::string* error) {
    int32_t dtype;
    uint64_t count;
    if (!Read(&dtype) || !Read(&count)) return Truncated<Array>(error);
    size_t bytes = ScalarBytes(static_cast<DataType>(dtype));
    if (bytes == 0) {
      *error = Format("attributes: unsupported array element type %d", dtype);
      return nullptr;
    }
    if (count > (size_ - pos_) / bytes) return Truncated<Array>(error);
    size_t total = static_cast<size_t>(count) * bytes;
    Take(total);
    auto& payload = tree_->payloads.emplace_back(data_ + pos_ - total, data_ + pos_);
    // Keep the pointer valid (non-null) for empty arrays too.
    if (payload.empty()) payload.reserve(1);
    return &tree_->arrays.emplace_back(
        Array{static_cast<DataType>(dtype), static_cast<size_t>(count),
              payload.data()});
  }

  ByteSpan* ReadString(std::string* error) {
    uint64_t len;
    if (!Read(&len)) return Truncated<ByteSpan>(error);
    if (len > size_ - pos_) return Truncated<ByteSpan>(error);
    Take(len);
    const std::string& s = tree_->strings.emplace_back(
        reinterpret_cast<const char*>(data_ + pos_ - len), len);
    return &tree_->spans.emplace_back(ByteSpan{s.data(), s.size()});
  }

  template <typename T = Attrs>
  T* Truncated(std::string* error) {
    *error = "attributes: the encoding is truncated";
    return nullptr;
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  AttributeTree* tree_;
};

// --- handler registry -------------------------------------------------------------

// The handler's API version is not known here: registering never calls the
// handler (a pointer to anything but a handler would crash the caller), so
// major / minor stay 0 and the version is checked right before the first
// call (XlaGpuFfiCheckHandler).
struct Registration {
  HandlerBundle bundle;
  HandlerTraits traits;
  int32_t major;
  int32_t minor;
};

struct HandlerRegistry {
  std::mutex mu;
  std::map<std::pair<std::string, int32_t>, Registration> handlers;
};

HandlerRegistry& Handlers() {
  static auto* registry = new HandlerRegistry;
  return *registry;
}

const Api* TheApi();

// Asks `handler` for the API version it was built with and its traits:
// a call frame whose extension chain starts with the metadata extension.
Error* QueryMetadata(Handler* handler, Metadata* metadata) {
  std::memset(metadata, 0, sizeof(*metadata));
  metadata->struct_size = kMetadataSize;
  metadata->api_version.struct_size = kApiVersionSize;
  MetadataExtension extension;
  extension.extension_base.struct_size = kMetadataExtensionSize;
  extension.extension_base.type = kExtensionMetadata;
  extension.extension_base.next = nullptr;
  extension.metadata = metadata;
  CallFrame frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.struct_size = kCallFrameSize;
  frame.extension_start = &extension.extension_base;
  frame.api = TheApi();
  frame.stage = kExecute;
  frame.args.struct_size = kArgsSize;
  frame.rets.struct_size = kRetsSize;
  frame.attrs.struct_size = kAttrsSize;
  return handler(&frame);
}

bool SupportedVersion(int32_t major, int32_t minor) {
  auto v = std::make_pair(major, minor);
  return v >= std::make_pair(kMinSupportedMajor, kMinSupportedMinor) &&
         v <= std::make_pair(kApiMajor, kApiMinor);
}

// Asks `handler` for its metadata (by calling it) and refuses an API
// version this runtime does not speak.
Error* CheckHandlerVersion(Handler* handler) {
  if (!handler) return MakeError(kInvalidArgument, "the handler is null");
  Metadata metadata;
  if (Error* error = QueryMetadata(handler, &metadata)) {
    std::string message = AsObject(error)->message;
    delete AsObject(error);
    return MakeError(kInvalidArgument,
                     Format("the handler did not report its metadata: %s",
                            message.c_str()));
  }
  int32_t major = metadata.api_version.major_version;
  int32_t minor = metadata.api_version.minor_version;
  if (!SupportedVersion(major, minor)) {
    return MakeError(
        kInvalidArgument,
        Format("the handler's API version (%d.%d) is incompatible with "
               "xla_gpu's API version (%d.%d). Minimum supported API version "
               "is (%d.%d).",
               major, minor, kApiMajor, kApiMinor, kMinSupportedMajor,
               kMinSupportedMinor));
  }
  return nullptr;
}

Error* RegisterHandler(const std::string& name, const std::string& platform,
                       HandlerBundle bundle, HandlerTraits traits) {
  Platform canonical = CanonicalPlatform(platform);
  if (canonical == kUnknownPlatform) {
    return MakeError(kInvalidArgument,
                     Format("FFI handler registration for %s: unknown platform "
                            "'%s' (xla_gpu runs 'cpu'/'Host' and "
                            "'cuda'/'CUDA')",
                            name.c_str(), platform.c_str()));
  }
  if (name.empty()) {
    return MakeError(kInvalidArgument, "FFI handler registration: empty name");
  }
  if (!bundle.execute) {
    return MakeError(kInvalidArgument,
                     Format("FFI handler for %s on platform %s must provide an "
                            "execute implementation",
                            name.c_str(), platform.c_str()));
  }
  // XLA asks the execute handler for its metadata (API version, traits)
  // here, by calling it; xla_gpu does not: the traits are the caller's and
  // the version is checked before the first call (XlaGpuFfiCheckHandler).
  Registration registration{bundle, traits, 0, 0};
  HandlerRegistry& r = Handlers();
  std::lock_guard<std::mutex> lock(r.mu);
  auto key = std::make_pair(name, static_cast<int32_t>(canonical));
  auto it = r.handlers.find(key);
  if (it != r.handlers.end()) {
    const Registration& old = it->second;
    bool same = old.bundle.instantiate == bundle.instantiate &&
                old.bundle.prepare == bundle.prepare &&
                old.bundle.initialize == bundle.initialize &&
                old.bundle.execute == bundle.execute &&
                old.traits == registration.traits;
    if (same) return nullptr;  // the same library loaded twice
    return MakeError(kAlreadyExists,
                     Format("Duplicate FFI handler registration for %s on "
                            "platform %s (canonical %s) with a different "
                            "handler",
                            name.c_str(), platform.c_str(),
                            PlatformName(canonical)));
  }
  r.handlers.emplace(key, registration);
  return nullptr;
}

Error* HandlerRegister(HandlerRegisterArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Handler_Register_Args", args->struct_size,
                            kHandlerRegisterArgsSize));
  return RegisterHandler(
      std::string(args->name.ptr ? args->name.ptr : "", args->name.len),
      std::string(args->platform.ptr ? args->platform.ptr : "",
                  args->platform.len),
      args->bundle, args->traits);
}

// --- call-site instances and their state -------------------------------------------

struct StateSlot {
  int64_t type_id = 0;
  void* object = nullptr;
};

// One custom-call instruction of one program: its handlers, attributes and
// the state its instantiate / prepare / initialize stages set.
struct Instance {
  HandlerBundle bundle;
  std::unique_ptr<AttributeTree> attributes;
  std::mutex mu;
  StateSlot state[3];  // instantiate, prepare, initialize

  ~Instance() {
    for (StateSlot& slot : state) {
      if (!slot.object) continue;
      TypeRecord record;
      if (LookupType(slot.type_id, &record) && record.deleter) {
        record.deleter(slot.object);
      }
    }
  }
};

struct ExecutionContextObject {
  Platform platform;
  void* stream;
  int32_t device_ordinal;
  int64_t run_id;
  Instance* instance;
};

ExecutionContextObject* Ctx(ExecutionContext* ctx) {
  return reinterpret_cast<ExecutionContextObject*>(ctx);
}

Error* NoContext() { return MakeError(kInvalidArgument, "execution context is null"); }

Error* StateSlotOf(ExecutionContext* ctx, ExecutionStage stage, StateSlot** slot) {
  if (!ctx) return NoContext();
  if (stage < kInstantiate || stage > kInitialize) {
    return MakeError(kInvalidArgument,
                     Format("execution stage %d has no state (only "
                            "instantiate, prepare and initialize do)",
                            static_cast<int>(stage)));
  }
  *slot = &Ctx(ctx)->instance->state[stage];
  return nullptr;
}

Error* SetState(ExecutionContext* ctx, ExecutionStage stage, TypeId* type_id,
                void* object) {
  StateSlot* slot = nullptr;
  RETURN_IF_ERROR(StateSlotOf(ctx, stage, &slot));
  if (!type_id) return MakeError(kInvalidArgument, "type_id is null");
  TypeRecord record;
  if (!LookupType(type_id->type_id, &record)) {
    return MakeError(kInvalidArgument,
                     Format("State type id %lld is not registered (register "
                            "the type before the handler)",
                            (long long)type_id->type_id));
  }
  std::lock_guard<std::mutex> lock(Ctx(ctx)->instance->mu);
  if (slot->object) {
    return MakeError(kFailedPrecondition,
                     "State is already set for this execution stage");
  }
  slot->type_id = type_id->type_id;
  slot->object = object;
  return nullptr;
}

Error* GetState(ExecutionContext* ctx, ExecutionStage stage, TypeId* type_id,
                void** object) {
  StateSlot* slot = nullptr;
  RETURN_IF_ERROR(StateSlotOf(ctx, stage, &slot));
  if (!type_id) return MakeError(kInvalidArgument, "type_id is null");
  std::lock_guard<std::mutex> lock(Ctx(ctx)->instance->mu);
  if (!slot->object) {
    return MakeError(kNotFound, "State is not set");
  }
  if (slot->type_id != type_id->type_id) {
    return MakeError(kInvalidArgument,
                     Format("State has type id %lld, not %lld",
                            (long long)slot->type_id,
                            (long long)type_id->type_id));
  }
  *object = slot->object;
  return nullptr;
}

Error* StateSet(StateSetArgs* args) {
  if (args->struct_size == kStateArgsV02Size) {  // API 0.2: no stage field
    StateArgsV02 v02;
    std::memcpy(&v02, args, sizeof(v02));
    return SetState(v02.ctx, kInstantiate, v02.type_id, v02.state);
  }
  RETURN_IF_ERROR(CheckSize("XLA_FFI_State_Set_Args", args->struct_size,
                            kStateSetArgsSize));
  return SetState(args->ctx, args->stage, args->type_id, args->state);
}

Error* StateGet(StateGetArgs* args) {
  if (args->struct_size == kStateArgsV02Size) {
    StateArgsV02 v02;
    std::memcpy(&v02, args, sizeof(v02));
    void* object = nullptr;
    RETURN_IF_ERROR(GetState(v02.ctx, kInstantiate, v02.type_id, &object));
    v02.state = object;
    std::memcpy(args, &v02, sizeof(v02));
    return nullptr;
  }
  RETURN_IF_ERROR(CheckSize("XLA_FFI_State_Get_Args", args->struct_size,
                            kStateGetArgsSize));
  return GetState(args->ctx, args->stage, args->type_id, &args->state);
}

Error* ExecutionContextGet(ExecutionContextGetArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_ExecutionContext_Get_Args",
                            args->struct_size, kExecutionContextGetArgsSize));
  if (!args->type_id) return MakeError(kInvalidArgument, "type_id is null");
  UserDataTable& table = UserData();
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.data.find(args->type_id->type_id);
  if (it == table.data.end()) {
    return MakeError(kNotFound,
                     Format("Type id %lld not found in the execution context "
                            "(set it with xla_gpu.ffi.set_user_data)",
                            (long long)args->type_id->type_id));
  }
  args->data = it->second;
  return nullptr;
}

// --- stream, run id, device ordinal ----------------------------------------------

Error* StreamGet(StreamGetArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_Stream_Get_Args", args->struct_size,
                            kStreamGetArgsSize));
  if (!args->ctx) return NoContext();
  if (Ctx(args->ctx)->platform != kCuda) {
    return MakeError(kUnimplemented,
                     "XLA FFI GPU context is not available (the handler runs "
                     "on the cpu platform)");
  }
  args->stream = Ctx(args->ctx)->stream;
  return nullptr;
}

Error* RunIdGet(RunIdGetArgs* args) {
  RETURN_IF_ERROR(
      CheckSize("XLA_FFI_RunId_Get_Args", args->struct_size, kRunIdGetArgsSize));
  if (!args->ctx) return NoContext();
  args->run_id = Ctx(args->ctx)->run_id;
  return nullptr;
}

Error* DeviceOrdinalGet(DeviceOrdinalGetArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_DeviceOrdinal_Get_Args", args->struct_size,
                            kDeviceOrdinalGetArgsSize));
  if (!args->ctx) return NoContext();
  args->device_ordinal = Ctx(args->ctx)->device_ordinal;
  return nullptr;
}

// --- device memory ------------------------------------------------------------------
//
// cuda: stream-ordered allocations on the call's stream through the driver
// (cuMemAllocAsync / cuMemFreeAsync, cuMemAlloc / cuMemFree where the
// driver predates them), in the context current on the calling thread.
// cpu: host memory (XLA itself offers no allocator to cpu handlers; one
// costs nothing here and lets a handler written for both platforms run).

struct CudaDriver {
  using AllocAsync = int (*)(uint64_t*, size_t, void*);
  using FreeAsync = int (*)(uint64_t, void*);
  using Alloc = int (*)(uint64_t*, size_t);
  using Free = int (*)(uint64_t);
  AllocAsync alloc_async = nullptr;
  FreeAsync free_async = nullptr;
  Alloc alloc = nullptr;
  Free free = nullptr;
  std::string error;
};

const CudaDriver& Driver() {
  static const CudaDriver* driver = [] {
    auto* d = new CudaDriver;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      const char* e = dlerror();
      d->error = std::string("cannot open libcuda.so.1: ") + (e ? e : "?");
      return d;
    }
    d->alloc_async = reinterpret_cast<CudaDriver::AllocAsync>(
        dlsym(lib, "cuMemAllocAsync"));
    d->free_async = reinterpret_cast<CudaDriver::FreeAsync>(
        dlsym(lib, "cuMemFreeAsync"));
    d->alloc = reinterpret_cast<CudaDriver::Alloc>(dlsym(lib, "cuMemAlloc_v2"));
    d->free = reinterpret_cast<CudaDriver::Free>(dlsym(lib, "cuMemFree_v2"));
    if (!d->alloc || !d->free) d->error = "libcuda.so.1 lacks cuMemAlloc_v2";
    return d;
  }();
  return *driver;
}

constexpr size_t kMaxAlignment = 256;  // what cuMemAlloc guarantees

Error* DeviceMemoryAllocate(DeviceMemoryAllocateArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_DeviceMemory_Allocate_Args",
                            args->struct_size, kDeviceMemoryAllocateArgsSize));
  if (!args->ctx) return NoContext();
  size_t alignment = args->alignment ? args->alignment : 1;
  if ((alignment & (alignment - 1)) != 0 || alignment > kMaxAlignment) {
    return MakeError(kInvalidArgument,
                     Format("Unsupported alignment: %zu (a power of two up to "
                            "%zu)",
                            args->alignment, kMaxAlignment));
  }
  size_t size = args->size ? args->size : 1;
  if (Ctx(args->ctx)->platform == kCpu) {
    // aligned_alloc wants a size that is a multiple of the alignment.
    size_t align = std::max<size_t>(alignment, 16);
    if (size > SIZE_MAX - align) {
      return MakeError(kResourceExhausted,
                       Format("cannot allocate %zu bytes of host memory", size));
    }
    void* data = std::aligned_alloc(align, (size + align - 1) / align * align);
    if (!data) {
      return MakeError(kResourceExhausted,
                       Format("cannot allocate %zu bytes of host memory", size));
    }
    args->data = data;
    return nullptr;
  }
  const CudaDriver& cu = Driver();
  if (!cu.error.empty()) return MakeError(kUnavailable, cu.error);
  uint64_t ptr = 0;
  int status = cu.alloc_async ? cu.alloc_async(&ptr, size, Ctx(args->ctx)->stream)
                              : cu.alloc(&ptr, size);
  if (status != 0) {
    return MakeError(kResourceExhausted,
                     Format("cannot allocate %zu bytes of device memory (CUDA "
                            "error %d)",
                            size, status));
  }
  args->data = reinterpret_cast<void*>(ptr);
  return nullptr;
}

Error* DeviceMemoryFree(DeviceMemoryFreeArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_DeviceMemory_Free_Args", args->struct_size,
                            kDeviceMemoryFreeArgsSize));
  if (!args->ctx) return NoContext();
  if (!args->data) return nullptr;
  if (Ctx(args->ctx)->platform == kCpu) {
    std::free(args->data);
    return nullptr;
  }
  const CudaDriver& cu = Driver();
  if (!cu.error.empty()) return MakeError(kUnavailable, cu.error);
  uint64_t ptr = reinterpret_cast<uint64_t>(args->data);
  int status = cu.free_async ? cu.free_async(ptr, Ctx(args->ctx)->stream)
                             : cu.free(ptr);
  if (status != 0) {
    return MakeError(kInternal,
                     Format("cannot free device memory (CUDA error %d)", status));
  }
  return nullptr;
}

// --- the cpu thread pool ------------------------------------------------------------

class ThreadPool {
 public:
  explicit ThreadPool(int64_t threads) : size_(threads) {
    for (int64_t i = 0; i < threads; ++i) {
      std::thread([this] { Work(); }).detach();
    }
  }

  void Schedule(Task* task, void* data) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(task, data);
    }
    cv_.notify_one();
  }

  int64_t size() const { return size_; }

 private:
  void Work() {
    for (;;) {
      std::pair<Task*, void*> item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        item = queue_.front();
        queue_.pop_front();
      }
      item.first(item.second);
    }
  }

  int64_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Task*, void*>> queue_;
};

ThreadPool& Pool() {
  // Never destroyed: its detached workers sleep until the process ends.
  static ThreadPool* pool = [] {
    int64_t n = std::thread::hardware_concurrency();
    if (const char* env = std::getenv("XLA_GPU_FFI_THREADS")) n = std::atoll(env);
    return new ThreadPool(std::max<int64_t>(1, std::min<int64_t>(n, 256)));
  }();
  return *pool;
}

Error* NeedCpu(ExecutionContext* ctx) {
  if (!ctx) return NoContext();
  if (Ctx(ctx)->platform != kCpu) {
    return MakeError(kUnimplemented,
                     "XLA FFI CPU context is not available (the thread pool "
                     "serves cpu handlers)");
  }
  return nullptr;
}

Error* ThreadPoolSchedule(ThreadPoolScheduleArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_ThreadPool_Schedule_Args",
                            args->struct_size, kThreadPoolScheduleArgsSize));
  RETURN_IF_ERROR(NeedCpu(args->ctx));
  if (!args->task) return MakeError(kInvalidArgument, "task is null");
  Pool().Schedule(args->task, args->data);
  return nullptr;
}

Error* ThreadPoolNumThreads(ThreadPoolNumThreadsArgs* args) {
  RETURN_IF_ERROR(CheckSize("XLA_FFI_ThreadPool_NumThreads_Args",
                            args->struct_size, kThreadPoolNumThreadsArgsSize));
  RETURN_IF_ERROR(NeedCpu(args->ctx));
  if (!args->num_threads) return MakeError(kInvalidArgument, "num_threads is null");
  *args->num_threads = Pool().size();
  return nullptr;
}

// --- the table ------------------------------------------------------------------------

const Api* TheApi() {
  static const Api api = [] {
    Api a;
    std::memset(&a, 0, sizeof(a));
    a.struct_size = kApiSize;
    a.extension_start = nullptr;
    a.api_version.struct_size = kApiVersionSize;
    a.api_version.extension_start = nullptr;
    a.api_version.major_version = kApiMajor;
    a.api_version.minor_version = kApiMinor;
    a.internal_api = nullptr;
    a.error_create = ErrorCreate;
    a.error_get_message = ErrorGetMessage;
    a.error_destroy = ErrorDestroy;
    a.handler_register = HandlerRegister;
    a.stream_get = StreamGet;
    a.type_register = TypeRegister;
    a.execution_context_get = ExecutionContextGet;
    a.state_set = StateSet;
    a.state_get = StateGet;
    a.device_memory_allocate = DeviceMemoryAllocate;
    a.device_memory_free = DeviceMemoryFree;
    a.thread_pool_schedule = ThreadPoolSchedule;
    a.thread_pool_num_threads = ThreadPoolNumThreads;
    a.future_create = FutureCreate;
    a.future_set_available = FutureSetAvailable;
    a.future_set_error = FutureSetError;
    a.run_id_get = RunIdGet;
    a.device_ordinal_get = DeviceOrdinalGet;
    return a;
  }();
  return &api;
}

// --- helpers for the exported entry points ------------------------------------------

void WriteError(char* out, size_t capacity, const std::string& message) {
  if (!out || capacity == 0) return;
  size_t n = std::min(capacity - 1, message.size());
  std::memcpy(out, message.data(), n);
  out[n] = '\0';
}

// Reports `error` (owned) through the out buffer; returns its code.
int32_t Report(Error* error, char* out, size_t capacity) {
  if (!error) return kOk;
  ErrorObject* e = AsObject(error);
  int32_t code = e->code == kOk ? kUnknown : e->code;
  WriteError(out, capacity, e->message);
  delete e;
  return code;
}

}  // namespace
}  // namespace xla_gpu_ffi

using namespace xla_gpu_ffi;        // NOLINT
using namespace xla_gpu_ffi::abi;   // NOLINT

// One buffer as the Python side describes it.
struct XlaGpuFfiBufferDesc {
  int32_t dtype;
  void* data;
  int64_t rank;
  const int64_t* dims;
};

// The function table. Also exported under XLA's name, so that handler
// libraries that register themselves when loaded
// (XLA_FFI_REGISTER_HANDLER(XLA_FFI_GetApi(), ...)) find it once this
// library is loaded with RTLD_GLOBAL.
XLA_GPU_FFI_EXPORT const void* XlaGpuFfiGetApi() { return TheApi(); }
XLA_GPU_FFI_EXPORT const void* XLA_FFI_GetApi() { return TheApi(); }

XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiApiVersion() {
  return kApiMajor * 1000 + kApiMinor;
}

// --- registry ---------------------------------------------------------------------------

XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiRegisterHandler(
    const char* name, const char* platform, void* instantiate, void* prepare,
    void* initialize, void* execute, uint32_t traits, char* error,
    size_t error_capacity) {
  HandlerBundle bundle{reinterpret_cast<Handler*>(instantiate),
                       reinterpret_cast<Handler*>(prepare),
                       reinterpret_cast<Handler*>(initialize),
                       reinterpret_cast<Handler*>(execute)};
  return Report(RegisterHandler(name ? name : "", platform ? platform : "",
                                bundle, traits),
                error, error_capacity);
}

// 1 and the bundle, traits and handler API version when (name, platform)
// has a handler; 0 otherwise.
XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiFindHandler(const char* name,
                                                const char* platform,
                                                void** bundle, uint32_t* traits,
                                                int32_t* version) {
  Platform canonical = CanonicalPlatform(platform ? platform : "");
  if (canonical == kUnknownPlatform) return 0;
  HandlerRegistry& r = Handlers();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.handlers.find(std::make_pair(std::string(name ? name : ""),
                                           static_cast<int32_t>(canonical)));
  if (it == r.handlers.end()) return 0;
  const Registration& reg = it->second;
  bundle[0] = reinterpret_cast<void*>(reg.bundle.instantiate);
  bundle[1] = reinterpret_cast<void*>(reg.bundle.prepare);
  bundle[2] = reinterpret_cast<void*>(reg.bundle.initialize);
  bundle[3] = reinterpret_cast<void*>(reg.bundle.execute);
  *traits = reg.traits;
  version[0] = reg.major;
  version[1] = reg.minor;
  return 1;
}

XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiUnregisterHandler(const char* name,
                                                      const char* platform) {
  Platform canonical = CanonicalPlatform(platform ? platform : "");
  HandlerRegistry& r = Handlers();
  std::lock_guard<std::mutex> lock(r.mu);
  return static_cast<int32_t>(r.handlers.erase(std::make_pair(
      std::string(name ? name : ""), static_cast<int32_t>(canonical))));
}

// "name\tplatform\n" per registered handler into `out`; returns the bytes
// the whole list needs (call again with a larger buffer when more).
XLA_GPU_FFI_EXPORT size_t XlaGpuFfiListHandlers(char* out, size_t capacity) {
  HandlerRegistry& r = Handlers();
  std::string text;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& entry : r.handlers) {
      text += entry.first.first;
      text += '\t';
      text += PlatformName(static_cast<Platform>(entry.first.second));
      text += '\n';
    }
  }
  if (out && capacity > text.size()) {
    std::memcpy(out, text.data(), text.size());
    out[text.size()] = '\0';
  }
  return text.size() + 1;
}

// Asks a handler for its metadata without registering it.
XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiHandlerMetadata(void* handler,
                                                    int32_t* version,
                                                    uint32_t* traits,
                                                    char* error,
                                                    size_t error_capacity) {
  Metadata metadata;
  int32_t code = Report(QueryMetadata(reinterpret_cast<Handler*>(handler), &metadata),
                        error, error_capacity);
  if (code != kOk) return code;
  version[0] = metadata.api_version.major_version;
  version[1] = metadata.api_version.minor_version;
  *traits = metadata.traits;
  return kOk;
}

// Checks the API version of a handler before its first call (see
// CheckHandlerVersion); kOk or an error code and message.
XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiCheckHandler(void* handler, char* error,
                                                 size_t error_capacity) {
  return Report(CheckHandlerVersion(reinterpret_cast<Handler*>(handler)), error,
                error_capacity);
}

// --- types and user data ------------------------------------------------------------------

XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiRegisterType(const char* name,
                                                 int64_t* type_id,
                                                 void (*deleter)(void*),
                                                 char* error,
                                                 size_t error_capacity) {
  TypeId id{*type_id};
  int32_t code =
      Report(RegisterType(name ? name : "", &id, deleter), error, error_capacity);
  *type_id = id.type_id;
  return code;
}

// The id of a registered type, 0 when none has that name.
XLA_GPU_FFI_EXPORT int64_t XlaGpuFfiFindType(const char* name) {
  TypeRegistry& r = Types();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ids.find(name ? name : "");
  return it == r.ids.end() ? 0 : it->second;
}

// Makes `data` the user data of type `type_id` in every execution context
// (null removes it).
XLA_GPU_FFI_EXPORT void XlaGpuFfiSetUserData(int64_t type_id, void* data) {
  UserDataTable& table = UserData();
  std::lock_guard<std::mutex> lock(table.mu);
  if (data) {
    table.data[type_id] = data;
  } else {
    table.data.erase(type_id);
  }
}

// --- instances and calls ---------------------------------------------------------------------

// A call site: the four stage handlers (any null but execute) and the
// attributes in the encoding above. Null and a message on bad attributes.
XLA_GPU_FFI_EXPORT void* XlaGpuFfiInstanceCreate(void* const* bundle,
                                                 const uint8_t* attributes,
                                                 size_t attributes_size,
                                                 char* error,
                                                 size_t error_capacity) {
  auto instance = std::unique_ptr<Instance>(new (std::nothrow) Instance);
  if (!instance) {
    WriteError(error, error_capacity, "out of memory");
    return nullptr;
  }
  instance->bundle = HandlerBundle{reinterpret_cast<Handler*>(bundle[0]),
                                   reinterpret_cast<Handler*>(bundle[1]),
                                   reinterpret_cast<Handler*>(bundle[2]),
                                   reinterpret_cast<Handler*>(bundle[3])};
  if (!instance->bundle.execute) {
    WriteError(error, error_capacity, "the handler bundle has no execute handler");
    return nullptr;
  }
  instance->attributes.reset(new (std::nothrow) AttributeTree);
  std::string message;
  AttributeReader reader(attributes, attributes_size, instance->attributes.get());
  if (!reader.ReadRoot(&message)) {
    WriteError(error, error_capacity, message);
    return nullptr;
  }
  return instance.release();
}

// Frees the instance; the state its stages set is destroyed with the
// deleters its types were registered with.
XLA_GPU_FFI_EXPORT void XlaGpuFfiInstanceDestroy(void* instance) {
  delete static_cast<Instance*>(instance);
}

// 1 when the instance has a handler for `stage`.
XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiInstanceHasStage(void* instance,
                                                     int32_t stage) {
  const HandlerBundle& b = static_cast<Instance*>(instance)->bundle;
  switch (stage) {
    case kInstantiate: return b.instantiate != nullptr;
    case kPrepare: return b.prepare != nullptr;
    case kInitialize: return b.initialize != nullptr;
    case kExecute: return b.execute != nullptr;
    default: return 0;
  }
}

// Runs the handler of `stage` (a stage without a handler succeeds without
// a call). The instantiate stage gets no buffers and no stream, as in XLA.
// An asynchronous handler (one that sets call_frame->future) is waited for.
// Returns 0, or the handler's error code with its message in `error`.
XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiCall(
    void* instance_ptr, int32_t stage, int32_t platform, void* stream,
    int32_t device_ordinal, int64_t run_id, int64_t num_args,
    const XlaGpuFfiBufferDesc* args, int64_t num_rets,
    const XlaGpuFfiBufferDesc* rets, char* error, size_t error_capacity) {
  auto* instance = static_cast<Instance*>(instance_ptr);
  Handler* handler = nullptr;
  switch (stage) {
    case kInstantiate: handler = instance->bundle.instantiate; break;
    case kPrepare: handler = instance->bundle.prepare; break;
    case kInitialize: handler = instance->bundle.initialize; break;
    case kExecute: handler = instance->bundle.execute; break;
    default:
      WriteError(error, error_capacity, Format("unknown execution stage %d", stage));
      return kInvalidArgument;
  }
  if (!handler) return kOk;
  if (stage == kInstantiate) num_args = num_rets = 0;
  if (num_args < 0 || num_rets < 0) {
    WriteError(error, error_capacity, "negative argument or result count");
    return kInvalidArgument;
  }

  ExecutionContextObject ctx{static_cast<Platform>(platform),
                             stage == kInstantiate ? nullptr : stream,
                             device_ordinal, run_id, instance};

  std::vector<Buffer> buffers(num_args + num_rets);
  std::vector<void*> pointers(num_args + num_rets);
  std::vector<ArgType> arg_types(num_args, kArgBuffer);
  std::vector<RetType> ret_types(num_rets, kRetBuffer);
  for (int64_t i = 0; i < num_args + num_rets; ++i) {
    const XlaGpuFfiBufferDesc& d = i < num_args ? args[i] : rets[i - num_args];
    Buffer& b = buffers[i];
    b.struct_size = kBufferSize;
    b.extension_start = nullptr;
    b.dtype = static_cast<DataType>(d.dtype);
    b.data = d.data;
    b.rank = d.rank;
    b.dims = const_cast<int64_t*>(d.dims);
    pointers[i] = &b;
  }

  CallFrame frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.struct_size = kCallFrameSize;
  frame.extension_start = nullptr;
  frame.api = TheApi();
  frame.ctx = reinterpret_cast<ExecutionContext*>(&ctx);
  frame.stage = static_cast<ExecutionStage>(stage);
  frame.args = Args{kArgsSize, nullptr, num_args, arg_types.data(), pointers.data()};
  frame.rets = Rets{kRetsSize, nullptr, num_rets, ret_types.data(),
                    pointers.data() + num_args};
  frame.attrs = *instance->attributes->root;
  frame.future = nullptr;

  Error* result = handler(&frame);
  if (!result && frame.future) result = AwaitFuture(frame.future);
  return Report(result, error, error_capacity);
}

// --- XLA's legacy custom-call ABI ----------------------------------------------------
//
// Before the typed FFI, a custom call was a plain C function found by name
// (jax: register_ffi_target(..., api_version=0)). Its signature depends on
// the platform and on the instruction's api_version:
//
//   cpu  API_VERSION_ORIGINAL               void(void* out, const void** in)
//   cpu  API_VERSION_STATUS_RETURNING       void(void* out, const void** in,
//                                                XlaCustomCallStatus* status)
//   cpu  API_VERSION_STATUS_RETURNING_UNIFIED
//                                           void(void* out, const void** in,
//                                                const char* opaque, size_t len,
//                                                XlaCustomCallStatus* status)
//   cuda API_VERSION_ORIGINAL               void(CUstream, void** buffers,
//                                                const char* opaque, size_t len)
//   cuda API_VERSION_STATUS_RETURNING[_UNIFIED]
//                                           the same + XlaCustomCallStatus*
//
// `out` is the result buffer, or for a tuple result a table of the
// elements' buffers; cuda's `buffers` are the operands' then the results'
// buffers. A handler reports failure through XlaCustomCallStatusSetFailure,
// which handler libraries link against: exported here (load handler
// libraries after this one, as xla_gpu.ffi.load_library does).

struct XlaCustomCallStatus_ {
  bool failed = false;
  std::string message;
};
typedef struct XlaCustomCallStatus_ XlaCustomCallStatus;

extern "C" __attribute__((visibility("default"))) void XlaCustomCallStatusSetSuccess(
    XlaCustomCallStatus* status) {
  if (!status) return;
  status->failed = false;
  status->message.clear();
}

extern "C" __attribute__((visibility("default"))) void XlaCustomCallStatusSetFailure(
    XlaCustomCallStatus* status, const char* message, size_t message_len) {
  if (!status) return;
  status->failed = true;
  status->message.assign(message ? message : "", message ? message_len : 0);
}

enum LegacyConvention : int32_t {
  kCpuOriginal = 0,
  kCpuStatusReturning = 1,
  kCpuStatusReturningUnified = 2,
  kGpuOriginal = 3,
  kGpuStatusReturning = 4,
};

// Calls legacy custom-call function `fn` with `convention`; returns 0, or
// 13 (INTERNAL) with the status message in `error` when it reported a
// failure.
XLA_GPU_FFI_EXPORT int32_t XlaGpuFfiCallLegacy(void* fn, int32_t convention,
                                               void* stream, void* out,
                                               void** buffers, const char* opaque,
                                               size_t opaque_len, char* error,
                                               size_t error_capacity) {
  XlaCustomCallStatus status;
  switch (convention) {
    case kCpuOriginal:
      reinterpret_cast<void (*)(void*, const void**)>(fn)(
          out, const_cast<const void**>(buffers));
      break;
    case kCpuStatusReturning:
      reinterpret_cast<void (*)(void*, const void**, XlaCustomCallStatus*)>(fn)(
          out, const_cast<const void**>(buffers), &status);
      break;
    case kCpuStatusReturningUnified:
      reinterpret_cast<void (*)(void*, const void**, const char*, size_t,
                                XlaCustomCallStatus*)>(fn)(
          out, const_cast<const void**>(buffers), opaque, opaque_len, &status);
      break;
    case kGpuOriginal:
      reinterpret_cast<void (*)(void*, void**, const char*, size_t)>(fn)(
          stream, buffers, opaque, opaque_len);
      break;
    case kGpuStatusReturning:
      reinterpret_cast<void (*)(void*, void**, const char*, size_t,
                                XlaCustomCallStatus*)>(fn)(stream, buffers, opaque,
                                                           opaque_len, &status);
      break;
    default:
      WriteError(error, error_capacity,
                 Format("unknown legacy custom-call convention %d", convention));
      return kInvalidArgument;
  }
  if (status.failed) {
    WriteError(error, error_capacity, status.message);
    return kInternal;
  }
  return kOk;
}
