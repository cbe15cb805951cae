// Tokenizer tests. The golden ids below were computed offline by Hugging
// Face `tokenizers` 0.23.3 (Tokenizer.from_file(...).encode(text,
// add_special_tokens=False); for the shared tokenizer after adding the
// tokenizer_config.json added_tokens_decoder as special tokens, which is what
// transformers' AutoTokenizer does and gives the same ids). `round_trips`
// records whether HF's decode gives the text back. The two small tokenizer
// JSONs are the exact files HF read: a GPT-2-style one ("a b" merges,
// ByteLevel regex split, added tokens with lstrip/rstrip/single_word) and a
// Llama-3-style one (pair merges, Split regex, ignore_merges).
#include "trainer/data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/errors.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

struct Golden {
  std::string text;
  std::vector<int64_t> ids;
  bool round_trips;
};

// clang-format off
const std::vector<Golden> kSharedGolden = {
    {"Hello world", {72, 101, 108, 108, 111, 119, 111, 114, 108, 100}, false},
    {"  two  spaces\n\nnew line\ttab\r\n", {116, 119, 111, 115, 112, 97, 99, 101, 115, 110, 101, 119, 108, 105, 110, 101, 116, 97, 98}, false},
    {"123 4567 89", {49, 50, 51, 52, 53, 54, 55, 56, 57}, false},
    {"Hello, world! (ok?) [x] {y} <z>", {72, 101, 108, 108, 111, 44, 119, 111, 114, 108, 100, 33, 40, 111, 107, 63, 41, 91, 120, 93, 123, 121, 125, 60, 122, 62}, false},
    {"café naïve Ωmega ß", {99, 97, 102, 110, 97, 118, 101, 109, 101, 103, 97}, false},
    {"日本語のテキスト", {}, false},
    {"emoji 😀👍🏽!", {101, 109, 111, 106, 105, 33}, false},
    {"It's we're I'll DON'T", {73, 116, 39, 115, 119, 101, 39, 114, 101, 73, 39, 108, 108, 68, 79, 78, 39, 84}, false},
    {"x\177y\001z w　v", {120, 121, 122, 119, 118}, false},
    {"a<|begin_of_text|>b<|end_of_text|>c<|pad|>[PAD]</think>", {97, 2002, 98, 2003, 99, 2001, 2019, 2015}, true},
    {"<|begin_of_text|><|begin_of_text|>", {2002, 2002}, true},
};

const std::vector<Golden> kGpt2Golden = {
    {"Hello world", {72, 101, 262, 111, 267}, true},
    {"  two  spaces\n\nnew line\ttab\r\n", {32, 256, 119, 111, 32, 32, 115, 112, 97, 99, 101, 115, 10, 10, 110, 101, 119, 32, 108, 259, 101, 9, 116, 97, 98, 13, 10}, true},
    {"123 4567 89", {270, 32, 272, 54, 55, 32, 56, 57}, true},
    {"Hello, world! (ok?) [x] {y} <z>", {72, 101, 262, 111, 44, 267, 33, 32, 40, 289, 63, 41, 32, 91, 120, 93, 32, 123, 121, 125, 32, 60, 122, 62}, true},
    {"café naïve Ωmega ß", {286, 32, 110, 97, 195, 175, 118, 101, 32, 206, 169, 109, 101, 103, 97, 32, 195, 159}, true},
    {"日本語のテキスト", {230, 151, 165, 230, 156, 172, 232, 170, 158, 227, 129, 174, 227, 131, 134, 227, 130, 173, 227, 130, 185, 227, 131, 136}, true},
    {"emoji 😀👍🏽!", {101, 109, 111, 106, 105, 32, 240, 159, 152, 128, 240, 159, 145, 141, 240, 159, 143, 189, 33}, true},
    {"It's we're I'll DON'T", {73, 116, 274, 263, 101, 39, 114, 101, 32, 73, 39, 262, 32, 68, 79, 78, 39, 84}, true},
    {"x\177y\001z w　v", {120, 127, 121, 1, 122, 194, 160, 119, 227, 128, 128, 118}, true},
    {"Hello world the cat", {72, 101, 262, 111, 267, 258, 32, 283, 116}, true},
    {"café 123456 it's", {286, 32, 270, 272, 54, 32, 105, 116, 274}, true},
    {"  x\n\n\ny", {32, 279, 268, 10, 121}, true},
    {"I'M WE'RE", {73, 39, 77, 32, 87, 69, 39, 82, 69}, true},
    {"a<|endoftext|>b<|endoftext|>", {97, 287, 98, 287}, true},
    {"((hello!!\n", {40, 40, 257, 262, 111, 281, 10}, true},
    {" [MASK]  x", {288, 120}, false},
    {"ok ok! _ok éok ²ok", {289, 32, 289, 33, 32, 95, 111, 107, 32, 285, 111, 107, 32, 194, 178, 289}, true},
    {"tab\t\tx  ", {116, 97, 98, 9, 9, 120, 278}, true},
    {"the  the   the", {116, 257, 32, 258, 278, 258}, true},
    {"3456 1234", {271, 53, 54, 32, 270, 52}, true},
};

