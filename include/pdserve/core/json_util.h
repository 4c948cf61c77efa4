// Typed access to JSON fields with errors that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve {

using Json = nlohmann::json;

Result<Json> parse_json(const std::string& text, const std::string& what);
Result<Json> load_json_file(const std::string& path);

// A cursor over one JSON object; `where` names it in errors ("config.json: text_config").
class JsonFields {
 public:
  JsonFields(const Json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const;
  Result<int64_t> get_int(const char* key) const;
  Result<int64_t> get_int(const char* key, int64_t fallback) const;
  Result<double> get_double(const char* key) const;
  Result<double> get_double(const char* key, double fallback) const;
  Result<bool> get_bool(const char* key, bool fallback) const;
  Result<std::string> get_string(const char* key) const;
  Result<std::string> get_string(const char* key, const std::string& fallback) const;
  Result<std::vector<int64_t>> get_int_list(const char* key) const;
  Result<JsonFields> get_object(const char* key) const;
  Status error(const char* key, const std::string& what) const;
  const std::string& where() const { return where_; }
  const Json& json() const { return obj_; }

 private:
  const Json& obj_;
  std::string where_;
};

}  // namespace pdserve
