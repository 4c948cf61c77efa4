#include "pdserve/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "pdserve/core/json_util.h"

namespace pdserve {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<std::vector<TensorView>> parse_safetensors(const uint8_t* data, size_t size, const std::string& label) {
  if (size < 8) return data_loss(label + ": file is " + std::to_string(size) + " bytes, too short for a safetensors header");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(data[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    return data_loss(label + ": header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(size));
  std::string header(reinterpret_cast<const char*>(data + 8), header_len);
  Json j = Json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return data_loss(label + ": header is not a JSON object");
  const uint8_t* base = data + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  std::vector<TensorView> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const std::string where = label + ": tensor '" + name + "'";
    const Json& e = it.value();
    if (!e.is_object()) return data_loss(where + ": entry is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) return data_loss(where + ": missing dtype");
    TensorView t;
    t.name = name;
    if (!dtype_from_name(e["dtype"].get<std::string>(), &t.dtype))
      return unsupported(where + ": unsupported dtype " + e["dtype"].get<std::string>());
    if (!e.contains("shape") || !e["shape"].is_array()) return data_loss(where + ": missing shape");
    uint64_t numel = 1;
    for (const Json& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        return data_loss(where + ": shape has a non-integer or negative dimension");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim / 8)
        return data_loss(where + ": shape overflows");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
        !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      return data_loss(where + ": data_offsets must be two non-negative integers");
    uint64_t begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > data_size)
      return data_loss(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       ") fall outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    uint64_t expect = numel * static_cast<uint64_t>(dtype_size(t.dtype));
    if (end - begin != expect)
      return data_loss(where + ": holds " + std::to_string(end - begin) + " bytes but " + std::string(dtype_name(t.dtype)) +
                       t.shape_string() + " needs " + std::to_string(expect));
    t.data = base + begin;
    t.nbytes = static_cast<size_t>(expect);
    if (expect > 0) ranges.emplace_back(begin, end);
    out.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return data_loss(label + ": tensors overlap in the data section");
  return out;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto f = std::make_unique<SafetensorsFile>();
  PDS_ASSIGN_OR_RETURN(f->map_, MappedFile::open(path));
  PDS_ASSIGN_OR_RETURN(f->tensors_, parse_safetensors(f->map_.data(), f->map_.size(), path));
  for (auto& t : f->tensors_) t.file = &f->map_.path();
  return f;
}

Result<WeightStore> WeightStore::open_dir(const std::string& dir) {
  WeightStore ws;
  ws.dir_ = dir;
  std::string index_path = join_path(dir, "model.safetensors.index.json");
  std::map<std::string, std::string> expected;  // tensor -> file, from the index
  std::vector<std::string> files;
  if (file_exists(index_path)) {
    PDS_ASSIGN_OR_RETURN(Json idx, load_json_file(index_path));
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      return invalid_argument(index_path + ": field 'weight_map' is missing or not an object");
    std::set<std::string> uniq;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return invalid_argument(index_path + ": weight_map['" + it.key() + "'] is not a file name");
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." || f.empty())
        return invalid_argument(index_path + ": weight_map['" + it.key() + "'] names a path outside the directory: " + f);
      expected[it.key()] = f;
      uniq.insert(f);
    }
    files.assign(uniq.begin(), uniq.end());
  } else if (file_exists(join_path(dir, "model.safetensors"))) {
    files.push_back("model.safetensors");
  } else {
    return not_found(dir + ": neither model.safetensors.index.json nor model.safetensors exists");
  }
  for (const std::string& f : files) {
    std::string path = join_path(dir, f);
    if (!file_exists(path)) return not_found(index_path + " names shard " + f + ", which is missing");
    PDS_ASSIGN_OR_RETURN(auto sf, SafetensorsFile::open(path));
    for (const TensorView& t : sf->tensors()) {
      if (ws.by_name_.count(t.name)) return invalid_argument(path + ": tensor '" + t.name + "' appears in two shards");
      ws.by_name_[t.name] = &t;
    }
    ws.files_.push_back(std::move(sf));
  }
  for (const auto& [name, file] : expected) {
    const TensorView* t = ws.find(name);
    if (!t) return not_found(index_path + ": tensor '" + name + "' is not in its shard " + file);
    if (*t->file != join_path(dir, file))
      return invalid_argument(index_path + ": tensor '" + name + "' is listed in " + file + " but stored in " + *t->file);
  }
  return ws;
}

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Result<const TensorView*> WeightStore::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView* t = find(name);
  if (!t) return not_found(dir_ + ": tensor '" + name + "' is missing from the checkpoint");
  if (t->shape != shape) {
    TensorView want;
    want.shape = shape;
    return invalid_argument(*t->file + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " + want.shape_string());
  }
  return t;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : by_name_) out.push_back(n);
  return out;
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes;
  return n;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  entries_.push_back({name, dtype, std::move(shape), std::move(bytes)});
}

std::vector<uint8_t> encode_f32(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> encode_bf16(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

void SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  add(name, DType::kF32, std::move(shape), encode_f32(v));
}

void SafetensorsWriter::add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  add(name, DType::kBF16, std::move(shape), encode_bf16(v));
}

std::string SafetensorsWriter::serialize() const {
  Json header = Json::object();
  uint64_t off = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", std::string(dtype_name(e.dtype))}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h.push_back(' ');  // align the data section
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  for (const Entry& e : entries_) out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  return out;
}

Status SafetensorsWriter::write(const std::string& path) const { return write_file(path, serialize()); }

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

size_t SafetensorsWriter::payload_bytes() const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.bytes.size();
  return n;
}

float tensor_float_at(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return f16_to_f32(h);
    }
    default:
      return 0.0f;
  }
}

std::vector<float> tensor_to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = tensor_float_at(t, i);
  return out;
}

}  // namespace pdserve
