#include "messages/client_connection.h"

#include <stdexcept>

#include "messages/client_validation.h"

namespace troupe::messages {

ClientConnection::ClientConnection(const std::string& endpoint, const SocketLimits& limits, const CurveKeys& curve)
    : ctx_(1), socket_(connect_dealer(ctx_, endpoint, limits, curve)) {}

void ClientConnection::send(const Bytes& request) {
  socket_.send(zmq::buffer(request.data(), request.size()), zmq::send_flags::none);
}

bool ClientConnection::ping(std::chrono::milliseconds timeout) {
  const uint64_t id = next_id();
  send(ping_request(id, id));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const auto frame = receive(left);
    if (!frame) return false;
    const auto* r = check_response(*frame);
    if (r->client_request_id() == id && r->body_type() == wire::ResponseBody::Pong) return true;
  }
}

std::optional<Bytes> ClientConnection::receive(std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  zmq::message_t msg;
  if (!socket_.recv(msg, zmq::recv_flags::none)) return std::nullopt;
  Bytes b(static_cast<const char*>(msg.data()), msg.size());
  if (!check_response(b)) throw std::runtime_error("the server sent a frame that is not a valid Response");
  return b;
}

namespace {

// A Tokens frame: every sample's token ids; sample 0's text (to on_text),
// ids, logprobs and top alternatives.
void take_tokens(const wire::Tokens& t, int32_t samples, const std::function<void(std::string_view)>& on_text,
                 StreamOutcome& out) {
  if (t.sample() < 0 || t.sample() >= samples) return;
  if (t.token_ids()) {
    auto& st = out.sample_tokens[static_cast<size_t>(t.sample())];
    st.insert(st.end(), t.token_ids()->begin(), t.token_ids()->end());
  }
  if (t.sample() != 0) return;
  if (t.text()) {
    out.text += t.text()->str();
    if (on_text) on_text(t.text()->string_view());
  }
  if (t.token_ids()) out.tokens.insert(out.tokens.end(), t.token_ids()->begin(), t.token_ids()->end());
  if (t.logprobs()) out.logprobs.insert(out.logprobs.end(), t.logprobs()->begin(), t.logprobs()->end());
  if (t.top_ids()) out.top_ids.insert(out.top_ids.end(), t.top_ids()->begin(), t.top_ids()->end());
  if (t.top_logprobs()) out.top_logprobs.insert(out.top_logprobs.end(), t.top_logprobs()->begin(), t.top_logprobs()->end());
}

void read_counts(const wire::Done& d, DoneFields& usage) {
  usage.reason = d.finish_reason();
  usage.response_cache = d.response_cache();
  if (d.usage()) {
    usage.prompt_tokens = d.usage()->prompt_tokens();
    usage.cached_prompt_tokens = d.usage()->cached_prompt_tokens();
    usage.completion_tokens = d.usage()->completion_tokens();
  }
  if (d.timings()) {
    usage.queue_ms = d.timings()->queue_ms();
    usage.ttft_ms = d.timings()->ttft_ms();
    usage.per_token_ms = d.timings()->per_token_ms();
    usage.total_ms = d.timings()->total_ms();
  }
}

// How the answer was made: its speculation, its tiers' shares, its tool calls.
void read_provenance(const wire::Done& d, DoneFields& usage) {
  if (const auto* sp = d.speculation()) {
    usage.speculated = true;
    usage.spec_source = sp->source() ? sp->source()->str() : "";
    usage.spec_drafted = sp->drafted();
    usage.spec_accepted = sp->accepted();
    usage.spec_windows = sp->windows();
  }
  if (const auto* tiers = d.tiers())
    for (const auto* t : *tiers) usage.tiers.emplace_back(t->tier() ? t->tier()->str() : "", t->tokens());
  if (const auto* calls = d.tool_calls())
    for (const auto* c : *calls)
      usage.tool_calls.push_back({c->id() ? c->id()->str() : "", c->name() ? c->name()->str() : "",
                                  c->arguments() ? c->arguments()->str() : ""});
}

// A Done frame: its sample's end, and for sample 0 the whole answer's usage.
void take_done(const wire::Done& d, int32_t samples, StreamOutcome& out) {
  if (d.sample() >= 0 && d.sample() < samples) {
    auto& sd = out.sample_done[static_cast<size_t>(d.sample())];
    sd.reason = d.finish_reason();
    sd.sample = d.sample();
    if (d.usage()) sd.completion_tokens = d.usage()->completion_tokens();
  }
  if (d.sample() != 0) return;
  read_counts(d, out.usage);
  read_provenance(d, out.usage);
}

}  // namespace

StreamOutcome ClientConnection::stream(const Bytes& request, uint64_t id,
                                       const std::function<void(std::string_view)>& on_text,
                                       std::chrono::milliseconds timeout, int32_t samples) {
  if (!request.empty()) send(request);
  StreamOutcome out;
  out.sample_tokens.resize(static_cast<size_t>(samples));
  out.sample_done.resize(static_cast<size_t>(samples));
  int32_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      out.message = "timed out";
      return out;
    }
    auto frame = receive(left);
    if (!frame) continue;
    const auto* r = check_response(*frame);
    if (r->client_request_id() != id) continue;
    switch (r->body_type()) {
      case wire::ResponseBody::Accepted: out.prompt_tokens = r->body_as_Accepted()->prompt_tokens(); break;
      case wire::ResponseBody::Tokens: take_tokens(*r->body_as_Tokens(), samples, on_text, out); break;
      case wire::ResponseBody::Done:
        take_done(*r->body_as_Done(), samples, out);
        if (++done == samples) {
          out.done = true;
          return out;
        }
        break;
      case wire::ResponseBody::Error:
        out.error = r->body_as_Error()->code();
        out.message = r->body_as_Error()->message() ? r->body_as_Error()->message()->str() : "";
        return out;
      default: break;
    }
  }
}

}  // namespace troupe::messages
