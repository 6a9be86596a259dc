// The rendezvous store's wire format: how TCPStore clients and the server on rank 0 frame
// their requests and replies. Plain C++ (no module, no brrr type) so that a fuzzer can call
// the parsers directly: they take untrusted bytes from the network, never throw, never read
// past `size`, and accept only well-formed messages within the limits below.
//
// Frame: u32 payload length (little-endian, at most max_payload), then the payload.
// Strings are u32 length + bytes; integers little-endian two's complement.
//   request  payload: u8 command, then
//     hello        u32 magic, u8 version              (first request of every connection)
//     set          key, value
//     get          key                                (reply: value or not_found)
//     add          key, i64 delta                     (reply: number, the new value)
//     check        u32 n, n keys                      (reply: boolean, all present)
//     wait         i64 timeout_ms > 0, u32 n, n keys  (reply: ready, or timed_out at the deadline)
//     delete_key   key                                (reply: boolean, it existed)
//     compare_set  key, expected, desired             (reply: value, the value afterwards)
//   reply    payload: u8 status, then
//     ok | ready | timed_out | not_found   nothing
//     value        string                 number   i64
//     boolean      u8 0 or 1              error    string (a message)
// Keys are 1..max_key bytes; a request carries at most max_keys keys; no trailing bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace brrr::dist::wire {

inline constexpr std::uint32_t magic = 0x53525242;  // "BRRS" as little-endian bytes
inline constexpr std::uint8_t version = 1;
inline constexpr std::size_t max_payload = 64u << 20;  // a frame's payload, bytes
inline constexpr std::size_t max_key = 4096;           // bytes of one key
inline constexpr std::size_t max_keys = 4096;          // keys of one check/wait

enum class Command : std::uint8_t { hello = 1, set, get, add, check, wait, delete_key, compare_set };
enum class Status : std::uint8_t { ok = 0, value, number, boolean, ready, timed_out, not_found, error };

/// "set", "get", ...; "?" for a value outside the enum.
const char* to_string(Command c);

struct Request {
  Command command = Command::hello;
  std::vector<std::string> keys;  ///< one for set/get/add/delete_key/compare_set
  std::string value;              ///< set: the value; compare_set: expected
  std::string desired;            ///< compare_set
  std::int64_t number = 0;        ///< add: delta; wait: timeout in ms; hello: magic
  std::uint8_t version = 0;       ///< hello
};

struct Reply {
  Status status = Status::ok;
  std::string value;        ///< value; error: the message
  std::int64_t number = 0;  ///< number; boolean: 0 or 1
};

enum class Parse : std::uint8_t {
  complete,    ///< one whole message was read: `consumed` bytes
  incomplete,  ///< a valid prefix: read more bytes and parse again
  invalid,     ///< malformed or over a limit: `error` says why; close the connection
};

template <class Message> struct ParseResult {
  Parse status = Parse::incomplete;
  std::size_t consumed = 0;
  Message message;
  std::string error;
};

/// Parses the first frame of data[0, size) as a request.
ParseResult<Request> parse_request(const std::uint8_t* data, std::size_t size) noexcept;
/// Parses the first frame of data[0, size) as a reply.
ParseResult<Reply> parse_reply(const std::uint8_t* data, std::size_t size) noexcept;

/// One frame (length + payload) holding `request` / `reply`. The caller keeps within the
/// limits (the client checks key sizes before it encodes).
std::string encode(const Request& request);
std::string encode(const Reply& reply);

}  // namespace brrr::dist::wire
