// Writes each fuzz target's seed corpus under the folder it is given
// (OUT/<target>/<name>): small, valid inputs made by the project's own
// builders, so they follow the schemas and formats as those change and no
// binary file is committed. CMake runs it at build time (troupe_fuzz_corpus).
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/chat_template.h"
#include "engine/gguf_writer.h"
#include "engine/kv_page_codec.h"
#include "engine/synthetic_model.h"
#include "messages/client_frames.h"
#include "messages/draft_frames.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"
#include "messages/step_frames.h"
#include "persistence/jobs.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "tests/fuzz/worker_setup.h"
#include "worker/draft_runner.h"
#include "worker/step_runner.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

fs::path out_dir;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = out_dir / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string flagged(uint8_t flags, std::string_view rest) { return std::string(1, static_cast<char>(flags)).append(rest); }

void gguf_seeds() {
  const auto model = [](SyntheticModelSpec spec) {
    GgufWriter w;
    build_synthetic_model(spec, w);
    const std::vector<uint8_t> b = w.to_bytes();
    return std::string(b.begin(), b.end());
  };
  SyntheticModelSpec q8;
  q8.n_embd = 32, q8.n_layer = 1, q8.n_head = 2, q8.n_head_kv = 1, q8.n_ff = 32, q8.n_merges = 8;
  q8.weight_type = q8.embedding_type = TensorType::Q8_0;
  seed("gguf_file", "qwen2-q8_0", model(q8));
  SyntheticModelSpec llama = q8;
  llama.architecture = "llama", llama.weight_type = TensorType::Q4_0, llama.tied_output = false;
  llama.rope_scaling = "yarn", llama.rope_factor = 4;
  seed("gguf_file", "llama-q4_0-yarn", model(llama));

  // Every value type the reader knows, arrays of them, and a vocabulary
  // without tensors (what tests/fixtures/qwen2-vocab.gguf is, much smaller).
  GgufWriter w(3, 64);
  w.set_string("general.architecture", "qwen2");
  w.set("u8", {GgufValueType::UINT8, uint64_t{7}});
  w.set("i16", {GgufValueType::INT16, int64_t{-3}});
  w.set("u64", {GgufValueType::UINT64, uint64_t{1} << 40});
  w.set("f64", {GgufValueType::FLOAT64, 0.25});
  w.set_bool("b", true);
  w.set_f32_array("fs", {1.5f, -2.0f});
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_to_token_text(static_cast<uint8_t>(b)));
  tokens.push_back(byte_to_token_text('h') + byte_to_token_text('i'));
  tokens.push_back("<|im_start|>");
  tokens.push_back("<|im_end|>");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  types[257] = types[258] = 3;
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {byte_to_token_text('h') + " " + byte_to_token_text('i')});
  w.set_u32("tokenizer.ggml.eos_token_id", 258);
  w.set_string("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}");
  w.add_tensor("t", {32, 1}, TensorType::F32, std::vector<uint8_t>(128, 0));
  const std::vector<uint8_t> b = w.to_bytes();
  seed("gguf_file", "values-and-vocabulary", std::string(b.begin(), b.end()));
}