const std::vector<Golden> kLlama3Golden = {
    {"Hello world", {72, 101, 262, 111, 267}, true},
    {"  two  spaces\n\nnew line\ttab\r\n", {32, 256, 119, 111, 32, 32, 115, 112, 97, 99, 101, 115, 268, 110, 101, 119, 32, 108, 259, 101, 9, 116, 285, 13, 10}, true},
    {"123 4567 89", {270, 32, 272, 54, 55, 32, 56, 57}, true},
    {"Hello, world! (ok?) [x] {y} <z>", {72, 101, 262, 111, 44, 267, 33, 32, 40, 111, 107, 63, 41, 32, 91, 120, 93, 32, 123, 121, 125, 32, 60, 122, 62}, true},
    {"café naïve Ωmega ß", {284, 195, 169, 32, 110, 97, 195, 175, 118, 101, 32, 206, 169, 109, 101, 103, 97, 32, 195, 159}, true},
    {"日本語のテキスト", {230, 151, 165, 230, 156, 172, 232, 170, 158, 227, 129, 174, 227, 131, 134, 227, 130, 173, 227, 130, 185, 227, 131, 136}, true},
    {"emoji 😀👍🏽!", {101, 109, 111, 106, 105, 32, 240, 159, 152, 128, 240, 159, 145, 141, 240, 159, 143, 189, 33}, true},
    {"It's we're I'll DON'T", {73, 116, 274, 263, 101, 39, 114, 101, 32, 73, 39, 262, 32, 68, 79, 78, 39, 84}, true},
    {"x\177y\001z w　v", {120, 127, 121, 1, 122, 194, 160, 119, 227, 128, 128, 118}, true},
    {"Hello world the cat", {72, 101, 262, 111, 267, 258, 32, 283, 116}, true},
    {" hello abcabc abcabcabc", {287, 32, 285, 283, 98, 99, 32, 285, 283, 98, 283, 98, 99}, true},
    {"HELLO'S 'Re 'LL", {72, 69, 76, 76, 79, 39, 83, 32, 39, 82, 101, 32, 39, 76, 76}, true},
    {"I'LLAMA it'SLOW", {73, 39, 76, 76, 65, 77, 65, 32, 105, 116, 39, 83, 76, 79, 87}, true},
    {"12345678", {270, 272, 54, 55, 56}, true},
    {"a\r\n\r\nb  \n c", {97, 13, 10, 13, 10, 98, 278, 10, 32, 99}, true},
    {"((hello!!\n\n", {40, 40, 257, 262, 111, 281, 268}, true},
    {"<|begin_of_text|>the<|end_of_text|>", {289, 116, 257, 290}, true},
    {"3456 1234", {271, 53, 54, 32, 270, 52}, true},
};

const std::vector<Golden> kGpt2PrefixGolden = {
    {"hello world", {32, 257, 262, 111, 267}, false},
    {"a[MASK]b", {32, 97, 288, 32, 98}, false},
    {"<|endoftext|>x", {287, 279}, false},
    {" already spaced", {32, 97, 108, 114, 101, 97, 100, 121, 32, 115, 112, 97, 99, 101, 100}, true},
};

