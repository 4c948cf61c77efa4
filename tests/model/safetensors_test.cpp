// The safetensors reader: good files load; every lying or broken file gives a named error.
#include <gtest/gtest.h>

#include <cstring>

#include "pdserve/core/file_util.h"
#include "pdserve/core/json_util.h"
#include "pdserve/model/model.h"
#include "pdserve/model/safetensors.h"
#include "test_models.h"

namespace pdserve {
namespace {

std::string image_with_header(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\x01');
}

Status parse(const std::string& img) {
  auto r = parse_safetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "x.safetensors");
  return r.is_ok() ? Status::ok() : r.status();
}

TEST(Safetensors, WriterAndReaderRoundTrip) {
  SafetensorsWriter w;
  w.add_f32("a", {2, 2}, {1, 2, 3, 4});
  w.add_bf16("b", {3}, {0.5f, -1.0f, 2.0f});
  w.add("c", DType::kU8, {4}, {1, 2, 3, 4});
  std::string img = w.serialize();
  auto r = parse_safetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "x");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 3u);
  for (const TensorView& t : *r) {
    if (t.name == "a") {
      EXPECT_EQ(tensor_to_f32(t), (std::vector<float>{1, 2, 3, 4}));
    } else if (t.name == "b") {
      EXPECT_EQ(tensor_to_f32(t), (std::vector<float>{0.5f, -1.0f, 2.0f}));
    } else {
      EXPECT_EQ(t.data[3], 4);
    }
  }
}

