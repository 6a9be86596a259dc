// The store's wire format (dist/store_protocol.hpp): strict, bounded parsers and the encoders.
#include "dist/store_protocol.hpp"

#include <new>

namespace brrr::dist::wire {

const char* to_string(Command c) {
  switch (c) {
    case Command::hello: return "hello";
    case Command::set: return "set";
    case Command::get: return "get";
    case Command::add: return "add";
    case Command::check: return "check";
    case Command::wait: return "wait";
    case Command::delete_key: return "delete_key";
    case Command::compare_set: return "compare_set";
  }
  return "?";
}

namespace {

// A cursor over one payload; every read checks the bytes left, and a failed read sets `bad`
// with the reason (the first one is kept).
struct Reader {
  const std::uint8_t* p;
  std::size_t left;
  const char* bad = nullptr;

  bool fail(const char* why) {
    if (!bad) bad = why;
    return false;
  }
  bool u8(std::uint8_t& v) {
    if (left < 1) return fail("payload ends inside a field");
    v = *p++;
    --left;
    return true;
  }
  bool u32(std::uint32_t& v) {
    if (left < 4) return fail("payload ends inside a field");
    v = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
        static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
    p += 4;
    left -= 4;
    return true;
  }
  bool i64(std::int64_t& v) {
    if (left < 8) return fail("payload ends inside a field");
    std::uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = u << 8 | p[i];
    v = static_cast<std::int64_t>(u);
    p += 8;
    left -= 8;
    return true;
  }
  bool string(std::string& s, std::size_t limit, const char* too_long) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n > limit) return fail(too_long);
    if (n > left) return fail("a string runs past the payload");
    s.assign(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return true;
  }
  bool key(std::string& s) {
    if (!string(s, max_key, "a key is longer than the limit")) return false;
    if (s.empty()) return fail("a key is empty");
    return true;
  }
  bool keys(std::vector<std::string>& out) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n == 0) return fail("no keys");
    if (n > max_keys) return fail("more keys than the limit");
    // Each key takes at least 5 bytes: a count that cannot fit is rejected before reserving.
    if (n > left / 5) return fail("more keys than the payload can hold");
    out.resize(n);
    for (auto& k : out)
      if (!key(k)) return false;
    return true;
  }
};

// The frame around a payload: its length, then the payload itself once all of it is there.
template <class Message, class Body>
ParseResult<Message> parse_frame(const std::uint8_t* data, std::size_t size, Body&& body) noexcept {
  ParseResult<Message> r;
  if (size < 4) return r;  // incomplete
  std::size_t n = static_cast<std::size_t>(data[0]) | static_cast<std::size_t>(data[1]) << 8 |
                  static_cast<std::size_t>(data[2]) << 16 | static_cast<std::size_t>(data[3]) << 24;
  if (n == 0 || n > max_payload) {
    r.status = Parse::invalid;
    r.error = n == 0 ? "empty payload" : "payload of " + std::to_string(n) + " bytes is over the limit";
    return r;
  }
  if (size - 4 < n) return r;  // incomplete
  try {
    Reader in{data + 4, n};
    if (body(in, r.message) && in.left != 0) in.fail("trailing bytes after the message");
    if (in.bad) {
      r.status = Parse::invalid;
      r.error = in.bad;
      r.message = Message{};
      return r;
    }
  } catch (const std::bad_alloc&) {  // bounded sizes make this unlikely, but never throw
    r.status = Parse::invalid;
    r.error = "out of memory";
    r.message = Message{};
    return r;
  }
  r.status = Parse::complete;
  r.consumed = 4 + n;
  return r;
}

}  // namespace