const char* const kGpt2Json = R"json(
{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":287,"content":"<|endoftext|>",
"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":288,"content":
"[MASK]","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true},{"id":289,
"content":"ok","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false}],
"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex"
:true},"post_processor":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},
"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},"model":{"type":
"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":
false,"byte_fallback":false,"ignore_merges":false,"vocab":{"\u0100":0,"\u0101":1,"\u0102":2,"\u0103":3,
"\u0104":4,"\u0105":5,"\u0106":6,"\u0107":7,"\u0108":8,"\u0109":9,"\u010a":10,"\u010b":11,"\u010c":12,"\u010d"
:13,"\u010e":14,"\u010f":15,"\u0110":16,"\u0111":17,"\u0112":18,"\u0113":19,"\u0114":20,"\u0115":21,"\u0116":
22,"\u0117":23,"\u0118":24,"\u0119":25,"\u011a":26,"\u011b":27,"\u011c":28,"\u011d":29,"\u011e":30,"\u011f":31
,"\u0120":32,"!":33,"\"":34,"#":35,"$":36,"%":37,"&":38,"'":39,"(":40,")":41,"*":42,"+":43,",":44,"-":45,".":
46,"/":47,"0":48,"1":49,"2":50,"3":51,"4":52,"5":53,"6":54,"7":55,"8":56,"9":57,":":58,";":59,"<":60,"=":61,
">":62,"?":63,"@":64,"A":65,"B":66,"C":67,"D":68,"E":69,"F":70,"G":71,"H":72,"I":73,"J":74,"K":75,"L":76,"M":
77,"N":78,"O":79,"P":80,"Q":81,"R":82,"S":83,"T":84,"U":85,"V":86,"W":87,"X":88,"Y":89,"Z":90,"[":91,"\\":92,
"]":93,"^":94,"_":95,"`":96,"a":97,"b":98,"c":99,"d":100,"e":101,"f":102,"g":103,"h":104,"i":105,"j":106,"k":
107,"l":108,"m":109,"n":110,"o":111,"p":112,"q":113,"r":114,"s":115,"t":116,"u":117,"v":118,"w":119,"x":120,
"y":121,"z":122,"{":123,"|":124,"}":125,"~":126,"\u0121":127,"\u0122":128,"\u0123":129,"\u0124":130,"\u0125":
131,"\u0126":132,"\u0127":133,"\u0128":134,"\u0129":135,"\u012a":136,"\u012b":137,"\u012c":138,"\u012d":139,
"\u012e":140,"\u012f":141,"\u0130":142,"\u0131":143,"\u0132":144,"\u0133":145,"\u0134":146,"\u0135":147,
"\u0136":148,"\u0137":149,"\u0138":150,"\u0139":151,"\u013a":152,"\u013b":153,"\u013c":154,"\u013d":155,
"\u013e":156,"\u013f":157,"\u0140":158,"\u0141":159,"\u0142":160,"\u00a1":161,"\u00a2":162,"\u00a3":163,
"\u00a4":164,"\u00a5":165,"\u00a6":166,"\u00a7":167,"\u00a8":168,"\u00a9":169,"\u00aa":170,"\u00ab":171,
"\u00ac":172,"\u0143":173,"\u00ae":174,"\u00af":175,"\u00b0":176,"\u00b1":177,"\u00b2":178,"\u00b3":179,
"\u00b4":180,"\u00b5":181,"\u00b6":182,"\u00b7":183,"\u00b8":184,"\u00b9":185,"\u00ba":186,"\u00bb":187,
"\u00bc":188,"\u00bd":189,"\u00be":190,"\u00bf":191,"\u00c0":192,"\u00c1":193,"\u00c2":194,"\u00c3":195,
"\u00c4":196,"\u00c5":197,"\u00c6":198,"\u00c7":199,"\u00c8":200,"\u00c9":201,"\u00ca":202,"\u00cb":203,
"\u00cc":204,"\u00cd":205,"\u00ce":206,"\u00cf":207,"\u00d0":208,"\u00d1":209,"\u00d2":210,"\u00d3":211,
"\u00d4":212,"\u00d5":213,"\u00d6":214,"\u00d7":215,"\u00d8":216,"\u00d9":217,"\u00da":218,"\u00db":219,
"\u00dc":220,"\u00dd":221,"\u00de":222,"\u00df":223,"\u00e0":224,"\u00e1":225,"\u00e2":226,"\u00e3":227,
"\u00e4":228,"\u00e5":229,"\u00e6":230,"\u00e7":231,"\u00e8":232,"\u00e9":233,"\u00ea":234,"\u00eb":235,
"\u00ec":236,"\u00ed":237,"\u00ee":238,"\u00ef":239,"\u00f0":240,"\u00f1":241,"\u00f2":242,"\u00f3":243,
"\u00f4":244,"\u00f5":245,"\u00f6":246,"\u00f7":247,"\u00f8":248,"\u00f9":249,"\u00fa":250,"\u00fb":251,
"\u00fc":252,"\u00fd":253,"\u00fe":254,"\u00ff":255,"\u0120t":256,"he":257,"\u0120the":258,"in":259,"ing":260,
"er":261,"ll":262,"\u0120w":263,"or":264,"\u0120wor":265,"\u0120worl":266,"\u0120world":267,"\u010a\u010a":268
,"12":269,"123":270,"34":271,"45":272,"LA":273,"'s":274,"'M":275,"'R":276,"'RE":277,"\u0120\u0120":278,
"\u0120x":279,"(h":280,"!!":281,"!!\u010a":282,"ca":283,"caf":284,"\u00c3\u00a9":285,"caf\u00c3\u00a9":286},
"merges":["\u0120 t","h e","\u0120t he","i n","in g","e r","l l","\u0120 w","o r","\u0120w or","\u0120wor l"
,"\u0120worl d","\u010a \u010a","1 2","12 3","3 4","4 5","L A","' s","' M","' R","'R E","\u0120 \u0120"
,"\u0120 x","( h","! !","!! \u010a","c a","ca f","\u00c3 \u00a9","caf \u00c3\u00a9"]}}
)json";