TEST(Safetensors, LyingHeadersAreRefused) {
  struct Case {
    std::string img, expect;
  };
  const std::vector<Case> cases = {
      {"abc", "too short"},
      {std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "header length"},
      {image_with_header("{not json", 0), "not a JSON object"},
      {image_with_header(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "outside the data section"},
      {image_with_header(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16), "needs 12"},
      {image_with_header(R"({"t":{"dtype":"Q9","shape":[4],"data_offsets":[0,4]}})", 4), "unsupported dtype Q9"},
      {image_with_header(R"({"t":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", 4), "negative"},
      {image_with_header(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", 4), "outside the data section"},
      {image_with_header(R"({"t":{"dtype":"U8","shape":[4]}})", 4), "data_offsets"},
      {image_with_header(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", 4), "overflows"},
      {image_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6), "overlap"},
  };
  for (const Case& c : cases) {
    Status st = parse(c.img);
    ASSERT_FALSE(st.is_ok()) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
  }
}

// A copy of a tiny model directory that a test may break.
std::string copy_model(const std::string& tag) {
  std::string dst = testing::temp_dir("broken") + "/" + tag;
  std::string cmd = "rm -rf '" + dst + "' && cp -r '" + testing::tiny_model_dir("tiny-k3") + "' '" + dst + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dst;
}

std::string load_error(const std::string& dir) {
  auto m = Model::load(dir);
  return m.is_ok() ? "" : m.status().message();
}

TEST(Checkpoint, TinyModelLoadsAndSkipsVision) {
  auto ws = WeightStore::open_dir(testing::tiny_model_dir("tiny-k3"));
  ASSERT_TRUE(ws.is_ok()) << ws.status().message();
  EXPECT_TRUE(ws->contains("vision_tower.patch_embed.proj.weight"));
  EXPECT_EQ(load_error(testing::tiny_model_dir("tiny-k3")), "");
}

TEST(Checkpoint, TruncatedShardNamesTheFile) {
  std::string dir = copy_model("truncated");
  std::string path = dir + "/model-00002-of-00003.safetensors";
  std::string bytes = *read_file(path);
  ASSERT_TRUE(write_file(path, bytes.substr(0, bytes.size() - 100)).is_ok());
  std::string err = load_error(dir);
  EXPECT_NE(err.find("model-00002-of-00003.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

TEST(Checkpoint, MissingShardIsNamed) {
  std::string dir = copy_model("missing-shard");
  std::remove((dir + "/model-00003-of-00003.safetensors").c_str());
  std::string err = load_error(dir);
  EXPECT_NE(err.find("names shard model-00003-of-00003.safetensors, which is missing"), std::string::npos) << err;
}

TEST(Checkpoint, IndexNamingAnAbsentTensor) {
  std::string dir = copy_model("ghost");
  Json idx = *load_json_file(dir + "/model.safetensors.index.json");
  idx["weight_map"]["language_model.model.ghost.weight"] = "model-00001-of-00003.safetensors";
  ASSERT_TRUE(write_file(dir + "/model.safetensors.index.json", idx.dump()).is_ok());
  std::string err = load_error(dir);
  EXPECT_NE(err.find("tensor 'language_model.model.ghost.weight' is not in its shard"), std::string::npos) << err;
}

TEST(Checkpoint, IndexPathOutsideTheDirectory) {
  std::string dir = copy_model("escape");
  Json idx = *load_json_file(dir + "/model.safetensors.index.json");
  idx["weight_map"]["x"] = "../../etc/passwd";
  ASSERT_TRUE(write_file(dir + "/model.safetensors.index.json", idx.dump()).is_ok());
  EXPECT_NE(load_error(dir).find("outside the directory"), std::string::npos);
}

// Rewrites one shard without `drop`, or with `reshape` given a new shape.
void rewrite_shard(const std::string& dir, const std::string& name, bool drop, std::vector<int64_t> new_shape = {}) {
  Json idx = *load_json_file(dir + "/model.safetensors.index.json");
  std::string file = idx["weight_map"][name];
  auto sf = SafetensorsFile::open(dir + "/" + file);
  ASSERT_TRUE(sf.is_ok());
  SafetensorsWriter w;
  for (const TensorView& t : (*sf)->tensors()) {
    if (t.name == name && drop) continue;
    std::vector<int64_t> shape = (t.name == name) ? new_shape : t.shape;
    w.add(t.name, t.dtype, shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  }
  std::string img = w.serialize();
  sf->reset();
  ASSERT_TRUE(write_file(dir + "/" + file, img).is_ok());
  if (drop) {
    idx["weight_map"].erase(name);
    ASSERT_TRUE(write_file(dir + "/model.safetensors.index.json", idx.dump()).is_ok());
  }
}

TEST(Checkpoint, MissingTensorIsNamed) {
  std::string dir = copy_model("missing-tensor");
  rewrite_shard(dir, "language_model.model.layers.2.self_attn.kv_b_proj.weight", true);
  std::string err = load_error(dir);
  EXPECT_NE(err.find("tensor 'language_model.model.layers.2.self_attn.kv_b_proj.weight' is missing"), std::string::npos) << err;
}

TEST(Checkpoint, MisshapenTensorIsNamed) {
  std::string dir = copy_model("misshapen");
  const std::string name = "language_model.model.layers.2.self_attn.kv_a_proj_with_mqa.weight";
  auto ws = WeightStore::open_dir(dir);
  const TensorView* t = ws->find(name);
  ASSERT_NE(t, nullptr);
  std::vector<int64_t> flipped = {t->shape[1], t->shape[0]};
  rewrite_shard(dir, name, false, flipped);
  std::string err = load_error(dir);
  EXPECT_NE(err.find("tensor '" + name + "' has shape [64, 48]"), std::string::npos) << err;
}

TEST(Checkpoint, PackedExpertWithWrongDtype) {
  std::string dir = copy_model("expert-dtype");
  const std::string name = "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight_scale";
  Json idx = *load_json_file(dir + "/model.safetensors.index.json");
  std::string file = idx["weight_map"][name];
  auto sf = SafetensorsFile::open(dir + "/" + file);
  SafetensorsWriter w;
  for (const TensorView& t : (*sf)->tensors()) {
    if (t.name == name) {
      std::vector<uint8_t> bytes(t.nbytes * 2, 0);
      w.add(t.name, DType::kBF16, t.shape, bytes);
    } else {
      w.add(t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    }
  }
  std::string img = w.serialize();
  sf->reset();
  ASSERT_TRUE(write_file(dir + "/" + file, img).is_ok());
  std::string err = load_error(dir);
  EXPECT_NE(err.find(name + "' must be U8"), std::string::npos) << err;
}

}  // namespace
}  // namespace pdserve
