// safetensors: reader (single file or sharded with model.safetensors.index.json) and writer.
// Every length and offset in a header is checked before use: a lying file gives an error
// that names the file and the tensor, never a crash. This parser is a fuzz target.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/core/dtype.h"
#include "pdserve/core/file_util.h"
#include "pdserve/core/status.h"

namespace pdserve {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  const std::string* file = nullptr;  // owning file path, for error messages

  int64_t numel() const;
  std::string shape_string() const;
};

// Parses a safetensors image already in memory. `label` names it in errors.
Result<std::vector<TensorView>> parse_safetensors(const uint8_t* data, size_t size, const std::string& label);

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return map_.path(); }

 private:
  MappedFile map_;
  std::vector<TensorView> tensors_;
};

// All tensors of a checkpoint directory, by name.
class WeightStore {
 public:
  // dir holds model.safetensors.index.json (sharded) or a single model.safetensors.
  static Result<WeightStore> open_dir(const std::string& dir);

  const TensorView* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // The tensor, checked for dtype and shape; the error names the file and tensor.
  Result<const TensorView*> get(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
};

// Builds one safetensors file in memory and writes it.
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
  void add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
  std::string serialize() const;
  Status write(const std::string& path) const;
  std::vector<std::string> names() const;
  size_t payload_bytes() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
};

// Raw little-endian bytes of fp32 values, as F32 or rounded to BF16.
std::vector<uint8_t> encode_f32(const std::vector<float>& values);
std::vector<uint8_t> encode_bf16(const std::vector<float>& values);

// Reads element i of a float tensor (F32, BF16 or F16) as float.
float tensor_float_at(const TensorView& t, int64_t i);
// Copies a float tensor (F32 / BF16 / F16) into fp32.
std::vector<float> tensor_to_f32(const TensorView& t);

}  // namespace pdserve