const char* const kLlama3Json = R"json(
{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":289,"content":"<|begin_of_text|>",
"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":290,"content":
"<|end_of_text|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":
"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,
"use_regex":false}]},"post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":true,
"trim_offsets":true,"use_regex":true},"model":{"type":"BPE","dropout":null,"unk_token":null,
"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,
"ignore_merges":true,"vocab":{"\u0100":0,"\u0101":1,"\u0102":2,"\u0103":3,"\u0104":4,"\u0105":5,"\u0106":6,
"\u0107":7,"\u0108":8,"\u0109":9,"\u010a":10,"\u010b":11,"\u010c":12,"\u010d":13,"\u010e":14,"\u010f":15,
"\u0110":16,"\u0111":17,"\u0112":18,"\u0113":19,"\u0114":20,"\u0115":21,"\u0116":22,"\u0117":23,"\u0118":24,
"\u0119":25,"\u011a":26,"\u011b":27,"\u011c":28,"\u011d":29,"\u011e":30,"\u011f":31,"\u0120":32,"!":33,"\"":34
,"#":35,"$":36,"%":37,"&":38,"'":39,"(":40,")":41,"*":42,"+":43,",":44,"-":45,".":46,"/":47,"0":48,"1":49,"2":
50,"3":51,"4":52,"5":53,"6":54,"7":55,"8":56,"9":57,":":58,";":59,"<":60,"=":61,">":62,"?":63,"@":64,"A":65,
"B":66,"C":67,"D":68,"E":69,"F":70,"G":71,"H":72,"I":73,"J":74,"K":75,"L":76,"M":77,"N":78,"O":79,"P":80,"Q":
81,"R":82,"S":83,"T":84,"U":85,"V":86,"W":87,"X":88,"Y":89,"Z":90,"[":91,"\\":92,"]":93,"^":94,"_":95,"`":96,
"a":97,"b":98,"c":99,"d":100,"e":101,"f":102,"g":103,"h":104,"i":105,"j":106,"k":107,"l":108,"m":109,"n":110,
"o":111,"p":112,"q":113,"r":114,"s":115,"t":116,"u":117,"v":118,"w":119,"x":120,"y":121,"z":122,"{":123,"|":
124,"}":125,"~":126,"\u0121":127,"\u0122":128,"\u0123":129,"\u0124":130,"\u0125":131,"\u0126":132,"\u0127":133
,"\u0128":134,"\u0129":135,"\u012a":136,"\u012b":137,"\u012c":138,"\u012d":139,"\u012e":140,"\u012f":141,
"\u0130":142,"\u0131":143,"\u0132":144,"\u0133":145,"\u0134":146,"\u0135":147,"\u0136":148,"\u0137":149,
"\u0138":150,"\u0139":151,"\u013a":152,"\u013b":153,"\u013c":154,"\u013d":155,"\u013e":156,"\u013f":157,
"\u0140":158,"\u0141":159,"\u0142":160,"\u00a1":161,"\u00a2":162,"\u00a3":163,"\u00a4":164,"\u00a5":165,
"\u00a6":166,"\u00a7":167,"\u00a8":168,"\u00a9":169,"\u00aa":170,"\u00ab":171,"\u00ac":172,"\u0143":173,
"\u00ae":174,"\u00af":175,"\u00b0":176,"\u00b1":177,"\u00b2":178,"\u00b3":179,"\u00b4":180,"\u00b5":181,
"\u00b6":182,"\u00b7":183,"\u00b8":184,"\u00b9":185,"\u00ba":186,"\u00bb":187,"\u00bc":188,"\u00bd":189,
"\u00be":190,"\u00bf":191,"\u00c0":192,"\u00c1":193,"\u00c2":194,"\u00c3":195,"\u00c4":196,"\u00c5":197,
"\u00c6":198,"\u00c7":199,"\u00c8":200,"\u00c9":201,"\u00ca":202,"\u00cb":203,"\u00cc":204,"\u00cd":205,
"\u00ce":206,"\u00cf":207,"\u00d0":208,"\u00d1":209,"\u00d2":210,"\u00d3":211,"\u00d4":212,"\u00d5":213,
"\u00d6":214,"\u00d7":215,"\u00d8":216,"\u00d9":217,"\u00da":218,"\u00db":219,"\u00dc":220,"\u00dd":221,
"\u00de":222,"\u00df":223,"\u00e0":224,"\u00e1":225,"\u00e2":226,"\u00e3":227,"\u00e4":228,"\u00e5":229,
"\u00e6":230,"\u00e7":231,"\u00e8":232,"\u00e9":233,"\u00ea":234,"\u00eb":235,"\u00ec":236,"\u00ed":237,
"\u00ee":238,"\u00ef":239,"\u00f0":240,"\u00f1":241,"\u00f2":242,"\u00f3":243,"\u00f4":244,"\u00f5":245,
"\u00f6":246,"\u00f7":247,"\u00f8":248,"\u00f9":249,"\u00fa":250,"\u00fb":251,"\u00fc":252,"\u00fd":253,
"\u00fe":254,"\u00ff":255,"\u0120t":256,"he":257,"\u0120the":258,"in":259,"ing":260,"er":261,"ll":262,
"\u0120w":263,"or":264,"\u0120wor":265,"\u0120worl":266,"\u0120world":267,"\u010a\u010a":268,"12":269,"123":
270,"34":271,"45":272,"LA":273,"'s":274,"'M":275,"'R":276,"'RE":277,"\u0120\u0120":278,"\u0120x":279,"(h":280,
"!!":281,"!!\u010a":282,"ca":283,"caf":284,"ab":285,"abc":286,"\u0120hello":287,"abcabc":288},"merges":[
["\u0120","t"],["h","e"],["\u0120t","he"],["i","n"],["in","g"],["e","r"],["l","l"],["\u0120","w"],["o","r"],
["\u0120w","or"],["\u0120wor","l"],["\u0120worl","d"],["\u010a","\u010a"],["1","2"],["12","3"],["3","4"],["4"
,"5"],["L","A"],["'","s"],["'","M"],["'","R"],["'R","E"],["\u0120","\u0120"],["\u0120","x"],["(","h"],["!","!"
],["!!","\u010a"],["c","a"],["ca","f"],["a","b"],["ab","c"]]}}
)json";
// clang-format on

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ctitan_tok_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = fs::path(path_) / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string shared_tokenizer_path() {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  const fs::path p = fs::path(src ? src : ".") / ".." / "shared" / "data" / "tokenizer.json";
  return fs::exists(p) ? p.string() : std::string();
}

