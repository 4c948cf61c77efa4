// A small multilingual training text for the tiny tokenizer, generated from word lists
// written for this project with a fixed-seed PRNG, so every build learns the same merges.
// Mixed scripts, code, numbers and whitespace shapes so that many kinds of merges fire.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tiny_corpus.h"

namespace pdserve::tokenizer {
namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

constexpr std::string_view kEnglish =
    "the a an of to and in is it that for on with as was be by this are at from or have not "
    "but they which one you were all we when there can been has more if will would about "
    "time into only other new some could these two may first then do any like my now over "
    "such our man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go came "
    "right used take three model token server request engine memory batch cache layer expert "
    "attention prefill decode stream weight tensor kernel latency throughput queue worker "
    "river mountain garden window kitchen morning evening music letter number question answer "
    "quickly slowly carefully happily really nothing everything something understand remember";

constexpr std::string_view kEuropean =
    "über Straße schön Mädchen Grüße größer Äpfel Öffnung café déjà naïve élève français "
    "garçon être très où année niño señor mañana corazón canción pequeño así también "
    "Ελλάδα καλημέρα ευχαριστώ θάλασσα ουρανός Москва привет спасибо хорошо университет "
    "работа человек время жизнь Việt Nam tiếng xin chào cảm ơn Kraków zażółć gęślą jaźń "
    "İstanbul güzel çiçek şehir öğrenci København Ærø Ålesund Reykjavík þetta eða";

// Han text written as runs; the regex keeps each run whole, so long pieces get merged.
constexpr std::string_view kHan =
    "我们的模型可以理解中文和英文 今天天气很好 我想去公园散步 这个问题非常有意思 "
    "请问你叫什么名字 计算机科学与技术 人工智能正在改变世界 学习编程需要耐心 "
    "服务器收到请求以后开始推理 内存带宽决定了解码速度 长文本需要更多的缓存 "
    "春天来了花开了 山高水长 风和日丽 百花齐放 一二三四五六七八九十 东南西北中 "
    "上下左右前后 大小多少高低 日月星辰 江河湖海 父母兄弟姐妹 朋友同学老师学生 "
    "电脑手机网络数据文件程序 开始结束继续停止 时间空间世界国家城市 语言文字文章 "
    "吃饭喝水睡觉工作休息 早上中午晚上 今年明年去年 因为所以但是如果虽然";

constexpr std::string_view kKanaHangul =
    "こんにちは ありがとう すみません 日本語 東京 カタカナ ひらがな コンピューター "
    "プログラム サーバー データ 안녕하세요 감사합니다 한국어 서울 컴퓨터 프로그램 "
    "사랑해요 학교 친구 มาก ภาษาไทย สวัสดี नमस्ते भारत हिन्दी धन्यवाद "
    "مرحبا شكرا العربية كتاب שלום תודה עברית ქართული Հայերեն";

constexpr std::string_view kSymbols =
    "😀 😂 🎉 👍 ❤️ 🚀 🔥 ✨ 🙏 👨‍👩‍👧 🇯🇵 🏳️‍🌈 © ® ™ → ← ≤ ≥ ≠ ∞ ∑ √ π ° € £ ¥ ₹ § ¶ … — – • "
    "é ñ ü Å ǅ ǈ ﬁ ſt Ⅻ ① ½ ²";

constexpr std::string_view kCode =
    "def return import from class self None True False if else elif for while in not and or "
    "int main void char const auto struct std::vector std::string #include <iostream> "
    "printf(\"%d\\n\", x); fn let mut impl pub use match Some Ok Err async await "
    "function var console.log(x); => === !== {} [] () ; :: -> && || += -= *= /= << >> "
    "SELECT * FROM users WHERE id = 42; git commit -m cmake --build make_shared<T>() "
    "x_1 buf_len kMaxTokens tokenize_prompt HTTP/1.1 200 OK Content-Type: application/json";

constexpr std::string_view kContractions = "I'm you're we've they'll she'd it's don't can't WON'T He'S";

void append_words(Rng& r, std::string_view list, bool spaced, std::string* out) {
  static thread_local std::vector<std::string_view> words;
  words = split(list);
  const size_t n = 4 + r.below(12);
  for (size_t i = 0; i < n; ++i) {
    std::string w(words[r.below(words.size())]);
    if (i == 0 && spaced && !w.empty() && w[0] >= 'a' && w[0] <= 'z' && r.below(2)) w[0] = static_cast<char>(w[0] - 32);
    if (spaced && i > 0) *out += ' ';
    *out += w;
    if (r.below(9) == 0) *out += ",";
  }
}

}  // namespace

std::string tiny_training_corpus(size_t target_bytes) {
  Rng r{20260902};
  std::string out;
  static constexpr std::array<std::string_view, 5> kEnds = {".", "!", "?", "。", "…"};
  while (out.size() < target_bytes) {
    switch (r.below(10)) {
      case 0: case 1: case 2:
        append_words(r, kEnglish, true, &out);
        break;
      case 3:
        append_words(r, kEuropean, true, &out);
        break;
      case 4: {  // Han runs: concatenate a few phrases without spaces
        auto phrases = split(kHan);
        for (size_t i = 0, n = 1 + r.below(4); i < n; ++i) out += phrases[r.below(phrases.size())];
        break;
      }
      case 5:
        append_words(r, kKanaHangul, true, &out);
        break;
      case 6:
        append_words(r, kCode, r.below(3) != 0, &out);
        break;
      case 7:
        for (size_t i = 0, n = 1 + r.below(6); i < n; ++i) out += std::to_string(r.next() % 10'000'000) + (r.below(2) ? " " : ",");
        break;
      case 8:
        append_words(r, kSymbols, r.below(2) != 0, &out);
        break;
      default:
        if (r.below(3) == 0) {
          append_words(r, kContractions, true, &out);
        } else {  // made-up words from syllables: an open-ended vocabulary, so merges never run out
          static constexpr std::string_view kSyl[] = {"ka", "ri", "to", "me", "na", "shi", "lu", "vo", "pe", "dan",
                                                      "gor", "el", "is", "qua", "zen", "tho", "ber", "mi", "ax", "ul"};
          for (size_t i = 0, n = 3 + r.below(8); i < n; ++i) {
            out += ' ';
            for (size_t k = 0, m = 1 + r.below(4); k < m; ++k) out += kSyl[r.below(std::size(kSyl))];
          }
        }
        break;
    }
    out += kEnds[r.below(kEnds.size())];
    switch (r.below(6)) {  // whitespace shapes between sentences
      case 0: out += "\n"; break;
      case 1: out += "\n\n"; break;
      case 2: out += "\n" + std::string(4 * (1 + r.below(3)), ' '); break;
      case 3: out += "\t"; break;
      default: out += " "; break;
    }
  }
  return out;
}

}  // namespace pdserve::tokenizer