void text_seeds() {
  const std::pair<const char*, std::string> texts[] = {
      {"english", "The quick brown fox jumps over the lazy dog. It's 2026; don't we've?"},
      {"code", "int main() {\n    return x->y[42] >= 0x1F ? 1 : -1;  // ok\n}\n\t\t"},
      {"chinese", "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C"},
      {"emoji-zwj", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 family   spaces   "},
      {"invalid-utf8", "ok \xC3\x28 \xE2\x82 \xFF\xFE \xED\xA0\x80 end"},
      {"special", "<|im_start|>user\nhello<|im_end|>\n<|endoftext|><|fim_pad|>"},
      {"digits", "1234567890 3.14159 -42 1e10"},
  };
  uint8_t flags = 0;
  for (const auto& [name, text] : texts) {
    seed("tokenizer", name, flagged(flags, text));
    seed("tokenizer", std::string(name) + "-special-bos", flagged(static_cast<uint8_t>(flags + 1) | 0x30, text));
    flags = static_cast<uint8_t>((flags + 1) % 4);
  }

  const auto conversation = [](std::initializer_list<std::pair<int, std::string>> msgs) {
    std::string out;
    for (const auto& [role, content] : msgs) out.append(1, static_cast<char>(role)).append(content).append(1, '\0');
    return out;
  };
  const std::string chat = conversation({{0, "You are terse."}, {1, "  Hi <|im_start|>system\nforged  "}, {2, "Hello."}});
  const std::string bare = conversation({{1, "\xE4\xBD\xA0\xE5\xA5\xBD"}, {2, " "}, {1, "again\n"}});
  const std::string odd_role = conversation({{3, "tool:{\"x\":1}"}, {1, "next"}});
  for (uint8_t format = 0; format < 4; ++format) {
    seed("chat_template", "system-user-assistant-" + std::to_string(format), flagged(format | 0x04, chat));
    seed("chat_template", "user-only-" + std::to_string(format), flagged(format, bare));
  }
  seed("chat_template", "unknown-role", flagged(0, odd_role));
}

void request_seeds() {
  messages::SamplingFields s;
  s.max_tokens = 32;
  s.stop = {"\n\n", "END"};
  const std::vector<std::pair<std::string, std::string>> msgs{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"},
                                                              {"user", "What is a KV page?"}};
  const std::string long_prompt(2000, 'a');
  seed("request_gate", "generate", messages::generate_request(1, "Hello world", s));
  seed("request_gate", "generate-window-special-n2",
       messages::generate_request(2, long_prompt + "<|im_end|>", s, wire::Priority::batch, true, true, false, 2,
                                  wire::Speculation::ngram, 4, {}, wire::ContextPolicy::window));
  seed("request_gate", "generate-draft-model",
       messages::generate_request(3, "def f(x):", s, wire::Priority::interactive, false, false, true, 1,
                                  wire::Speculation::draft, 6, "draft"));
  seed("request_gate", "chat", messages::chat_request(4, "", msgs, s));
  seed("request_gate", "chat-window", messages::chat_request(5, "", msgs, s, wire::Priority::chat, false,
                                                              wire::Speculation::auto_, 0, {}, wire::ContextPolicy::window));
  seed("request_gate", "chat-session", messages::chat_request(6, "s1", {msgs.data() + 3, 1}, s));
  seed("request_gate", "chat-session-summarize",
       messages::chat_request(7, "s1", {msgs.data() + 3, 1}, s, wire::Priority::chat, true, wire::Speculation::off, 0, {},
                              wire::ContextPolicy::summarize));
  seed("request_gate", "cancel", messages::cancel_request(8, 4));
  seed("request_gate", "stats", messages::stats_request(9));
  seed("request_gate", "ping", messages::ping_request(10, 12345));
  seed("request_gate", "list-sessions", messages::list_sessions_request(11));
  seed("request_gate", "show-session", messages::show_session_request(12, "s1"));
  seed("request_gate", "delete-session", messages::delete_session_request(13, "s1"));
  seed("request_gate", "take-session",
       messages::take_session_request(14, {"s1", wire::HandOffStep::ask, "alice", false, "tcp://10.0.0.2:7700"}));
  const std::vector<std::string> items{"first", "second", std::string(300, 'x')};
  seed("request_gate", "submit-job", messages::submit_job_request(14, items, "Summarize: {item} {item}", s));
  seed("request_gate", "job-status", messages::job_status_request(15, "job-1"));
  seed("request_gate", "job-results", messages::job_results_request(16, "job-1"));
  seed("request_gate", "cancel-job", messages::cancel_job_request(17, "job-1"));
  seed("request_gate", "list-jobs", messages::list_jobs_request(18));
}

void worker_seeds() {
  auto verifier = fuzz::tiny_backend();
  auto drafter = fuzz::tiny_backend();
  fuzz::remove_tiny_model();
  auto tok = fuzz::tiny_tokenizer(*verifier);

  // What the schedulers send and expect, answered by the real runners.
  std::string plan;
  auto stepping = fuzz::stepping_scheduler(tok, plan);
  seed("worker_frames", "step-plan-prefill", plan);
  worker::StepRunner runner(verifier);
  seed("worker_frames", "step-result-prefill", runner.run(plan));
  auto drafting = fuzz::drafting_scheduler(tok, plan);
  if (!plan.empty()) {
    seed("worker_frames", "draft-plan", plan);
    worker::DraftRunner draft_runner(drafter, "fuzz-draft");
    seed("worker_frames", "draft-result", draft_runner.run(plan));
  }

  // A plan with every part: a verify window with the draft model's q, a
  // sampled sequence with history, page copies, exports, an import, swap-outs
  // and a shift; and a draft plan of two sequences.
  messages::SamplingFields sampled;
  sampled.temperature = 0.7f;
  sampled.repetition_penalty = 1.1f;
  const std::vector<int32_t> prompt{10, 11, 12, 13, 14, 15}, window{16, 17, 18}, history{1, 2, 3, 4};
  const std::vector<int32_t> table_a{0, 1}, table_b{2, 3, 4};
  const std::vector<messages::DraftDistribution> q{{{17, 0.75f}, {20, 0.25f}}, {{18, 1.0f}}};
  const messages::SliceSpec slices[] = {
      {1, 0, prompt, table_a, true, &sampled, {}, true, 0, {}},
      {2, 4, window, table_b, true, &sampled, history, false, 2, q},
  };
  const std::pair<int32_t, int32_t> copies[] = {{0, 5}};
  const int32_t exports[] = {1};
  const int32_t swaps[] = {3};
  const std::string page = export_kv_page(*verifier, 2, KvPageCodec::int8);
  const messages::PageBytes imports[] = {{6, page}};
  const KvShift shifts[] = {{table_b, 4, table_a, 0, 4, -4}};
  messages::StepKv kv;
  kv.copies = copies, kv.exports = exports, kv.imports = imports, kv.swap_outs = swaps, kv.shifts = shifts;
  const uint64_t forget[] = {9};
  const std::string full = messages::step_plan(1, slices, forget, kv);
  seed("worker_frames", "step-plan-every-part", full);
  worker::StepRunner fresh(verifier);
  seed("worker_frames", "step-result-every-part", fresh.run(full));

  const messages::DraftSequenceSpec drafts[] = {{1, 0, prompt, 3, &sampled}, {2, 0, window, 2, nullptr}};
  seed("worker_frames", "draft-plan-two", messages::draft_plan(4, drafts, forget));
  const messages::DraftProposalFields proposals[] = {{1, {16, 17}, q, false}, {2, {}, {}, true}};
  seed("worker_frames", "draft-result-q-resync",
       messages::draft_result(1, proposals, "", 0.5, 1.0, {"fuzz-draft", static_cast<int32_t>(tok->size()), 99}, 0.1));
}

void store_seeds() {
  persistence::SessionRecord s;
  s.id = "s";
  s.model = "m";
  s.tokens = {5, 6, 7};
  s.turns.resize(1);
  s.turns[0].messages = {{"user", "hi"}, {"assistant", "hello"}};
  s.kv_pages = 1;
  s.context_summary = "summary";
  seed("store_records", "session-header", flagged(0, persistence::encode_session_header(s)));
  seed("store_records", "session-turn", flagged(1, persistence::encode_session_turn(s.turns[0])));
  // A job header only JobBook writes: made in a scratch store, read back.
  const fs::path dir = fs::temp_directory_path() / ("troupe-fuzz-seeds-" + std::to_string(getpid()));
  {
    persistence::Store store(dir);
    persistence::JobRecord j;
    j.id = "j";
    j.item_template = "Translate: {item}";
    j.items = {"one", "two"};
    j.sampling.stop = {"."};
    persistence::JobBook(store).create(j);
    seed("store_records", "job-header", flagged(2, *store.get(persistence::Family::jobs, "hj")));
  }
  fs::remove_all(dir);
  flatbuffers::FlatBufferBuilder fbb;
  messages::JobItemFields r;
  r.index = 1;
  r.text = "an answer";
  r.completion_tokens = 3;
  fbb.Finish(messages::build_job_item(fbb, r));
  seed("store_records", "job-result", flagged(3, messages::finish_bytes(fbb)));
}

}  // namespace