#define SKIP_WITHOUT_SHARED_TOKENIZER(path)                                     \
  const std::string path = shared_tokenizer_path();                             \
  if (path.empty())                                                             \
  GTEST_SKIP() << "no ../shared/data/tokenizer.json beside $CTITAN_SOURCE_DIR " \
                  "(the project was cloned alone)"

void expect_golden(const Tokenizer& tok, const std::vector<Golden>& goldens) {
  for (const Golden& g : goldens) {
    EXPECT_EQ(tok.encode(g.text), g.ids) << "text: \"" << g.text << "\"";
    if (g.round_trips) {
      EXPECT_EQ(tok.decode(g.ids), g.text);
    }
  }
}

// Asserts that loading `path` throws InputError whose message contains all
// of `parts`.
void expect_input_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    Tokenizer::from_file(path);
    ADD_FAILURE() << "no InputError for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(TokenizerHf, SharedTokenizerMatchesHfIds) {
  SKIP_WITHOUT_SHARED_TOKENIZER(path);
  expect_golden(Tokenizer::from_file(path), kSharedGolden);
}

TEST(TokenizerHf, Gpt2StyleMatchesHfIds) {
  TempDir dir;
  expect_golden(Tokenizer::from_file(dir.write("tokenizer.json", kGpt2Json)), kGpt2Golden);
}

