#pragma once
// A `parspec serve` process on an ephemeral loopback port, and a raw HTTP/1.1
// client (plain sockets: the tests need to send malformed bodies, read SSE
// byte for byte and hang up mid-stream).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace parspec::testing_support {

struct HttpReply {
  int status = 0;
  std::string headers, body;  // body de-chunked
};

// Sends `raw` (a whole request) and reads the reply until the server closes.
// `stop_after` > 0: hang up once that many body bytes arrived.
inline HttpReply http_raw(int port, const std::string& raw, size_t stop_after = 0) {
  HttpReply reply;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return reply;
  }
  for (size_t sent = 0; sent < raw.size();) {
    const ssize_t n = send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string data;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (stop_after > 0 && data.size() > stop_after + 512) break;
  }
  close(fd);
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string::npos) return reply;
  reply.headers = data.substr(0, end);
  std::sscanf(reply.headers.c_str(), "HTTP/1.1 %d", &reply.status);
  std::string body = data.substr(end + 4);
  if (reply.headers.find("Transfer-Encoding: chunked") != std::string::npos) {
    std::string plain;
    size_t pos = 0;
    while (pos < body.size()) {
      const size_t line_end = body.find("\r\n", pos);
      if (line_end == std::string::npos) break;
      const size_t len = std::stoul(body.substr(pos, line_end - pos), nullptr, 16);
      if (len == 0) break;
      plain += body.substr(line_end + 2, len);
      pos = line_end + 2 + len + 2;
    }
    body = plain;
  }
  reply.body = body;
  return reply;
}

inline HttpReply http_request(int port, const std::string& method, const std::string& path,
                              const std::string& body = "", const std::string& api_key = "",
                              size_t stop_after = 0) {
  std::string raw = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!api_key.empty()) raw += "Authorization: Bearer " + api_key + "\r\n";
  if (method == "POST")
    raw +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  raw += "\r\n" + body;
  return http_raw(port, raw, stop_after);
}

// `parspec serve ARGS --port 0` in the background; the port is read from its
// first line of output.
class ServerProcess {
 public:
  // Sanitized builds run several times slower: loading, and the start-up measurements some
  // strategies make (cosine times the target's forwards), take longer; and the server
  // finishes its requests before it exits.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  static constexpr int kStartTimeoutS = 600;
  static constexpr int kExitTimeoutS = 900;
#else
  static constexpr int kStartTimeoutS = 60;
  static constexpr int kExitTimeoutS = 60;
#endif

  ServerProcess(const std::string& binary, const std::vector<std::string>& args,
                const std::string& log_path)
      : log_path_(log_path) {
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      static const std::string serve = "serve";
      argv.push_back(const_cast<char*>(serve.c_str()));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kStartTimeoutS);
    while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
      std::ifstream in(log_path);
      std::stringstream s;
      s << in.rdbuf();
      const std::string text = s.str();
      const size_t at = text.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) port_ = std::atoi(text.c_str() + at + 30);
      int status = 0;
      if (port_ == 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() {
    // SIGTERM first, so that a sanitizer build reports leaks at the server's exit.
    if (pid_ > 0 && terminate(30) < 0 && pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    // A sanitizer's report in the server's output fails the test that started it.
    const std::string text = log();
    for (const char* marker : {"Sanitizer:", "runtime error:"})
      if (text.find(marker) != std::string::npos) {
        ADD_FAILURE() << "the server reported:\n" << text;
        break;
      }
  }
  int port() const {
    return port_;
  }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Sends SIGTERM and waits; the exit status (-1 if it did not exit in time).
  int terminate(int timeout_s = kExitTimeoutS) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace parspec::testing_support