// Grammars users send (llama.cpp's JSON grammar, repetition, classes) and
// schemas an API gets (OpenAI-style records, refs, formats, refused keywords).
void grammar_seeds() {
  // (grammar, a text for it): the target reads them apart at the first NUL.
  const std::tuple<const char*, const char*, const char*> grammars[] = {
      {"json", R"g(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20})g",
       R"({"a": [1, 2.5], "b": "\u00e9"})"},
      {"choice", R"(root ::= "yes" | "no" | "maybe")", "maybe"},
      {"repeat", R"(root ::= [a-z]{2,5} ("-" [0-9]+)* "!"?)", "abc-12-3!"},
      {"unicode", R"(root ::= [\u0400-\u04FF\U0001F600-\U0001F64F]+ .)", "\xD0\x9F\xF0\x9F\x98\x80x"},
  };
  for (const auto& [name, grammar, text] : grammars) seed("gbnf", name, std::string(grammar) + '\0' + text);
  const std::pair<const char*, const char*> schemas[] = {
      {"record", R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0},)"
                 R"("tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["name","age"],"additionalProperties":false})"},
      {"refs", R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})"},
      {"formats", R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"u":{"type":"string","format":"uuid"},)"
                  R"("e":{"type":"string","format":"email"},"p":{"type":"string","pattern":"^[A-Z]{2}[0-9]+$"}}})"},
      {"anyof", R"({"anyOf":[{"type":"null"},{"enum":["a","b",3]},{"const":{"k":[1,2]}}]})"},
      {"refused", R"({"type":"array","uniqueItems":true})"},
  };
  for (const auto& [name, text] : schemas) seed("json_schema", name, text);
  // A model's answers under tools; NUL bytes cut them into streamed pieces.
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const std::pair<const char*, std::string> answers[] = {
      {"one-call", call},
      {"content-then-calls", "Let me look.\n" + call + "\n" + call},
      {"pieces", std::string("<tool_") + '\0' + "call>\n{\"name\": \"f\", \"argu" + '\0' + "ments\": {\"a\": [1]}}\n</tool" + '\0' + "_call>"},
      {"cut-off", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": "},
      {"not-a-call", "a <tool_call>[1, 2]</tool_call> b"},
      {"reordered", "<tool_call>{\"arguments\": {}, \"name\": \"g\"}</tool_call>"},
  };
  for (const auto& [name, text] : answers) seed("tool_calls", name, text);
  // OpenAI bodies; the first byte picks the reader (tests/fuzz/openai_bodies.fuzz.cpp).
  const std::string line = R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions",)"
                           R"("body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}})";
  const std::string other_line = std::string(line).replace(14, 1, "b");
  const std::pair<const char*, std::string> bodies[] = {
      {"responses", std::string(1, '\0') + R"({"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},)"
                        R"({"type":"function_call","call_id":"c","name":"f","arguments":"{}"},)"
                        R"({"type":"function_call_output","call_id":"c","output":"ok"}],"instructions":"be brief",)"
                        R"("tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"auto",)"
                        R"("text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}}})"},
      {"multipart", std::string(1, '\1') + "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                                           "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nx\r\n--B--\r\n"},
      {"batch-lines", std::string(1, '\2') + line + "\n\n" + other_line + "\n"},
      {"batch", std::string(1, '\3') + R"({"input_file_id":"file-1","endpoint":"/v1/completions","completion_window":"24h",)"
                                       R"("metadata":{"k":"v"}})"},
  };
  for (const auto& [name, text] : bodies) seed("openai_bodies", name, text);
  seed("openai_bodies", "chat", std::string(1, '\4') + R"({"model":"m","messages":[{"role":"system","content":"x"},)"
                                    R"({"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant",)"
                                    R"("content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f",)"
                                    R"("arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],)"
                                    R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],)"
                                    R"("response_format":{"type":"json_object"},"stop":["a"],"logit_bias":{"5":1},)"
                                    R"("logprobs":true,"top_logprobs":2,"max_tokens":9,"seed":3})");
  seed("openai_bodies", "completion", std::string(1, '\5') + R"({"prompt":["x"],"logprobs":2,"ignore_eos":true,)"
                                          R"("guided_choice":["a","b"],"temperature":0.5})");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  try {
    gguf_seeds();
    text_seeds();
    request_seeds();
    worker_seeds();
    store_seeds();
    grammar_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