TEST(TokenizerHf, Llama3StyleMatchesHfIds) {
  TempDir dir;
  expect_golden(Tokenizer::from_file(dir.write("tokenizer.json", kLlama3Json)), kLlama3Golden);
}

TEST(TokenizerHf, AddPrefixSpaceMatchesHfIds) {
  TempDir dir;
  std::string json = kGpt2Json;
  const std::string from = R"("add_prefix_space":false)";
  json.replace(json.find(from), from.size(), R"("add_prefix_space":true)");  // the pre_tokenizer's
  expect_golden(Tokenizer::from_file(dir.write("tokenizer.json", json)), kGpt2PrefixGolden);
}

TEST(TokenizerRoundTrip, DecodeInvertsEncodeOnLosslessText) {
  TempDir dir;
  const Tokenizer gpt2 = Tokenizer::from_file(dir.write("a.json", kGpt2Json));
  const Tokenizer llama = Tokenizer::from_file(dir.write("b.json", kLlama3Json));
  const std::string text =
      "The quick brown fox\n\n  jumps\tover 12345 lazy dogs; café, Ωmega, 日本語 😀 <|endoftext|> "
      "it's DONE.\r\n";
  EXPECT_EQ(gpt2.decode(gpt2.encode(text)), text);
  EXPECT_EQ(llama.decode(llama.encode(text)), text);
  EXPECT_GT(gpt2.encode(text).size(), 20u);
}

TEST(TokenizerRoundTrip, SharedTokenizerRoundTripsWhatHfKeeps) {
  SKIP_WITHOUT_SHARED_TOKENIZER(path);
  const Tokenizer tok = Tokenizer::from_file(path);
  // Under HF semantics this tokenizer keeps only printable ASCII (see
  // tokenizer.h), so that is the text that can round-trip.
  const std::string text =
      "<|begin_of_text|>Hello,world!(x=1;y=[2,3])'quoted'\"double\"~<|end_of_text|>";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.encode("a b\n\tc é"), (std::vector<int64_t>{97, 98, 99}));
  // Vocab entries written as raw strings decode to themselves, as in HF.
  EXPECT_EQ(tok.decode({262, 283}), " the of");
  EXPECT_EQ(tok.decode({250}), "\\xfa");
}

