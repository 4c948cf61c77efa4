#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace pdserve::tokenizer {

const char* const kKimiPatternReference =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Translation to PCRE2 10.42 (no class intersection there):
//  * `[X&&[^\p{Han}]]` -> `(?:(?!\p{sc:Han})[X])`.
//  * `\p{Han}` -> `\p{sc:Han}`: Rust's regex crate (tiktoken) reads a bare script name as the
//    Script property, PCRE2 >= 10.40 as Script_Extensions, which would pull "。" and other
//    shared CJK punctuation into Han runs.
//  * `\s` -> an explicit White_Space class. Under UCP, PCRE2's \s is "Z or tab/LF/VT/FF/CR",
//    which misses U+0085; Rust's \s is the White_Space property. `\S` is its complement.
// tools/tokenizer/tiktoken_compare.py checks that the two patterns split identically.
#define PDS_WS R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"
#define PDS_UPPER R"((?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]))"
#define PDS_LOWER R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}]))"
#define PDS_CONTRACTION R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
const char* const kKimiPatternPcre2 =
    R"([\p{sc:Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?)" PDS_UPPER "*" PDS_LOWER "+" PDS_CONTRACTION
    R"(|[^\r\n\p{L}\p{N}]?)" PDS_UPPER "+" PDS_LOWER "*" PDS_CONTRACTION
    R"(|\p{N}{1,3})"
    R"(| ?[^)" PDS_WS R"(\p{L}\p{N}]+[\r\n]*)"
    R"(|[)" PDS_WS R"(]*[\r\n]+)"
    R"(|[)" PDS_WS R"(]+(?![^)" PDS_WS R"(]))"
    R"(|[)" PDS_WS R"(]+)";
#undef PDS_WS
#undef PDS_UPPER
#undef PDS_LOWER
#undef PDS_CONTRACTION

namespace {

// Per-thread match state: room for the whole-match offsets only (no pattern has captures we
// read), and a JIT stack large enough for the 25,000-character runs the encoder can hand us
// (the letter groups keep one backtracking frame per character).
struct ThreadState {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  ThreadState() { pcre2_jit_stack_assign(mctx, nullptr, stack); }
  ~ThreadState() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(stack);
  }
};

ThreadState& thread_state() {
  thread_local ThreadState st;
  return st;
}

}  // namespace

Result<std::shared_ptr<const PreTokenizer>> PreTokenizer::create(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return invalid_argument("pre-tokeniser pattern does not compile at offset " + std::to_string(err_off) +
                            ": " + reinterpret_cast<const char*>(buf));
  }
  std::shared_ptr<PreTokenizer> p(new PreTokenizer());
  p->code_ = code;
  p->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const PreTokenizer>(std::move(p));
}

PreTokenizer::~PreTokenizer() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

int PreTokenizer::find(std::string_view text, size_t pos, size_t* start, size_t* end) const {
  auto* code = static_cast<const pcre2_code*>(code_);
  ThreadState& st = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc;
  if (jit_) {
    rc = pcre2_jit_match(code, subject, text.size(), pos, 0, st.md, st.mctx);
    // The JIT stack has a hard cap; the interpreter keeps its frames on the heap.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.md, nullptr);
  } else {
    rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) return rc;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
  *start = ov[0];
  *end = ov[1];
  return 1;
}

}  // namespace pdserve::tokenizer
