// The safetensors reader and writer (see safetensors.h).
#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/output_file.h"

namespace tf::core {

namespace {

static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");

struct DtypeInfo {
  const char* name;
  int bytes;
  DType float_dtype;
};
constexpr DtypeInfo kDtypes[] = {{"BOOL", 1, DType::kNone},    {"U8", 1, DType::kNone},      {"I8", 1, DType::kNone},
                                 {"F8_E5M2", 1, DType::kNone}, {"F8_E4M3", 1, DType::kNone}, {"I16", 2, DType::kNone},
                                 {"U16", 2, DType::kNone},     {"F16", 2, DType::kF16},      {"BF16", 2, DType::kBF16},
                                 {"I32", 4, DType::kNone},     {"U32", 4, DType::kNone},     {"F32", 4, DType::kF32},
                                 {"F64", 8, DType::kNone},     {"I64", 8, DType::kNone},     {"U64", 8, DType::kNone}};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Legitimate headers nest 3 deep: {name: {"shape": [dims]}}; anything deeper is refused before it
// can cost stack or memory.
constexpr int kMaxHeaderDepth = 3;

nlohmann::json parse_json(std::string_view text, const std::string& where) {
  std::set<std::string> seen;
  auto check = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if ((ev == E::object_start || ev == E::array_start) && depth >= kMaxHeaderDepth)
      throw InputError(where + ": header JSON nests deeper than a safetensors header does");
    if (ev == E::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
      throw InputError(where + ": tensor '" + parsed.get<std::string>() + "' appears twice in the header");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), check);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": the header is not valid JSON (" + e.what() + ")");
  }
}

uint64_t read_offset(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_unsigned()) throw InputError(where + ": data_offsets must be two non-negative integers");
  return v.get<uint64_t>();
}

SafetensorsTensor parse_entry(const std::string& name, const nlohmann::json& e, uint64_t data_bytes,
                              const std::string& where) {
  const std::string at = where + ": tensor '" + name + "'";
  if (!e.is_object() || e.size() != 3 || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    throw InputError(at + ": expected exactly {dtype, shape, data_offsets}");
  SafetensorsTensor t;
  t.name = name;
  const nlohmann::json& dt = e["dtype"];
  const DtypeInfo* info = dt.is_string() ? find_dtype(dt.get<std::string>()) : nullptr;
  if (info == nullptr) throw InputError(at + ": unknown dtype " + dt.dump());
  t.dtype = info->name;
  t.float_dtype = info->float_dtype;
  const nlohmann::json& sh = e["shape"];
  if (!sh.is_array()) throw InputError(at + ": shape must be a list of non-negative integers");
  t.numel = 1;
  for (const nlohmann::json& d : sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
      throw InputError(at + ": shape must be a list of non-negative integers, got " + sh.dump());
    t.shape.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(t.numel, t.shape.back(), &t.numel))
      throw InputError(at + ": shape " + sh.dump() + " overflows 64 bits");
  }
  const nlohmann::json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2) throw InputError(at + ": data_offsets must be [begin, end]");
  t.begin = read_offset(off[0], at);
  t.end = read_offset(off[1], at);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(t.numel, int64_t(info->bytes), &bytes))
    throw InputError(at + ": shape " + sh.dump() + " overflows 64 bits");
  if (t.begin > t.end || t.end > data_bytes)
    throw InputError(at + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     ") lie outside the data section of " + std::to_string(data_bytes) + " bytes");
  if (t.end - t.begin != uint64_t(bytes))
    throw InputError(at + ": data_offsets span " + std::to_string(t.end - t.begin) + " bytes, but shape " +
                     shape_text(t.shape) + " of " + t.dtype + " needs " + std::to_string(bytes));
  return t;
}

void check_coverage(std::vector<SafetensorsTensor>& ts, uint64_t data_bytes, const std::string& where) {
  std::sort(ts.begin(), ts.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : ts) {
    if (t.begin < covered)
      throw InputError(where + ": tensor '" + t.name + "' (bytes [" + std::to_string(t.begin) + ", " +
                       std::to_string(t.end) + ")) overlaps tensor '" + prev->name + "'");
    if (t.begin > covered)
      throw InputError(where + ": data bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                       ") belong to no tensor (a hole before '" + t.name + "')");
    covered = t.end;
    prev = &t;
  }
  if (covered != data_bytes)
    throw InputError(where + ": the data section has " + std::to_string(data_bytes - covered) +
                     " bytes after the last tensor");
}

int64_t checked_numel(const SafetensorsOut& t, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : t.shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw InputError(where + ": tensor '" + t.name + "' has a bad shape " + shape_text(t.shape));
  return n;
}