TEST(TokenizerRoundTrip, DecodeReplacesInvalidUtf8LikeHf) {
  TempDir dir;
  const Tokenizer tok = Tokenizer::from_file(dir.write("t.json", kGpt2Json));
  // Byte ids 0xE6 0x97 start a 3-byte char; HF's from_utf8_lossy gives one
  // U+FFFD for the truncated sequence, one per stray byte.
  EXPECT_EQ(tok.decode({230, 151}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode({230, 65, 195}),
            "\xEF\xBF\xBD"
            "A"
            "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode({72, 99999, -1, 105}), "Hi");  // unknown ids skipped, as HF does
}

TEST(TokenizerSpecial, SharedTokenizerIdsFromConfig) {
  SKIP_WITHOUT_SHARED_TOKENIZER(path);
  const Tokenizer tok = Tokenizer::from_file(fs::path(path).parent_path().string());  // folder form
  EXPECT_EQ(tok.vocab_size(), 2020);
  EXPECT_EQ(tok.bos_id(), 2002);
  EXPECT_EQ(tok.eos_id(), 2003);
  EXPECT_EQ(tok.token_to_id("<|pad|>"), 2001);
  EXPECT_EQ(tok.encode("x<|end_of_text|>"), (std::vector<int64_t>{120, 2003}));
}

TEST(TokenizerSpecial, FixturesGuessBosEosAndCountVocab) {
  TempDir dir;
  const Tokenizer gpt2 = Tokenizer::from_file(dir.write("a.json", kGpt2Json));
  EXPECT_EQ(gpt2.vocab_size(), 290);
  EXPECT_EQ(gpt2.bos_id(), -1);
  EXPECT_EQ(gpt2.eos_id(), 287);  // <|endoftext|>
  const Tokenizer llama = Tokenizer::from_file(dir.write("b.json", kLlama3Json));
  EXPECT_EQ(llama.vocab_size(), 291);
  EXPECT_EQ(llama.bos_id(), 289);
  EXPECT_EQ(llama.eos_id(), 290);
}

TEST(TokenizerSpecial, ConfigBesideFileAddsTokensAndNamesBosEos) {
  TempDir dir;
  const std::string path = dir.write("tokenizer.json", kGpt2Json);
  dir.write("tokenizer_config.json", R"({
    "added_tokens_decoder": {"300": {"content": "<|user|>", "special": true},
                             "301": {"content": "<|bot|>", "special": true}},
    "bos_token": {"content": "<|bot|>", "__type": "AddedToken"}, "eos_token": "<|endoftext|>"})");
  const Tokenizer tok = Tokenizer::from_file(path);
  // Like HF, new tokens take the next free ids, whatever the file says.
  EXPECT_EQ(tok.token_to_id("<|user|>"), 290);
  EXPECT_EQ(tok.bos_id(), 291);
  EXPECT_EQ(tok.eos_id(), 287);
  EXPECT_EQ(tok.vocab_size(), 292);
  EXPECT_EQ(tok.encode("<|user|>x<|bot|>"), (std::vector<int64_t>{290, 120, 291}));
  EXPECT_EQ(tok.decode({290, 120, 291}), "<|user|>x<|bot|>");
}

TEST(TokenizerErrors, MissingFileOrFolder) {
  TempDir dir;
  expect_input_error(dir.path() + "/nope.json", {"nope.json", "no such file"});
  expect_input_error(dir.path(), {"tokenizer.json", "no such file"});
}

TEST(TokenizerErrors, GarbledJsonNamesLineAndColumn) {
  TempDir dir;
  const std::string path =
      dir.write("tokenizer.json", "{\n  \"model\": {\n    \"type\": BPE\n  }\n}\n");
  expect_input_error(path, {path + ":3:", "not valid JSON"});
  expect_input_error(dir.write("empty.json", ""), {"empty.json:", "not valid JSON"});
}

TEST(TokenizerErrors, UnsupportedOrInconsistentContent) {
  TempDir dir;
  expect_input_error(dir.write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"),
                     {"wp.json", "unsupported model type \"WordPiece\""});
  expect_input_error(dir.write("meta.json", R"({"pre_tokenizer": {"type": "Metaspace"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
                     {"meta.json", "unsupported pre_tokenizer \"Metaspace\""});
  expect_input_error(dir.write("merge.json", R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})"),
                     {"merge.json", "model.merges[0]", "missing from the vocab"});
  expect_input_error(
      dir.write("split.json", R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "use_regex": false}]}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
      {"split.json", "unsupported Split pattern"});
  expect_input_error(dir.write("shape.json", R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": ["a", "b"], "merges": []}})"),
                     {"shape.json", "model.vocab must be an object"});
}

TEST(TokenizerErrors, ConfigNamingUnknownBosToken) {
  TempDir dir;
  const std::string path = dir.write("tokenizer.json", kGpt2Json);
  const std::string config = dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  expect_input_error(path, {config, "bos_token \"<s>\""});
}

}  // namespace
}  // namespace ctitan
