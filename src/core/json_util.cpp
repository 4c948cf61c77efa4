#include "pdserve/core/json_util.h"

#include <cmath>

#include "pdserve/core/file_util.h"

namespace pdserve {

Result<Json> parse_json(const std::string& text, const std::string& what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(what + ": not valid JSON");
  return j;
}

Result<Json> load_json_file(const std::string& path) {
  PDS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path);
}

Status JsonFields::error(const char* key, const std::string& what) const {
  return invalid_argument(where_ + ": field '" + key + "' " + what);
}

bool JsonFields::has(const char* key) const {
  return obj_.is_object() && obj_.contains(key) && !obj_.at(key).is_null();
}

Result<int64_t> JsonFields::get_int(const char* key) const {
  if (!has(key)) return error(key, "is missing");
  const Json& v = obj_.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  return error(key, "must be an integer, got " + v.dump());
}

Result<int64_t> JsonFields::get_int(const char* key, int64_t fallback) const {
  if (!has(key)) return fallback;
  return get_int(key);
}

Result<double> JsonFields::get_double(const char* key) const {
  if (!has(key)) return error(key, "is missing");
  const Json& v = obj_.at(key);
  if (!v.is_number()) return error(key, "must be a number, got " + v.dump());
  double d = v.get<double>();
  if (!std::isfinite(d)) return error(key, "must be finite");
  return d;
}

Result<double> JsonFields::get_double(const char* key, double fallback) const {
  if (!has(key)) return fallback;
  return get_double(key);
}

Result<bool> JsonFields::get_bool(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  const Json& v = obj_.at(key);
  if (!v.is_boolean()) return error(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

Result<std::string> JsonFields::get_string(const char* key) const {
  if (!has(key)) return error(key, "is missing");
  const Json& v = obj_.at(key);
  if (!v.is_string()) return error(key, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

Result<std::string> JsonFields::get_string(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  return get_string(key);
}

Result<std::vector<int64_t>> JsonFields::get_int_list(const char* key) const {
  if (!has(key)) return error(key, "is missing");
  const Json& v = obj_.at(key);
  if (!v.is_array()) return error(key, "must be a list of integers");
  std::vector<int64_t> out;
  for (const Json& e : v) {
    if (!e.is_number_integer()) return error(key, "must be a list of integers, found " + e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

Result<JsonFields> JsonFields::get_object(const char* key) const {
  if (!has(key)) return error(key, "is missing");
  const Json& v = obj_.at(key);
  if (!v.is_object()) return error(key, "must be an object");
  return JsonFields(v, where_ + "." + key);
}

}  // namespace pdserve