ParseResult<Request> parse_request(const std::uint8_t* data, std::size_t size) noexcept {
  return parse_frame<Request>(data, size, [](Reader& in, Request& m) {
    std::uint8_t c = 0;
    if (!in.u8(c)) return false;
    m.keys.clear();
    switch (c) {
      case static_cast<std::uint8_t>(Command::hello): {
        m.command = Command::hello;
        std::uint32_t mg = 0;
        if (!in.u32(mg) || !in.u8(m.version)) return false;
        m.number = mg;
        return true;
      }
      case static_cast<std::uint8_t>(Command::set):
        m.command = Command::set;
        m.keys.resize(1);
        return in.key(m.keys[0]) && in.string(m.value, max_payload, "a value is over the limit");
      case static_cast<std::uint8_t>(Command::get):
      case static_cast<std::uint8_t>(Command::delete_key):
        m.command = static_cast<Command>(c);
        m.keys.resize(1);
        return in.key(m.keys[0]);
      case static_cast<std::uint8_t>(Command::add):
        m.command = Command::add;
        m.keys.resize(1);
        return in.key(m.keys[0]) && in.i64(m.number);
      case static_cast<std::uint8_t>(Command::check):
        m.command = Command::check;
        return in.keys(m.keys);
      case static_cast<std::uint8_t>(Command::wait):
        m.command = Command::wait;
        if (!in.i64(m.number)) return false;
        if (m.number <= 0) return in.fail("a wait's timeout must be positive");
        return in.keys(m.keys);
      case static_cast<std::uint8_t>(Command::compare_set):
        m.command = Command::compare_set;
        m.keys.resize(1);
        return in.key(m.keys[0]) && in.string(m.value, max_payload, "a value is over the limit") &&
               in.string(m.desired, max_payload, "a value is over the limit");
      default: return in.fail("unknown command");
    }
  });
}

ParseResult<Reply> parse_reply(const std::uint8_t* data, std::size_t size) noexcept {
  return parse_frame<Reply>(data, size, [](Reader& in, Reply& m) {
    std::uint8_t s = 0;
    if (!in.u8(s)) return false;
    switch (s) {
      case static_cast<std::uint8_t>(Status::ok):
      case static_cast<std::uint8_t>(Status::ready):
      case static_cast<std::uint8_t>(Status::timed_out):
      case static_cast<std::uint8_t>(Status::not_found):
        m.status = static_cast<Status>(s);
        return true;
      case static_cast<std::uint8_t>(Status::value):
      case static_cast<std::uint8_t>(Status::error):
        m.status = static_cast<Status>(s);
        return in.string(m.value, max_payload, "a value is over the limit");
      case static_cast<std::uint8_t>(Status::number):
        m.status = Status::number;
        return in.i64(m.number);
      case static_cast<std::uint8_t>(Status::boolean): {
        m.status = Status::boolean;
        std::uint8_t b = 2;
        if (!in.u8(b)) return false;
        if (b > 1) return in.fail("a boolean is neither 0 nor 1");
        m.number = b;
        return true;
      }
      default: return in.fail("unknown reply status");
    }
  });
}

namespace {
void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}
void put_i64(std::string& s, std::int64_t v) {
  auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(u >> (8 * i) & 0xff));
}
void put_string(std::string& s, const std::string& v) {
  put_u32(s, static_cast<std::uint32_t>(v.size()));
  s += v;
}
std::string frame(const std::string& payload) {
  std::string out;
  out.reserve(4 + payload.size());
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  return out + payload;
}
}  // namespace

std::string encode(const Request& m) {
  std::string p(1, static_cast<char>(m.command));
  auto one_key = [&] { put_string(p, m.keys.empty() ? std::string() : m.keys[0]); };
  auto all_keys = [&] {
    put_u32(p, static_cast<std::uint32_t>(m.keys.size()));
    for (const auto& k : m.keys) put_string(p, k);
  };
  switch (m.command) {
    case Command::hello:
      put_u32(p, static_cast<std::uint32_t>(m.number));
      p.push_back(static_cast<char>(m.version));
      break;
    case Command::set: one_key(); put_string(p, m.value); break;
    case Command::get:
    case Command::delete_key: one_key(); break;
    case Command::add: one_key(); put_i64(p, m.number); break;
    case Command::check: all_keys(); break;
    case Command::wait: put_i64(p, m.number); all_keys(); break;
    case Command::compare_set: one_key(); put_string(p, m.value); put_string(p, m.desired); break;
  }
  return frame(p);
}

std::string encode(const Reply& m) {
  std::string p(1, static_cast<char>(m.status));
  switch (m.status) {
    case Status::ok:
    case Status::ready:
    case Status::timed_out:
    case Status::not_found: break;
    case Status::value:
    case Status::error: put_string(p, m.value); break;
    case Status::number: put_i64(p, m.number); break;
    case Status::boolean: p.push_back(m.number ? 1 : 0); break;
  }
  return frame(p);
}

}  // namespace brrr::dist::wire