void put_value(std::byte* dst, float v, DType dtype) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, &v, 4);
    return;
  }
  const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
  std::memcpy(dst, &h, 2);
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path, std::string_view what)
    : map_(path, what, kMaxSafetensorsFileBytes) {
  const std::string where = std::string(what) + ": '" + map_.path() + "'";
  const std::span<const std::byte> bytes = map_.bytes();
  if (bytes.size() < 8)
    throw InputError(where + ": " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxSafetensorsHeaderBytes)
    throw InputError(where + ": byte 0: header length " + std::to_string(n) + " exceeds the limit of " +
                     std::to_string(kMaxSafetensorsHeaderBytes) + " bytes; not a safetensors file");
  if (n > bytes.size() - 8)
    throw InputError(where + ": byte 0: header length " + std::to_string(n) + " runs past the end of the " +
                     std::to_string(bytes.size()) + "-byte file; the file is truncated");
  data_offset_ = 8 + n;
  parse_header(std::string_view(reinterpret_cast<const char*>(bytes.data()) + 8, size_t(n)),
               bytes.size() - data_offset_);
}

void SafetensorsFile::parse_header(std::string_view text, uint64_t data_bytes) {
  const std::string where = "'" + map_.path() + "'";
  const nlohmann::json j = parse_json(text, where);
  if (!j.is_object()) throw InputError(where + ": the header is not a JSON object of tensors");
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw InputError(where + ": __metadata__ must map strings to strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw InputError(where + ": __metadata__['" + k + "'] is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(name, entry, data_bytes, where));
  }
  check_coverage(tensors_, data_bytes, where);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read(const SafetensorsTensor& t, std::span<float> out) const {
  const std::string at = "'" + map_.path() + "': tensor '" + t.name + "'";
  if (t.float_dtype == DType::kNone)
    throw InputError(at + ": dtype " + t.dtype + " cannot be read as float; allowed F32, BF16, F16");
  if (int64_t(out.size()) != t.numel)
    throw InputError(at + ": " + std::to_string(t.numel) + " values, the destination holds " +
                     std::to_string(out.size()));
  const uint64_t bytes = uint64_t(t.numel) * dtype_bytes(t.float_dtype);
  if (t.begin > t.end || t.end - t.begin != bytes || data_offset_ + t.end > map_.size_bytes())
    throw InputError(at + ": not a tensor of this file");
  const std::byte* src = map_.bytes().data() + data_offset_ + t.begin;
  if (t.float_dtype == DType::kF32) {
    std::memcpy(out.data(), src, size_t(bytes));
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h = 0;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = t.float_dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

std::vector<float> SafetensorsFile::read(const SafetensorsTensor& t) const {
  std::vector<float> v(static_cast<size_t>(t.numel));  // (numel) fp32, row-major
  read(t, v);
  return v;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsOut>& tensors, DType dtype,
                       const SafetensorsProducer& produce, const std::map<std::string, std::string>& metadata) {
  const std::string where = "safetensors writer: '" + path.string() + "'";
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    throw InputError(where + ": dtype " + std::string(dtype_name(dtype)) +
                     " is not supported; allowed fp32, bf16, fp16");
  const char* dtype_text = dtype == DType::kF32 ? "F32" : dtype == DType::kBF16 ? "BF16" : "F16";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = {{"format", "pt"}};
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  std::vector<int64_t> numels;
  uint64_t offset = 0;
  for (const SafetensorsOut& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name))
      throw InputError(where + ": tensor name '" + t.name + "' is empty, reserved or repeated");
    const int64_t n = checked_numel(t, where);
    const uint64_t bytes = uint64_t(n) * dtype_bytes(dtype);
    header[t.name] = {{"dtype", dtype_text}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    numels.push_back(n);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  OutputFile f(path, "safetensors writer:");  // whole or not at all
  const uint64_t n = text.size();
  f.write(&n, 8);
  f.write(text);
  std::vector<float> values;    // (numel) fp32, one tensor at a time
  std::vector<std::byte> data;  // (numel x dtype bytes)
  for (size_t i = 0; i < tensors.size(); ++i) {
    values.assign(size_t(numels[i]), 0.0f);
    produce(i, values);
    data.resize(values.size() * dtype_bytes(dtype));
    for (size_t e = 0; e < values.size(); ++e) put_value(data.data() + e * dtype_bytes(dtype), values[e], dtype);
    f.write(data.data(), data.size());
  }
  f.commit();
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsOut>& tensors,
                       const std::vector<std::span<const float>>& values, DType dtype,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "safetensors writer: '" + path.string() + "'";
  if (values.size() != tensors.size())
    throw InputError(where + ": " + std::to_string(tensors.size()) + " tensors but " + std::to_string(values.size()) +
                     " value arrays");
  for (size_t i = 0; i < tensors.size(); ++i)  // before the file is created
    if (int64_t(values[i].size()) != checked_numel(tensors[i], where))
      throw InputError(where + ": tensor '" + tensors[i].name + "' has " + std::to_string(values[i].size()) +
                       " values, its shape " + shape_text(tensors[i].shape) + " needs " +
                       std::to_string(checked_numel(tensors[i], where)));
  write_safetensors(
      path, tensors, dtype,
      [&](size_t i, std::span<float> out) { std::copy(values[i].begin(), values[i].end(), out.begin()); }, metadata);
}

}  // namespace tf::core
